"""An OpenAI-compatible server is untrusted input: every answer is checked against the chat-completions schema.

A malformed answer (a message that is a string, tool calls that are not a list, content that is not text,
usage that is not an object, no choices, a body that is not JSON) is one `LLMError` naming the server and
what was wrong; the agent turns it into one failed episode with that reason, a batch lists the claim under
"failed" and runs the others, and `biocheck evaluate` records it (and fails when no episode of a system
succeeded). A server that accepts and never answers is given up after `agent.request_timeout_s`.
"""

from __future__ import annotations

import json
import threading

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.run import episode_error, run_batch, trace_path
from biocheck.cli import app
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.llm import LLMError, make_llm
from biocheck.llm.base import GenerationConfig
from biocheck.llm.openai_backend import OpenAIChat
from tests.helpers.cli import assert_one_clear_line
from tests.helpers.fake_openai import FakeOpenAI, assistant
from tests.helpers.paths import REPO
from tests.helpers.turns import REPORT

runner = CliRunner()
HI = [{"role": "user", "content": "hi"}]
GOOD = assistant({"content": REPORT})
CALL = {"id": "c0", "type": "function", "function": {"name": "search_pubmed", "arguments": '{"query": "x"}'}}

# (what is wrong, the answer's body, a phrase the error must contain)
MALFORMED = [
    ("message is a string", {"choices": [{"message": "SUPPORTED"}]}, "choices.0.message"),
    ("tool_calls is a string", assistant({"content": None, "tool_calls": "search_pubmed(x)"}), "tool_calls"),
    ("tool_calls is a dict", assistant({"content": None, "tool_calls": CALL}), "tool_calls"),
    ("a tool call without a function", assistant({"content": None, "tool_calls": [{"id": "c0"}]}), "function"),
    ("content is a list", assistant({"content": [{"type": "text", "text": "x"}]}), "content"),
    ("content is an int", assistant({"content": 7}), "content"),
    ("usage is a string", {**GOOD, "usage": "10 tokens"}, "usage"),
    ("usage counts are strings", {**GOOD, "usage": {"prompt_tokens": "ten"}}, "usage"),
    ("no choices", {"id": "x", "object": "chat.completion"}, "choices"),
    ("empty choices", {"choices": []}, "choices"),
    ("a list, not an object", [GOOD], "object"),
    ("not JSON", b"<html>Bad gateway</html>", "JSON"),
    ("a lone surrogate", b'{"choices": [{"message": {"content": "a\\ud800b"}}]}', "JSON"),
]


def serve(answer) -> FakeOpenAI:
    return FakeOpenAI(lambda body, headers: (200, answer))


@pytest.mark.parametrize("what, answer, phrase", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_answer_is_one_llm_error_naming_the_server_and_the_fault(what, answer, phrase):
    fake = serve(answer)
    try:
        llm = OpenAIChat("m", base_url=fake.url, api_key="")
        with pytest.raises(LLMError) as info:
            llm.chat(HI, [])
    finally:
        fake.close()
    text = str(info.value)
    assert "\n" not in text and len(text) < 600
    assert fake.url in text and "malformed" in text and phrase in text, text
    assert len(fake.requests) == 1  # a server that answers wrongly once answers wrongly again: not retried


def test_a_well_formed_answer_with_extra_fields_and_null_content_is_accepted():
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "system_fingerprint": None,
              "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                           "message": {"role": "assistant", "content": None, "refusal": None, "tool_calls": [CALL]}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                        "prompt_tokens_details": {"cached_tokens": 0}}}
    fake = serve(answer)
    try:
        turn = OpenAIChat("m", base_url=fake.url, api_key="").chat(HI, [])
    finally:
        fake.close()
    assert turn.content == "" and [c.name for c in turn.tool_calls] == ["search_pubmed"]
    assert turn.tool_calls[0].arguments == {"query": "x"} and turn.tool_calls[0].id == "c0"
    assert turn.usage == {"prompt_tokens": 3, "completion_tokens": 2}


@pytest.mark.parametrize("what, answer, phrase", MALFORMED[:6], ids=[m[0] for m in MALFORMED[:6]])
def test_the_agent_turns_a_malformed_answer_into_one_failed_episode_with_a_reason(evidence, what, answer, phrase):
    cfg, _ = evidence
    fake = serve(answer)
    try:
        llm = OpenAIChat("m", base_url=fake.url, api_key="")
        tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
        ep = Agent(llm, tool, AgentConfig(llm=llm.spec)).run("Vitamin D prevents fractures.")
    finally:
        fake.close()
    error = episode_error(ep)
    assert error is not None and "malformed" in error and phrase in error


class Script:
    """A server answering the claim that mentions `bad` with `answer`, every other claim with the report."""

    def __init__(self, bad: str, answer) -> None:
        self.bad, self.answer = bad, answer

    def __call__(self, body, headers):
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        return 200, (self.answer if self.bad in user else GOOD)


def test_a_batch_lists_the_claim_with_a_malformed_answer_as_failed_and_runs_the_others(tmp_path, evidence):
    cfg, _ = evidence
    fake = FakeOpenAI(Script("Coffee", {"choices": [{"message": "oops"}]}))
    claims = [{"claim": text, "claim_id": cid} for cid, text in
              (("a", "Vitamin D prevents fractures."), ("b", "Coffee causes arrhythmia."), ("c", "Zinc shortens colds."))]
    try:
        llm = OpenAIChat("m", base_url=fake.url, api_key="")
        tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
        summary = run_batch(Agent(llm, tool, AgentConfig(llm=llm.spec)), claims, tmp_path / "out", progress=False)
    finally:
        fake.close()
    assert summary["episodes"] == 2 and [f["id"] for f in summary["failed"]] == ["b"]
    assert "malformed" in summary["failed"][0]["error"]
    assert trace_path(tmp_path / "out", "a").is_file() and trace_path(tmp_path / "out", "c").is_file()
    assert not trace_path(tmp_path / "out", "b").exists()


@pytest.mark.parametrize("answer", [{"choices": [{"message": "oops"}]}, b"not json at all",
                                    assistant({"content": None, "tool_calls": {"x": 1}})])
def test_check_cli_batch_with_malformed_answers_exits_1_with_one_line_and_a_summary(evidence_workdir, monkeypatch,
                                                                                    answer):
    fake = FakeOpenAI(Script("Coffee", answer))
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    claims = evidence_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Coffee causes arrhythmia."}\n'
                      '{"id": "b", "claim": "Vitamin D prevents fractures."}\n')
    try:
        r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "openai:m"])
    finally:
        fake.close()
    assert_one_clear_line(r, "1 of 2 claims failed", "malformed")
    summary = json.loads((evidence_workdir / "out" / "summary.json").read_text())
    assert summary["episodes"] == 1 and [f["id"] for f in summary["failed"]] == ["a"]


def test_check_cli_single_claim_with_a_malformed_answer_is_one_line(evidence_workdir, monkeypatch):
    fake = serve(assistant({"content": 42}))
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    try:
        r = runner.invoke(app, ["check", "Coffee causes arrhythmia.", "--llm", "openai:m"])
    finally:
        fake.close()
    assert_one_clear_line(r, "the model failed", "malformed", "content")


# -- a server that accepts the request and never answers -------------------------------------------------------

class Stalled:
    """A server that takes each request and answers only when released (at the end of the test)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.fake = FakeOpenAI(self.reply)

    def reply(self, body, headers):
        self.release.wait(60)
        return 200, GOOD

    def close(self) -> None:
        self.release.set()
        self.fake.close()


@pytest.fixture
def stalled():
    server = Stalled()
    yield server
    server.close()


def test_a_stalled_server_is_given_up_after_the_request_timeout_naming_the_setting(stalled):
    llm = make_llm("openai:m", GenerationConfig(request_timeout_s=0.2))
    llm.base_url = stalled.fake.url
    with pytest.raises(LLMError) as info:
        llm.chat(HI, [])
    text = str(info.value)
    assert "agent.request_timeout_s" in text and "0.2 s" in text and stalled.fake.url in text, text
    assert len(stalled.fake.requests) == 1  # a stall is not retried: it would only multiply the wait


def test_agent_request_timeout_s_reaches_the_backend_and_fails_the_episode(stalled, evidence_workdir, monkeypatch):
    from biocheck.wiring import agent as make_agent

    monkeypatch.setenv("OPENAI_BASE_URL", stalled.fake.url)
    agent, agent_cfg, _ = make_agent("params.yaml", llm="openai:m", request_timeout_s=0.2)
    assert agent_cfg.request_timeout_s == 0.2
    error = episode_error(agent.run("Vitamin D prevents fractures."))
    assert error is not None and "agent.request_timeout_s" in error and "0.2 s" in error


def test_check_cli_against_a_stalled_server_fails_with_one_line_naming_the_setting(stalled, evidence_workdir,
                                                                                   monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", stalled.fake.url)
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"]["request_timeout_s"] = 0.2
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "openai:m"])
    assert_one_clear_line(r, "the model failed", "agent.request_timeout_s")


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan")])
def test_a_request_timeout_that_is_not_a_positive_number_is_refused(value):
    from biocheck.io import InputError
    from biocheck.params import section

    with pytest.raises(InputError, match=r"section 'agent': agent\.request_timeout_s must be "):  # bounds.py
        section({"agent": {"request_timeout_s": value}}, "agent", AgentConfig)


def test_request_timeout_is_how_not_what_so_it_never_reruns_a_trace(tmp_path):
    from biocheck.agent.run import run_key
    from biocheck.llm.scripted import ScriptedChat
    from tests.helpers.turns import TABLE, TableTool

    claim = {"claim": "A.", "claim_id": "a"}
    keys = [run_key(Agent(ScriptedChat([{"content": REPORT}]), TableTool(TABLE),
                          AgentConfig(llm="scripted:<inline>", request_timeout_s=t)), claim) for t in (5, 500)]
    assert keys[0] == keys[1]


def test_every_profile_states_the_request_timeout():

    from biocheck.params import load_params

    repo = REPO
    for path in [repo / "params.yaml", *sorted((repo / "profiles").glob("*.yaml"))]:
        value = load_params(path)["agent"].get("request_timeout_s")  # a profile: base.yaml with its values
        assert isinstance(value, int | float) and value > 0, path


# -- evaluation: a failed episode is a recorded prediction; no answer at all is an error -----------------------

def test_evaluation_records_a_malformed_answer_as_a_failed_prediction(evidence, tmp_path):
    from biocheck.agent.prompts import Prompts
    from biocheck.evaluate.harness import predictions_path, run_system
    from biocheck.evaluate.systems.agent_systems import AgentSystem
    from tests.helpers.eval_project import claims

    cfg, _ = evidence
    search_cfg = SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3)
    fake = FakeOpenAI(Script("claim 1.", {"choices": [{"message": {"content": ["not", "text"]}}]}))
    try:
        llm = OpenAIChat("m", base_url=fake.url, api_key="")
        tool = search_tool(search_cfg)
        system = AgentSystem("eg_grpo", llm, tool, AgentConfig(llm=llm.spec), search_cfg, Prompts.for_tool(5, tool))
        preds = run_system(system, claims(3), "scifact", tmp_path, progress=False)
    finally:
        fake.close()
    assert [p.error is None for p in preds] == [True, False, True]
    assert "malformed" in preds[1].error and preds[1].pred is None and preds[1].trace is None
    assert predictions_path(tmp_path, "eg_grpo", "scifact").is_file()


def _closed_port_url() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there: every connection is refused


@pytest.mark.parametrize("server", ["dead", "malformed"])
def test_evaluate_with_no_answering_model_fails_with_one_line_and_writes_no_metrics(project, monkeypatch, server):  # noqa: F811
    monkeypatch.setattr("time.sleep", lambda s: None)  # the retries' back-off
    fake = serve({"choices": [{"message": "x"}]}) if server == "malformed" else None
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url if fake else _closed_port_url())
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["agent"]["llm"] = "openai:m"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    try:
        r = runner.invoke(app, ["evaluate", "--systems", "base", "--out", "adhoc", "--no-progress"])
    finally:
        if fake:
            fake.close()
    line = assert_one_clear_line(r, "base/", "no claim", "failed")
    assert ("malformed" if server == "malformed" else "no answer after") in line
    assert not (project / "adhoc" / "eval.json").exists()

