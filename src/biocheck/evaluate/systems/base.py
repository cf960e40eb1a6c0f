"""What every evaluated system is: a name, a fingerprint, and `run(claim) -> Episode`.

One trace format for all: each system returns the agent's own `Episode` (agent/episode.py) — messages,
queries, ledger of retrieved papers, final text, parsed report (a label-only system leaves the report
empty but for its conclusion), model spec and fingerprint, prompt hash. The harness (evaluate/harness.py)
caches episodes per (system fingerprint, claim id), scores them with the reward library (EQS, EHR for
systems that write reports) and writes one `Prediction` per claim. Baselines reuse the agent's search
tool (`SearchTool`, through `biocheck.wiring.make_search_tool`) and LLM backends (`make_llm`); none
re-implements them.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

from biocheck.agent.episode import Episode
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.rationale import RationaleCounts
from biocheck.labels import Label
from biocheck.rewards.funnel import Funnel


@runtime_checkable
class System(Protocol):
    name: str  # e.g. "eg_grpo", "cer"
    writes_report: bool  # True: the output is a BioCheck report (EQS, EHR and parseable share apply)

    def fingerprint(self) -> str:
        """16 hex digits over everything that changes its answers: model fingerprint, prompt hash, settings."""
        ...

    def run(self, claim: ClaimRecord) -> Episode:
        """One claim, one episode; model failures end the episode (stop_reason "llm_error: ..."), never raise."""
        ...


class Prediction(BaseModel):
    """One system on one claim: a line of eval/predictions/<system>/<dataset>.jsonl (enough to recompute
    every metric)."""

    id: str
    dataset: str
    system: str
    fingerprint: str
    gold: Label
    pred: Label | None = None  # None: no label could be read (counts as wrong)
    trace: str | None = None  # the episode's JSON, relative to the evaluation folder
    writes_report: bool = False
    parseable: bool | None = None  # report systems: a conclusion and no parse problems
    cited: int | None = None  # report systems: evidence items the report lists (both sides)
    hallucinated: int | None = None  # of those, items whose PMID was never retrieved or whose quote is not in it
    ehr: float | None = None  # hallucinated / cited; None when the report cites nothing (silence is not 0) or
    # does not parse (a failure, counted by the parse rate; its items still count in micro-EHR)
    eqs: float | None = None  # mean s of the cited items by the EQS judge (evaluate.eqs_judge); None: none judged
    eqs_supporting: float | None = None  # the same over the supporting items only
    eqs_refuting: float | None = None  # ... and over the refuting items only
    eqs_reward_judge: float | None = None  # EQS by the training judge (reward.judge) when it is another judge
    rationale: RationaleCounts | None = None  # SciFact's gold-rationale counts (datasets with rationales)
    funnel: Funnel | None = None  # the evidence funnel (rewards/funnel.py): claims with gold evidence papers
    searches: int = 0
    tokens: int = 0  # prompt + completion tokens when the backend reports them
    # the episode's time as its trace's times recorded it: this machine's, so in memory (and MLflow) only, never
    # in the predictions file, which the same inputs make the same bytes anywhere
    seconds: float = Field(default=0.0, exclude=True)
    error: str | None = None  # the model failed (stop_reason llm_error)
