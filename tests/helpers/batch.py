"""A batch run of the agent over a few claims with a recording scripted model: which claims it was asked about."""

from __future__ import annotations

import json

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.run import run_batch
from biocheck.llm import LLMError
from biocheck.llm.scripted import ScriptedChat
from tests.helpers.turns import REPORT, TABLE, TableTool

CLAIMS = [{"claim": f"Claim number {i} is true.", "claim_id": f"c{i}"} for i in range(4)]


SEARCH = {"backend": "local", "mode": "boolean", "max_results": 3, "index_dir": "idx", "store": "ev.sqlite"}


class RecordingChat(ScriptedChat):
    """Answers every conversation with the report; remembers which claims it was asked about."""

    def __init__(self, turns=None, fail: set[str] = frozenset()) -> None:
        super().__init__(turns or [{"content": REPORT}])
        self.asked: list[str] = []
        self.fail = fail  # claim texts whose episode hits a dead model

    def chat(self, messages, tools):
        user = messages[1]["content"]
        if any(text in user for text in self.fail):
            raise LLMError("connection refused by http://localhost:8000/v1")
        self.asked.append(user)
        return super().chat(messages, tools)


def batch_ids(out, claims=CLAIMS, *, cfg: AgentConfig | None = None, search=SEARCH, llm: RecordingChat | None = None,
              **kw) -> list[str]:
    """Claim ids the model was asked about during one run_batch call, in sorted order."""
    llm = llm or RecordingChat()
    before = len(llm.asked)
    agent = Agent(llm, tool=TableTool(TABLE), cfg=cfg or AgentConfig(llm="scripted:<inline>"))
    summary = run_batch(agent, claims, out, progress=False, search=search, **kw)
    assert summary["episodes"] + len(summary.get("failed", [])) == len(claims)  # the summary always covers every claim
    assert json.loads((out / "summary.json").read_text()) == summary
    return sorted(c["claim_id"] for c in claims if any(c["claim"] in u for u in llm.asked[before:]))


class VerdictChat(RecordingChat):
    """RecordingChat whose report refutes every claim that holds one of `refute` (the others: SUPPORTED)."""

    def __init__(self, refute: tuple[str, ...] = (), fail: set[str] = frozenset()) -> None:
        super().__init__(fail=fail)
        self.refute = refute

    def chat(self, messages, tools):
        turn = super().chat(messages, tools)
        if any(text in messages[1]["content"] for text in self.refute):
            return type(turn)(content=REPORT.replace("\nSUPPORTED\n", "\nREFUTED\n"))
        return turn
