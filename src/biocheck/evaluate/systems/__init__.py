"""The evaluated systems by name: `make_system("eg_grpo", llm=..., ...)` -> a `System` (systems/base.py).

  base, eg_grpo, outcome_only   the BioCheck agent with that model (agent_systems.py)
  pmsearch                      the same agent graph and budgets, label-only answer (agent_systems.py)
  no_retrieval, cer, fire       the baselines (no_retrieval.py, cer.py, fire.py)

Each system is built lazily (`Lazy`): its model is loaded on first use and dropped by `close()`, so an
evaluation of several checkpoints holds one model at a time. Everything a system reuses comes from the same
builders as `biocheck check`: the LLM backends (`make_llm`) and the search tool (`biocheck.wiring.make_search_tool`).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from biocheck.agent.episode import Episode
from biocheck.agent.run import evidence_fingerprint
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.config import SYSTEMS
from biocheck.evaluate.systems.base import Prediction, System
from biocheck.io import json_digest
from biocheck.params import check_nested

AGENTS = ("base", "eg_grpo", "outcome_only")  # the BioCheck agent, one model each
WRITES_REPORT = {name: name in AGENTS for name in SYSTEMS}  # known before any model is loaded


class Lazy:
    """A `System` built on first use (fingerprint or run) and dropped by `close()`; the fingerprint stays.
    `evidence`: the searched index's content fingerprint, part of the fingerprint (new papers, new episodes);
    `fingerprint`: the whole fingerprint when it is known already."""

    builds = 0  # systems built in this process (benchmarks and tests count them; a build loads a model)

    def __init__(self, name: str, writes_report: bool, build: Callable[[], Any], evidence: str | None = None,
                 fingerprint: str | None = None) -> None:
        self.name, self.writes_report, self.evidence = name, writes_report, evidence
        self._build = build
        self._system: Any = None
        # known already (a sharded evaluation's shards built it from the same params): checking cached episodes
        # against it then builds nothing
        self._fingerprint: str | None = fingerprint
        self._describe: dict[str, Any] = {}
        self._lock = threading.Lock()

    @property
    def system(self) -> Any:
        with self._lock:  # workers share one system; build it once
            if self._system is None:
                self._system = self._build()
                Lazy.builds += 1
                if bool(self._system.writes_report) != self.writes_report:
                    raise RuntimeError(f"{self.name}: built a system with writes_report="
                                       f"{self._system.writes_report}, the registry says {self.writes_report}")
            return self._system

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            inner = self.system.fingerprint()
            self._fingerprint = inner if self.evidence is None else json_digest([inner, self.evidence])
        return self._fingerprint

    def run(self, claim: ClaimRecord) -> Episode:
        return self.system.run(claim)

    def describe(self) -> dict[str, Any]:
        """Tags for MLflow (llm, model fingerprint, prompt hash) when the system gives them."""
        if self._system is not None and hasattr(self._system, "describe"):
            self._describe = dict(self._system.describe())
        return self._describe

    def close(self) -> None:
        with self._lock:
            if self._system is not None and hasattr(self._system, "describe"):
                self._describe = dict(self._system.describe())
            self._system = None


def make_system(name: str, *, llm: str, agent_cfg: Any, search_cfg: Any, eval_cfg: Any = None,
                fingerprint: str | None = None) -> System:
    """The system `name` with the model `llm` (a spec, as `agent.llm`), the agent's budgets and generation
    settings (`agent_cfg`), the search backend (`search_cfg`) and the baselines' settings (`eval_cfg.cer`,
    `eval_cfg.fire`). Settings are checked now; the model is loaded on first use. `fingerprint`: the system's
    fingerprint when a run with the same settings reported it (then none is computed)."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEMS)}")
    agent_cfg = dataclasses.replace(agent_cfg, llm=llm)  # the episode's config records the model it ran
    settings = _settings(name, agent_cfg, eval_cfg)  # a typo fails before any system runs, not an hour in
    evidence = None if name == "no_retrieval" else evidence_fingerprint(search_cfg)
    # the claims in flight (evaluate.workers) share one model: their greedy turns are generated as one batch
    batch = getattr(eval_cfg, "workers", 1) if getattr(eval_cfg, "batch_turns", False) else 1
    return Lazy(name, WRITES_REPORT[name], lambda: _build(name, agent_cfg, search_cfg, settings, batch), evidence,
                fingerprint)


def _settings(name: str, agent_cfg: Any, eval_cfg: Any) -> Any:
    """The baseline's Config from `evaluate.<name>` (cer, fire); FIRE searches under the agent's budgets
    (steps = agent.max_searches, abstract_chars) unless evaluate.fire sets them."""
    if name == "cer":
        from biocheck.evaluate.systems.cer import CERConfig as Config
    elif name == "fire":
        from biocheck.evaluate.systems.fire import FIREConfig as Config
    else:
        return None
    values = dict(getattr(eval_cfg, name, None) or {})
    if name == "fire":
        values.setdefault("max_steps", agent_cfg.max_searches)
        values.setdefault("abstract_chars", agent_cfg.abstract_chars)
    check_nested(Config, values, f"evaluate.{name}")  # known keys, types and bounds (bounds.py), as a section's
    return Config(**values)


def _build(name: str, agent_cfg: Any, search_cfg: Any, settings: Any, batch: int = 1) -> Any:
    from biocheck.llm import make_llm
    from biocheck.wiring import agent_generation, make_prompts, make_search_tool

    llm = make_llm(agent_cfg.llm, agent_generation(agent_cfg, batch))
    if name == "no_retrieval":
        from biocheck.evaluate.systems.no_retrieval import NoRetrieval

        return NoRetrieval(llm)
    backend = getattr(search_cfg, "backend", "") or ""
    if name == "cer":  # the same backend, asked for `retrieve` abstracts ranked by BM25 (CER's retriever)
        from biocheck.evaluate.systems.cer import CER

        cer_search = dataclasses.replace(search_cfg, mode="bm25", max_results=settings.retrieve)
        return CER(llm, make_search_tool(cer_search), settings, search_backend=backend)
    tool = make_search_tool(search_cfg)
    if name == "fire":
        from biocheck.evaluate.systems.fire import FIRE

        return FIRE(llm, tool, settings, search_backend=backend)
    from biocheck.evaluate.systems.agent_systems import AgentSystem

    return AgentSystem(name, llm, tool, agent_cfg, search_cfg, make_prompts(agent_cfg, tool),
                       label_only=name == "pmsearch")


__all__ = ["AGENTS", "Lazy", "Prediction", "System", "WRITES_REPORT", "make_system"]
