"""Secrets never leave the process in any written byte (issue 30, "Secrets"): a key an OpenAI-compatible
server puts into an ordinary 200 answer, a password inside a URL-valued variable, a key echoed in an
encoded form, a key shorter than the substring minimum. Every check runs the real CLI against a local fake
server and reads back every byte it wrote (trace, batch traces, summary.json) and printed (stdout, stderr)."""

from __future__ import annotations

import html
import json
import os
import urllib.parse
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck import io, secrets
from biocheck.cli import app
from biocheck.secrets import MASK, redact, secret_values
from tests.helpers.fake_eutils import FakeEutils
from tests.helpers.fake_openai import FakeOpenAI, assistant
from tests.helpers.turns import REPORT

runner = CliRunner()
KEY = "sk-proj-Zq7Xw3Vt9Ku5Rs1Pn8Lm4Jh2Gf6Dc0Ba"
PW = "pw-Zx81Kq40Lm"  # the password inside a URL-valued variable
# A key with the characters that encodings change: / + = and a space (AWS-style secret keys hold / and +).
ODD = "aws/Sec+ret=Key 9f8e7d6c"
CLAIM = "Vitamin D prevents fractures."


def _encodings(value: str) -> dict[str, str]:
    """The forms a server or a writer commonly turns a key into."""
    return {"raw": value, "quote": urllib.parse.quote(value), "quote_nosafe": urllib.parse.quote(value, safe=""),
            "quote_plus": urllib.parse.quote_plus(value), "json": json.dumps(value)[1:-1],
            "html": html.escape(value)}


def _echoing(*texts: str) -> FakeOpenAI:
    """A well-behaved server (200s only) whose tool call and final report quote `texts`: first a search whose
    arguments hold them, then the report with them in its summary."""
    said = " ".join(texts)

    def reply(body, _headers):
        if body["messages"][-1]["role"] == "tool":
            report = REPORT.replace("none found.", f"none found; the server says {said}.")
            return 200, assistant({"content": report})
        args = json.dumps({"query": "vitamin D AND fracture*", "note": said})
        return 200, assistant({"content": f"searching ({said})", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search_pubmed", "arguments": args}}]})

    return FakeOpenAI(reply)


@pytest.fixture
def echo_server():
    servers: list[FakeOpenAI] = []

    def make(*texts: str) -> FakeOpenAI:
        servers.append(_echoing(*texts))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _written(*paths: Path) -> list[tuple[Path, bytes]]:
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*"))) if f.is_file()]
    return [(f, f.read_bytes()) for f in files]


def _leaks(needles: dict[str, str], *texts: str | bytes) -> list[str]:
    out = []
    for name, needle in needles.items():
        for t in texts:
            if (needle.encode() if isinstance(t, bytes) else needle) in t:
                out.append(f"{name}: {t[:80]!r}")
    return out


# --- 1. a key inside an ordinary (200) answer ------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_a_key_in_a_200_answer_reaches_neither_the_report_nor_the_trace(evidence_workdir, echo_server, monkeypatch,
                                                                        fmt, caplog):
    server = echo_server(KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    r = runner.invoke(app, ["check", CLAIM, "--llm", "openai:m", "--format", fmt, "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    trace = (evidence_workdir / "t.json").read_text(encoding="utf-8")
    assert MASK in r.stdout and MASK in trace  # the text the key was in is kept, the key blanked
    episode = json.loads(trace)  # still a valid trace
    assert episode["report"]["conclusion"] == "SUPPORTED"
    assert server.requests[0]["auth"] == f"Bearer {KEY}"  # the key itself was really in use
    assert not _leaks({"key": KEY}, r.output, trace, caplog.text)


def test_a_key_in_a_200_answer_reaches_no_file_of_a_batch(evidence_workdir, echo_server, monkeypatch):
    server = echo_server(KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    (evidence_workdir / "claims.jsonl").write_text(f'{{"id": "a", "claim": "{CLAIM}"}}\n'
                                                   '{"id": "b", "claim": "Aspirin prevents heart attacks."}\n')
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "openai:m"])
    assert r.exit_code == 0, r.output
    files = _written(evidence_workdir / "out")
    assert {f.name for f, _ in files} == {"a.json", "b.json", "summary.json"}
    assert all(MASK.encode() in data for f, data in files if f.name != "summary.json")
    assert not _leaks({"key": KEY}, r.output, *(data for _, data in files))


# --- 2. a password inside a URL-valued variable ----------------------------------------------------------


def test_a_password_in_openai_base_url_reaches_no_output(evidence_workdir, monkeypatch):
    """A server that refuses the request (HTTP 400): the error names the URL, which holds the password."""
    server = FakeOpenAI(lambda _b, _h: (400, {"error": {"message": "bad request"}}))
    try:
        port = server.url.split(":")[2].split("/")[0]
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://ann:{PW}@127.0.0.1:{port}/v1")
        (evidence_workdir / "claims.jsonl").write_text(f'{{"id": "a", "claim": "{CLAIM}"}}\n')
        r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "openai:m"])
    finally:
        server.close()
    assert r.exit_code == 1 and "HTTP 400" in r.output
    summary = (evidence_workdir / "out" / "summary.json").read_text()
    assert "HTTP 400" in json.loads(summary)["failed"][0]["error"] and f"ann:{MASK}@127.0.0.1" in summary
    assert not _leaks({"password": PW}, r.output, summary)


def test_a_password_in_the_eutils_url_reaches_neither_trace_nor_stdout(evidence_workdir, echo_server, monkeypatch):
    """Entrez search through BIOCHECK_EUTILS_URL=http://ann:PW@host/: the search fails (HTTP 503, one attempt),
    which fails the check (PubMed down is no "not enough information") with one line naming the URL."""
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["search"]["max_attempts"] = 1
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    llm = echo_server(f"the password was {PW}")
    monkeypatch.setenv("OPENAI_BASE_URL", llm.url)
    with FakeEutils() as eutils:
        eutils.inject("status", status=503, times=100)
        host = eutils.url.split("://", 1)[1]
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", f"http://ann:{PW}@{host}")
        r = runner.invoke(app, ["check", CLAIM, "--llm", "openai:m", "--search", "entrez", "--trace", "t.json",
                                "--format", "json"])
    assert r.exit_code == 1 and "failed after 1 attempts" in r.output, r.output
    assert f"ann:{MASK}@" in r.output  # the failed search is reported with its URL, the password blanked
    assert not (evidence_workdir / "t.json").exists()  # no report, no trace: nothing to mistake for a result
    assert not _leaks({"password": PW}, r.output)


def test_url_passwords_and_token_query_values_of_any_variable_are_secrets():
    env = {"OPENAI_BASE_URL": f"https://ann:{PW}@llm.example.org/v1", "PATH": "/usr/bin",
           "BIOCHECK_EUTILS_URL": "https://eutils.example.org/e?api_key=qk-1234567&db=pubmed&sig=SiG%2Fz0",
           "HTTPS_PROXY": "http://bob:s3@proxy:3128", "OTHER_URL": "https://u@host/?retmode=xml",
           "MLFLOW_TRACKING_URI": "https://tok-9f8e7d6c5b@mlflow.example.org"}
    # the pair user:pw (for its base64, Basic auth) and a long user name with no password (a token) count;
    # a short user name and plain settings do not
    assert set(secret_values(env)) == {PW, f"ann:{PW}", "qk-1234567", "SiG/z0", "s3", "bob:s3", "tok-9f8e7d6c5b"}


# --- 3. encoded forms --------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", sorted(_encodings(ODD)))
def test_a_key_in_a_common_encoding_is_blanked(monkeypatch, form):
    monkeypatch.setenv("MY_SERVICE_SECRET", ODD)
    encoded = _encodings(ODD)[form]
    assert redact(f"server said <{encoded}>") == f"server said <{MASK}>"


def test_a_url_encoded_key_in_a_200_answer_reaches_no_output(evidence_workdir, echo_server, monkeypatch):
    forms = _encodings(ODD)
    server = echo_server(*forms.values())
    monkeypatch.setenv("OPENAI_API_KEY", ODD)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    for fmt in ("md", "html", "json"):
        r = runner.invoke(app, ["check", CLAIM, "--llm", "openai:m", "--format", fmt, "--trace", "t.json"])
        assert r.exit_code == 0, r.output
        trace = (evidence_workdir / "t.json").read_bytes()
        json.loads(trace)
        assert not _leaks(forms, r.output, trace), fmt


# --- 4. keys of any length ----------------------------------------------------------------------------------


def test_a_short_key_is_blanked_as_a_whole_token_only(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "k3y-9")
    assert redact("Incorrect API key provided: k3y-9.") == f"Incorrect API key provided: {MASK}."
    assert redact("url?key=k3y-9&x=1 'k3y-9'") == f"url?key={MASK}&x=1 '{MASK}'"
    assert redact("ak3y-9 k3y-90 k3y-9b") == "ak3y-9 k3y-90 k3y-9b"  # never a cut inside a word


@pytest.mark.parametrize("placeholder", sorted(secrets.PLACEHOLDERS))
def test_placeholder_keys_are_not_secrets(monkeypatch, placeholder):
    """`vllm serve` and other local servers want some key: "EMPTY", "none", ... must not blank words."""
    monkeypatch.setenv("OPENAI_API_KEY", placeholder)
    monkeypatch.setenv("MY_TOKEN", placeholder.upper())
    assert not {placeholder, placeholder.upper()} & set(secret_values())
    text = f"the EMPTY set; none; null; dummy - {placeholder}"
    assert redact(text) == text


def test_a_short_key_in_a_200_answer_reaches_no_output(evidence_workdir, echo_server, monkeypatch):
    short = "Qz7#w"
    server = echo_server(short)
    monkeypatch.setenv("OPENAI_API_KEY", short)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    r = runner.invoke(app, ["check", CLAIM, "--llm", "openai:m", "--format", "html", "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    trace = (evidence_workdir / "t.json").read_text()
    assert MASK in r.stdout and "fractures" in r.stdout
    assert not _leaks({"short": short, "html": html.escape(short)}, r.output, trace)


# --- the writers themselves ---------------------------------------------------------------------------------


def test_every_io_writer_redacts_and_json_stays_valid(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", 'sk-"quoted"\\key')  # quotes and a backslash: JSON escapes them
    monkeypatch.setenv("NCBI_API_KEY", "k3y9")  # a short key: blanked from texts, never from a number
    key = 'sk-"quoted"\\key'
    obj = {"error": f"echo {key}", key: 12345, "n": [12345, "id k3y9"]}
    io.write_json_atomic(tmp_path / "a.json", obj)
    io.write_text_atomic(tmp_path / "b.md", f"| {key} | {json.dumps(key)} |")
    io.dump_jsonl(tmp_path / "c.jsonl", [obj, obj])
    a = json.loads((tmp_path / "a.json").read_text())
    assert a == {"error": f"echo {MASK}", MASK: 12345, "n": [12345, f"id {MASK}"]}
    assert (tmp_path / "b.md").read_text() == f"| {MASK} | \"{MASK}\" |"
    assert [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()] == [a, a]


@pytest.mark.parametrize("value", ["42", "-1", "0.5", "1e3", "1234567"])
def test_a_short_number_is_a_setting_not_a_secret(monkeypatch, value):
    """A number would otherwise turn into *** in every JSON, CSV and printed metric (`{"n": 42}`)."""
    monkeypatch.setenv("SOME_TOKEN", value)
    assert value not in secret_values()
    assert redact(json.dumps({"n_cited": 42, "total": 0.42, "x": -1, "y": 0.5, "z": 1000.0})) == \
        json.dumps({"n_cited": 42, "total": 0.42, "x": -1, "y": 0.5, "z": 1000.0})
    monkeypatch.setenv("SOME_TOKEN", "12345678")  # 8 digits and more: could be a PIN-like key, blanked
    assert "12345678" in secret_values()


def test_without_a_secret_redaction_is_a_no_op(monkeypatch):
    """Redaction runs on every write and log line: with no secret set it hands back what it was given."""
    for name, value in dict(os.environ).items():
        if secrets.is_secret_name(name) or "://" in value:
            monkeypatch.delenv(name)
    obj = {"a": ["text", 1]}
    assert secret_values() == [] and redact("text") == "text" and secrets.redact_json(obj) is obj
