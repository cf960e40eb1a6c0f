"""Redaction by value, whatever the shape: a secret the process holds (an env key, a URL's password or its user
name when it has no password) never reaches a sink, in any of the forms it is commonly echoed in."""

from __future__ import annotations

import base64
import io as stdio
import json
import logging
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from biocheck import io
from biocheck.agent.report.render import render_html
from biocheck.agent.report.schema import Report, Summary
from biocheck.cli import app
from biocheck.secrets import MASK, PREFIX_CHARS, RedactingFilter, _prefix_chars, redact

runner = CliRunner()
# Key characters: what real keys hold (letters, digits, - _ . / + =, AWS-style) and & < > that HTML escapes.
KEY_CHARS = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./+=&<>"),
                    min_size=12, max_size=48)


def encodings(secret: str, user: str | None = None) -> dict[str, str]:
    """The forms a server or a writer turns a secret into; `user`: the URL's user name (Basic auth)."""
    half = len(secret) // 2
    forms = {
        "raw": secret,
        "base64": base64.b64encode(secret.encode()).decode(),
        "base64_inside": base64.b64encode(b"{'k': '" + secret.encode() + b"'}").decode(),
        "percent": urllib.parse.quote(secret, safe=""),
        "percent_every_byte": "".join(f"%{b:02x}" for b in secret.encode()),
        "html_named": secret.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"),
        "html_decimal": "".join(f"&#{ord(c)};" for c in secret),
        "html_hex": "".join(f"&#x{ord(c):X};" for c in secret),
        "prefix": secret[:-2],
        "wrapped": secret[:half] + "\n" + secret[half:],
        "wrapped_escaped": secret[:half] + "\\n" + secret[half:],  # in a JSON text or a repr
    }
    if user is not None:
        forms["basic_auth"] = "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()
    return forms


def leaked(text: str, secret: str, forms: dict[str, str]) -> list[str]:
    """The forms of `secret` found in `text`, and for base64, the secret itself once decoded."""
    found = [k for k, f in forms.items() if f in text]
    for word in text.replace('"', " ").replace("'", " ").split():
        try:
            if secret.encode() in base64.b64decode(word.removeprefix("Basic") + "==="):
                found.append(f"base64 {word}")
        except ValueError:
            pass
    return found


def sinks(text: str, tmp: Path) -> dict[str, str]:
    """What each sink makes of `text`: a CLI error line, a log line, a summary JSON, a Markdown file, an HTML
    report, each written by the code that writes them in BioCheck."""
    out = {"stderr": runner.invoke(app, ["search", "q", "--backend", text]).output}  # a usage error quotes it
    stream = stdio.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("biocheck.test_encodings")
    log.addHandler(handler)
    try:
        log.error("the server said %s", text)
    finally:
        log.removeHandler(handler)
    out["log"] = stream.getvalue()
    io.write_json_atomic(tmp / "summary.json", {"failed": [{"error": text}], text: 1})
    out["summary"] = (tmp / "summary.json").read_text(encoding="utf-8")
    out["summary_decoded"] = json.dumps(json.loads(out["summary"]), ensure_ascii=False)
    io.write_text_atomic(tmp / "report.md", f"# {text}\n")
    out["markdown"] = (tmp / "report.md").read_text(encoding="utf-8")
    page = render_html(Report(summary=Summary(justification=text)), {}, f"claim {text}")
    io.write_text_atomic(tmp / "report.html", page)
    out["html"] = (tmp / "report.html").read_text(encoding="utf-8")
    return out


def check(secret: str, forms: dict[str, str], tmp: Path) -> None:
    for name, form in forms.items():
        said = f"error from the server: <{form}> (retry later)"
        for sink, text in sinks(said, tmp).items():
            assert not leaked(text, secret, forms), (name, sink, text)
            assert "retry later" in text, (name, sink)  # the rest of the text is kept


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=KEY_CHARS, var=st.sampled_from(["OPENAI_API_KEY", "NCBI_API_KEY", "MY_SERVICE_TOKEN"]))
def test_an_env_key_in_any_encoding_reaches_no_sink(monkeypatch, tmp_path, secret, var):
    monkeypatch.setenv(var, secret)
    check(secret, encodings(secret), tmp_path)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=KEY_CHARS, user=st.from_regex(r"[a-z]{3,8}", fullmatch=True),
       var=st.sampled_from(["OPENAI_BASE_URL", "BIOCHECK_EUTILS_URL", "MLFLOW_TRACKING_URI"]))
def test_a_url_password_in_any_encoding_reaches_no_sink(monkeypatch, tmp_path, secret, user, var):
    monkeypatch.setenv(var, f"https://{user}:{urllib.parse.quote(secret, safe='')}@host.example.org/v1")
    check(secret, encodings(secret, user), tmp_path)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secret=KEY_CHARS, var=st.sampled_from(["OPENAI_BASE_URL", "BIOCHECK_EUTILS_URL", "MLFLOW_TRACKING_URI"]))
def test_a_token_as_a_url_user_name_reaches_no_sink(monkeypatch, tmp_path, secret, var):
    monkeypatch.setenv(var, f"https://{urllib.parse.quote(secret, safe='')}@host.example.org/v1")
    check(secret, encodings(secret), tmp_path)


def test_a_basic_auth_header_of_a_short_password_is_blanked(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "https://ann:pw7@host.example.org/v1")
    basic = base64.b64encode(b"ann:pw7").decode()
    assert redact(f"Authorization: Basic {basic}") == f"Authorization: Basic {MASK}"
    assert redact("https://ann:pw7@host") == f"https://ann:{MASK}@host"  # the user name stays readable


def test_a_prefix_is_blanked_from_its_minimum_length_and_not_below(monkeypatch):
    key = "sk-ant-api03-" + "Zq7Xw3Vt9Ku5Rs1Pn8Lm4Jh2Gf6Dc0Ba"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    assert _prefix_chars(len(key)) == PREFIX_CHARS
    assert redact(f"<{key[:PREFIX_CHARS]}>") == f"<{MASK}>"
    assert redact(f"<{key[:PREFIX_CHARS - 1]}>") == f"<{key[:PREFIX_CHARS - 1]}>"  # the vendor's public prefix
    assert _prefix_chars(10) == 8 and _prefix_chars(8) == 8  # a short key: at most 4 characters missing


@pytest.mark.parametrize("user", ["git", "admin", "postgres"])
def test_a_short_user_name_without_a_password_is_an_account_not_a_key(monkeypatch, user):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"https://{user}@host.example.org")
    assert redact(f"user {user} logged in") == (f"user {user} logged in" if len(user) < 8 else f"user {MASK} logged in")


def test_mlflow_params_and_tags_hold_no_encoded_secret(monkeypatch, tmp_path, mlflow_db):
    """The MLflow sink: every encoding as a param and a tag of a `check` run, read back from the store."""
    import mlflow

    from biocheck import tracking

    secret = "Zq7Xw3Vt9K&u5Rs/1Pn8Lm+4Jh2"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.delenv(tracking.PIPELINE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    forms = encodings(secret)
    with tracking.run("check", params={"llm": forms}, tags={f"said_{k}": f"<{v}> ok" for k, v in forms.items()}) as r:
        assert r is not None
        run_id = r.info.run_id
    data = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run_id).data
    stored = {**{f"param {k}": v for k, v in data.params.items()}, **{f"tag {k}": v for k, v in data.tags.items()}}
    assert {f"param llm.{k}" for k in forms} <= stored.keys() and {f"tag said_{k}" for k in forms} <= stored.keys()
    for where, value in stored.items():
        assert not leaked(value, secret, forms), (where, value)
