"""Secrets from the environment never reach a trace, a summary, stderr, a log line or MLflow."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evidence.types import Article
from biocheck.llm import LLMError
from biocheck.llm.openai_backend import OpenAIChat
from biocheck.secrets import MASK, redact, secret_values
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.paths import REPO

KEY = "sk-proj-Zq7Xw3Vt9Ku5Rs1Pn8Lm4Jh2Gf6Dc0Ba"
runner = CliRunner()


class Refusing(FakeOpenAI):
    """An OpenAI-compatible server that answers 401 and echoes the key back, as api.openai.com does."""

    def __init__(self, pad: int = 0):
        def reply(_body, headers):
            key = (headers.get("Authorization") or "").removeprefix("Bearer ")
            msg = "x" * pad + f"Incorrect API key provided: {key}. You can find your API key at platform."
            return 401, {"error": {"message": msg, "type": "invalid_request_error", "code": "invalid_api_key"}}

        super().__init__(reply)


@pytest.fixture
def refusing():
    server = Refusing()
    yield server
    server.close()


def test_secret_values_come_from_named_and_pattern_variables(monkeypatch):
    env = {"OPENAI_API_KEY": KEY, "NCBI_API_KEY": "ncbi-0123456789", "HF_TOKEN": "hf_abcdefghij",
           "MY_SERVICE_SECRET": "s3cr3t-value", "DB_PASSWORD": "hunter2hunter2", "OPENAI_BASE_URL": "http://h/v1",
           "SHORT_TOKEN": "abc", "VLLM_API_KEY": "EMPTY", "AWS_SECRET_ACCESS_KEY": "wJalr/K7MDENG+bPxRfi",
           "PATH": "/usr/bin:/bin"}
    # a key of any length counts; a placeholder a local server takes for "no key" does not
    assert set(secret_values(env)) == {KEY, "ncbi-0123456789", "hf_abcdefghij", "s3cr3t-value", "hunter2hunter2",
                                       "abc", "wJalr/K7MDENG+bPxRfi"}


def test_a_secret_of_exactly_the_minimum_length_is_blanked_even_inside_a_word(monkeypatch):
    """The documented rule: MIN_CHARS characters or more, blanked wherever they occur; shorter, only as a
    whole token. The minimum is stated in docs/mlflow.md."""
    from biocheck.secrets import MIN_CHARS

    at_min, below = "k" * (MIN_CHARS - 4) + "9Zq2", "k" * (MIN_CHARS - 5) + "9Zq2"
    assert len(at_min) == MIN_CHARS and len(below) == MIN_CHARS - 1
    monkeypatch.setenv("A_TOKEN", at_min)
    assert redact(f"x{at_min}y and {at_min}") == f"x{MASK}y and {MASK}"
    monkeypatch.setenv("A_TOKEN", below)
    assert redact(f"x{below}y and {below}") == f"x{below}y and {MASK}"
    docs = (REPO / "docs" / "mlflow.md").read_text(encoding="utf-8")
    assert f"{MIN_CHARS} characters or more" in docs


def test_redact_blanks_every_secret_and_the_longest_first(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OTHER_TOKEN", KEY[:12])  # a secret inside another must not leave the rest behind
    text = f"Incorrect API key provided: {KEY}; partial {KEY[:12]}"
    assert redact(text) == f"Incorrect API key provided: {MASK}; partial {MASK}"
    assert redact("a passed-in key abcdefgh123", extra=["abcdefgh123", None]) == f"a passed-in key {MASK}"


def test_openai_error_text_is_redacted_even_where_it_is_cut_short(monkeypatch):
    # the key straddles the 300 characters kept of the body: cutting first would leak its first half
    server = Refusing(pad=230)
    try:
        llm = OpenAIChat("m", base_url=server.url, api_key=KEY, max_attempts=1)
        with pytest.raises(LLMError) as e:
            llm.chat([{"role": "user", "content": "hi"}], [])
    finally:
        server.close()
    assert "HTTP 401" in str(e.value) and KEY[:10] not in str(e.value)


def test_openai_judge_error_is_redacted(monkeypatch, refusing):
    from biocheck.rewards.judge import JudgeError, OpenAIJudge

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    judge = OpenAIJudge("m", base_url=refusing.url, max_attempts=1)
    with pytest.raises(JudgeError) as e:
        judge.score([("claim", Article(pmid="1", title="t", abstract="a"))])
    assert "HTTP 401" in str(e.value) and KEY not in str(e.value) and MASK in str(e.value)


def test_cli_error_line_is_redacted(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text(f"search: {{backend: '{KEY}'}}\n")  # echoed back by the config error
    r = runner.invoke(app, ["search", "x"])
    assert r.exit_code == 1 and "error:" in r.output and MASK in r.output and KEY not in r.output


def test_log_lines_are_redacted(monkeypatch, caplog):
    from biocheck.secrets import RedactingFilter

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    record = logging.LogRecord("biocheck.x", logging.WARNING, __file__, 1, "server said %s", (f"bad key {KEY}",), None)
    assert RedactingFilter().filter(record) and record.getMessage() == f"server said bad key {MASK}"
    # and `biocheck` puts the filter on the handlers it logs through
    runner.invoke(app, ["version"])
    caplog.set_level(logging.INFO)
    logging.getLogger("biocheck.test").warning("echo %s", KEY)
    assert KEY not in caplog.text and MASK in caplog.text


def test_tracking_never_stores_a_secret(monkeypatch, tmp_path, mlflow_db):
    import mlflow

    from biocheck import tracking

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "a.json").write_text(json.dumps({"stop_reason": f"llm_error: {KEY}"}))
    (tmp_path / "traces" / "blob.bin").write_bytes(b"\x00\xff" + KEY.encode())
    with tracking.run("check", params={"llm": f"openai:{KEY}"}, tags={"note": KEY}) as active:
        tracking.log_metrics({f"stop.{KEY}": 1, "episodes": 2})
        tracking.log_artifacts(tmp_path / "traces", artifact_path="traces")
    run = mlflow.MlflowClient().get_run(active.info.run_id)
    assert run.data.metrics["episodes"] == 2 and run.data.params["llm"] == f"openai:{MASK}"
    assert KEY not in str(run.data)
    stored = {Path(a.path).name for a in mlflow.MlflowClient().list_artifacts(active.info.run_id, "traces")}
    assert stored == {"a.json"}  # the binary file holding the key is refused, the JSON redacted
    _assert_nowhere(tmp_path / "mlflow.db", tmp_path / "mlruns", tmp_path / "mlartifacts")


def _assert_nowhere(*paths: Path) -> int:
    """No file under `paths` holds the key; returns how many files were searched."""
    files = [f for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file()]
    leaks = [str(f) for f in files if KEY.encode() in f.read_bytes()]
    assert not leaks, leaks
    return len(files)


def test_a_key_echoed_by_the_server_reaches_no_output(evidence_workdir, refusing, monkeypatch, caplog):
    """`OPENAI_API_KEY=... biocheck check --claims F --out D --llm openai:m --mlflow` against a 401 server."""
    import mlflow

    workdir = evidence_workdir
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", refusing.url)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    (workdir / "claims.jsonl").write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "openai:m", "--mlflow"])
    # the failure itself is reported (on stderr and in what the batch wrote), only the key is blanked
    assert "HTTP 401" in r.output and f"Incorrect API key provided: {MASK}" in r.output
    written = " ".join(f.read_text() for f in (workdir / "out").glob("*.json"))
    assert "HTTP 401" in written and f"Incorrect API key provided: {MASK}" in written
    run = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string="tags.stage = 'check'",
                             output_format="list")[0]
    assert mlflow.MlflowClient().list_artifacts(run.info.run_id, "traces")  # the batch's files were logged
    assert KEY not in r.output and KEY not in caplog.text
    assert _assert_nowhere(workdir) >= 4  # traces/summary.json, mlflow.db and the artifact copies


def test_redaction_survives_other_threads_changing_the_environment(monkeypatch):
    """Log filters redact on every thread while Dask, MLflow or Prefect set variables on another: walking
    os.environ then raised 'dictionary changed size during iteration' (a failed evaluate flow run in CI)
    or a KeyError. Redaction must neither raise nor lose the secret."""
    import os
    import threading

    monkeypatch.setenv("NCBI_API_KEY", KEY)
    stop = threading.Event()

    def churn():
        i = 0
        while not stop.is_set():
            os.environ[f"BIOCHECK_CHURN_{i % 40}"] = "v"
            os.environ.pop(f"BIOCHECK_CHURN_{(i + 20) % 40}", None)
            i += 1

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        outs = [redact(f"key {KEY}") for _ in range(3000)]
    finally:
        stop.set()
        t.join()
        for i in range(40):
            os.environ.pop(f"BIOCHECK_CHURN_{i}", None)
    assert set(outs) == {f"key {MASK}"}
