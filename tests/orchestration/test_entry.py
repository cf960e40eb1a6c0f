"""biocheck.orchestration.entry: what every flow script shares. An expected failure is its own message on one
line (secrets blanked), anything else its type and first line; the console loses an expected failure's
traceback while Prefect's API handler keeps it; a task body's expected failure becomes a Failed state that
carries the error itself."""

from __future__ import annotations

import io
import logging

import pytest

from biocheck.evidence.types import SearchError
from biocheck.io import InputError
from biocheck.llm.base import LLMError
from biocheck.orchestration import entry
from tests.helpers.paths import REPO

SECRET = "sk-test-0123456789abcdef"


def test_error_line_says_what_an_expected_failure_says_and_names_anything_else(monkeypatch):
    summary = "1 of 9 data checks FAILED:\n  healthfc/full[test]: row count: observed 7"
    assert entry.error_line(InputError(summary)) == summary  # written for the user: all of it, as the CLI prints it
    assert entry.error_line(SearchError("PubMed unreachable: retry later")) == "PubMed unreachable: retry later"
    assert entry.error_line(LLMError("models/x: no such model directory")) == "models/x: no such model directory"
    assert entry.error_line(ValueError("boom\n  deep detail")) == "ValueError: boom"
    assert entry.error_line(KeyError()) == "KeyError"

    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    line = entry.error_line(RuntimeError("Failed to reach API at http://127.0.0.1:9/api/"))
    assert line.startswith("no Prefect server answers at PREFECT_API_URL=http://127.0.0.1:9/api: start it")


def test_run_exits_0_1_or_130_with_one_redacted_line(capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    assert entry.run(lambda: None) == 0
    assert capsys.readouterr().err == ""

    def bad():
        raise InputError(f"the server refused key {SECRET}: set OPENAI_API_KEY")

    assert entry.run(bad) == 1
    assert capsys.readouterr().err == "error: the server refused key ***: set OPENAI_API_KEY\n"

    def stopped():
        raise KeyboardInterrupt

    assert entry.run(stopped, interrupted="interrupted; kept what was done") == 130
    assert capsys.readouterr().err == "error: interrupted; kept what was done\n"


def _capture() -> tuple[logging.Handler, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler, out


def _raised(error: Exception) -> tuple:
    try:
        raise error
    except Exception as e:  # noqa: BLE001
        return type(e), e, e.__traceback__


def test_the_console_loses_an_expected_failures_traceback_and_prefects_api_handler_keeps_it(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    api, api_out = _capture()
    console, console_out = _capture()
    monkeypatch.setattr(logging.getLogger(), "handlers", [console])
    run_logger = logging.getLogger("prefect.flow_runs")  # what the flow engine logs a failed run on
    monkeypatch.setattr(run_logger, "handlers", [api])
    entry.quiet_console()
    entry.quiet_console()  # idempotent: one filter per handler
    assert sum(isinstance(f, entry.NoTraceback) for f in console.filters) == 1

    run_logger.error("Finished in state Failed", exc_info=_raised(InputError(f"bad params {SECRET}")))
    run_logger.error("Crashed", exc_info=_raised(ValueError("a bug")))
    api_text, console_text = api_out.getvalue(), console_out.getvalue()
    assert api_text.count("Traceback") == 2 and "InputError: bad params" in api_text  # the run's log: both
    assert console_text.count("Traceback") == 1 and "ValueError: a bug" in console_text  # the console: the bug's
    assert SECRET not in console_text


def test_quiet_failures_returns_a_failed_state_carrying_the_error(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)

    @entry.quiet_failures
    def shard(x: str) -> str:
        """A shard."""
        if x == "offline":
            raise SearchError(f"PubMed unreachable with key {SECRET}")
        if x == "bug":
            raise ValueError("a bug")
        return x * 2

    assert shard("ab") == "abab" and shard.__name__ == "shard" and shard.__doc__ == "A shard."
    state = shard("offline")
    assert state.is_failed() and state.message == "PubMed unreachable with key ***"
    assert isinstance(state.data, SearchError)
    with pytest.raises(SearchError, match="PubMed unreachable"):  # what the flow reading the result gets
        state.result()
    with pytest.raises(ValueError, match="a bug"):  # a bug stays a crash, with its traceback
        shard("bug")


@pytest.mark.slow
def test_secrets_never_reach_the_run_logs_prefect_keeps(monkeypatch):
    """A flow run's log lines and its failure message, as the Prefect API stores them, have the key blanked."""
    import asyncio

    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.testing.utilities import prefect_test_harness

    monkeypatch.setenv("NCBI_API_KEY", SECRET)

    @flow(name="leaky")
    def leaky() -> None:
        with entry.redacted():
            entry.run_logger().info("calling PubMed with api_key=%s", SECRET)
            raise InputError(f"PubMed said: invalid api_key {SECRET}")

    async def logs_of(run_id) -> list[str]:
        async with get_client() as client:
            found = await client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id])))
            run = await client.read_flow_run(run_id)
        return [log.message for log in found] + [run.state.message or ""]

    with prefect_test_harness(server_startup_timeout=300):
        state = leaky(return_state=True)
        assert state.is_failed()
        from prefect.logging.handlers import APILogHandler

        APILogHandler().flush()  # the handler sends lines in batches: send them now
        stored = asyncio.run(logs_of(state.state_details.flow_run_id))
    text = "\n".join(stored)
    assert "api_key=***" in text and "invalid api_key" in text  # the lines are there, the key is not
    assert SECRET not in text


def test_every_flow_runs_its_body_inside_redacted():
    """The check above covers one flow; this one that every flow of flows/ opens the same context first."""
    import ast

    flows = []
    for path in sorted((REPO / "flows").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and any(
                    isinstance(d, ast.Call) and getattr(d.func, "id", None) == "flow" for d in node.decorator_list):
                body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                ok = (len(body) == 1 and isinstance(body[0], ast.With)
                      and ast.unparse(body[0].items[0].context_expr) == "entry.redacted()")
                flows.append((f"{path.name}:{node.name}", ok))
    assert len(flows) >= 8 and [name for name, ok in flows if not ok] == []
