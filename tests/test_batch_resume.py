"""run_batch resumes per claim: a claim is rerun exactly when its own trace is missing.

The scripted model records every conversation it answers, so the tests count the episodes that
actually ran, not just the files on disk.
"""

from __future__ import annotations

import json

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.llm.scripted import ScriptedChat
from biocheck.agent.run import run_batch, trace_path
from tests.test_agent import REPORT

CLAIMS = [{"claim": f"Claim number {i} is true.", "claim_id": f"c{i}"} for i in range(4)]


class RecordingChat(ScriptedChat):
    """Answers every conversation with the report; remembers which claims it was asked about."""

    def __init__(self) -> None:
        super().__init__([{"content": REPORT}])
        self.asked: list[str] = []

    def chat(self, messages, tools):
        user = messages[1]["content"]
        self.asked += [c["claim_id"] for c in CLAIMS if c["claim"] in user]
        return super().chat(messages, tools)


def _agent() -> tuple[Agent, RecordingChat]:
    llm = RecordingChat()
    return Agent(llm, tool=None, cfg=AgentConfig(llm="scripted:<inline>")), llm


def _run(out, **kw) -> list[str]:
    """Claim ids the model was asked about during one run_batch call, in sorted order."""
    agent, llm = _agent()
    summary = run_batch(agent, CLAIMS, out, progress=False, **kw)
    assert summary["episodes"] == len(CLAIMS)  # the summary always covers every claim
    assert json.loads((out / "summary.json").read_text()) == summary
    return sorted(llm.asked)


def test_a_fresh_batch_runs_every_claim_once(tmp_path):
    assert _run(tmp_path) == ["c0", "c1", "c2", "c3"]
    assert all(trace_path(tmp_path, c["claim_id"]).is_file() for c in CLAIMS)


def test_an_interrupted_batch_runs_only_the_missing_claims(tmp_path):
    _run(tmp_path)
    # as if the process died after two claims: their traces exist, the summary was never written
    (tmp_path / "summary.json").unlink()
    for cid in ("c1", "c3"):
        trace_path(tmp_path, cid).unlink()
    kept = trace_path(tmp_path, "c0").stat().st_mtime_ns
    assert _run(tmp_path) == ["c1", "c3"]
    assert trace_path(tmp_path, "c0").stat().st_mtime_ns == kept


def test_a_finished_batch_reruns_exactly_the_claim_whose_trace_is_gone(tmp_path):
    _run(tmp_path)
    trace_path(tmp_path, "c2").unlink()
    assert _run(tmp_path) == ["c2"]
    assert _run(tmp_path) == []  # nothing left to do


def test_resume_false_reruns_every_claim(tmp_path):
    _run(tmp_path)
    assert _run(tmp_path, resume=False) == ["c0", "c1", "c2", "c3"]
