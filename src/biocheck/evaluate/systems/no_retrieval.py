"""`no_retrieval`: the model answers SUPPORTED / REFUTED / NOT ENOUGH INFORMATION from its own knowledge.

One prompt (prompts/no_retrieval_*.md), no search, one model turn; the label is read from the reply
(verdict.read_verdict). It measures what the model knows without evidence: the floor every system
that searches should beat.
"""

from __future__ import annotations

from typing import Any

from biocheck.agent.episode import Episode
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.systems import prompts
from biocheck.evaluate.systems.trace import Trace, fingerprint
from biocheck.evaluate.systems.verdict import read_verdict
from biocheck.llm.base import ChatLLM

NAME = "no_retrieval"


class NoRetrieval:
    """The model alone: one prompt per claim, the label parsed from its reply (no settings to configure)."""

    name = NAME
    writes_report = False

    def __init__(self, llm: ChatLLM) -> None:
        self.llm = llm
        self.llm_fingerprint = llm.fingerprint()
        self.prompt_hash = prompts.prompt_hash(NAME)

    def fingerprint(self) -> str:
        return fingerprint(NAME, self.llm_fingerprint, self.prompt_hash, {})

    def describe(self) -> dict[str, Any]:
        """What MLflow and the gallery show about the system (tags)."""
        return {"llm": self.llm.spec, "model_fingerprint": self.llm_fingerprint, "prompt_hash": self.prompt_hash}

    def run(self, claim: ClaimRecord) -> Episode:
        trace = Trace(self.llm, self.llm_fingerprint, claim)
        trace.say("system", prompts.fill(f"{NAME}_system"))
        trace.say("user", prompts.fill(f"{NAME}_user", claim=claim.claim))
        turn = trace.ask()
        text = turn.content if turn else ""
        label, problems = read_verdict(text) if turn else (None, [])
        return trace.episode(final_text=text, label=label, problems=problems, stop_reason="final_answer",
                             prompt_hash=self.prompt_hash, config={})
