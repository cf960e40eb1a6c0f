"""EG-GRPO's reward as TRL reward functions, one per component, over the rewards library.

The whole breakdown of a batch is computed once (one batched judge call) and each component is read
from it, so TRL logs every component (`rewards/<name>/mean`) and sums them with `reward_weights`:
  eg_grpo:      1*outcome + beta1*search + beta2*evidence - beta3*hallucination
  outcome_only: 1*outcome (the other components are still computed and logged, with weight 0)
`searches` (searches per episode) is logged the same way, always with weight 0.

Each scored batch also leaves `last_stats` (GroupStatsMixin in grpo.py adds them to the step's logs, so they
reach MLflow and trainer_state.json's log_history): per term and total, the share of groups (the episodes of
one claim) in which it varies (GRPO learns only from those) and its mean within-group standard deviation; and
the evidence funnel's shares over the batch's episodes (rewards/funnel.py) when the bank knows the claims' gold
papers.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from biocheck.labels import Label
from biocheck.rewards.components import EpisodeView, RewardBreakdown, RewardConfig, score_many
from biocheck.rewards.funnel import STEPS, GoldPaper, funnel

COMPONENTS = ("outcome", "search", "evidence", "hallucination", "searches")
TERMS = ("outcome", "search", "evidence", "hallucination", "total")  # what group_stats reports


def group_stats(breakdowns: Sequence[RewardBreakdown], groups: Sequence[Any]) -> dict[str, float]:
    """Per term: `groups/<term>/varying` (share of groups of 2+ episodes in which it takes more than one value),
    `groups/<term>/std` (mean within-group standard deviation, ddof 1 as TRL's advantage uses) and
    `groups/<term>/mean`; `groups/n` the number of such groups. `groups[i]`: episode i's group key."""
    by: dict[Any, list[RewardBreakdown]] = {}
    for b, g in zip(breakdowns, groups, strict=True):
        by.setdefault(g, []).append(b)
    full = [bs for bs in by.values() if len(bs) >= 2]
    out: dict[str, float] = {"groups/n": float(len(full))}
    for term in TERMS:
        values = [[float(getattr(b, term)) for b in bs] for bs in full]
        out[f"groups/{term}/mean"] = float(np.mean([getattr(b, term) for b in breakdowns])) if breakdowns else 0.0
        if full:
            out[f"groups/{term}/varying"] = float(np.mean([np.ptp(v) > 1e-9 for v in values]))
            out[f"groups/{term}/std"] = float(np.mean([np.std(v, ddof=1) for v in values]))
    return out


def funnel_stats(funnels: Sequence[Any]) -> dict[str, float]:
    """`funnel/<step>`: the share of the episodes (of claims with gold papers) that reach each funnel step."""
    fs = [f for f in funnels if f is not None]
    return {f"funnel/{step}": float(np.mean([getattr(f, step) for f in fs])) for step in STEPS} if fs else {}


def final_text(completion: list[dict[str, Any]] | str) -> str:
    """The report a rollout ended with: the last assistant message's text."""
    if isinstance(completion, str):
        return completion
    for m in reversed(completion):
        if m.get("role") == "assistant":
            return m.get("content") or ""
    return ""


class RewardBank:
    """Scores a batch of rollouts once; `functions()` are the per-component TRL reward functions."""

    def __init__(self, cfg: RewardConfig, judge=None, keep: int = 64,
                 gold: Mapping[str, Mapping[str, GoldPaper]] | None = None) -> None:
        """`gold`: claim id -> its gold papers (rewards/funnel.py), for the funnel's per-step shares."""
        self.cfg, self.judge, self.gold = cfg, judge, dict(gold or {})
        self.last_stats: dict[str, float] = {}
        self._cache: OrderedDict[tuple, list] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()
        self.last_batch: list[dict[str, Any]] = []  # sample episodes for logging

    def weights(self) -> list[float]:
        if self.cfg.variant == "outcome_only":
            return [1.0, 0.0, 0.0, 0.0, 0.0]
        return [1.0, self.cfg.beta1, self.cfg.beta2, -self.cfg.beta3, 0.0]

    def _breakdowns(self, completions, environments, label, claim, claim_id=None) -> list:
        texts = [final_text(c) for c in completions]
        key = tuple((id(e.budget), t, tuple(e.budget.query_texts())) for e, t in zip(environments, texts, strict=True))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        views = [EpisodeView(claim=c, gold=Label(g) if g else None, queries=e.budget.query_texts(), ledger=dict(e.budget.ledger),
                             final_text=t) for c, g, e, t in zip(claim, label, environments, texts, strict=True)]
        scored = score_many(views, self.cfg, self.judge)
        ids = list(claim_id) if claim_id is not None else list(claim)  # a group: the episodes of one claim
        stats = group_stats(scored, ids)
        funnels = [funnel(self.gold[i], v.gold, v.ledger, b.entries, b.conclusion, self.cfg.threshold)
                   if i in self.gold else None for i, v, b in zip(ids, views, scored, strict=True)]
        stats.update(funnel_stats(funnels))
        with self._lock:
            self.last_stats = stats
            self._cache[key] = scored
            while len(self._cache) > self._keep:
                self._cache.popitem(last=False)
            self.last_batch = [{"claim": v.claim, "gold": v.gold.value if v.gold else None, "queries": v.queries,
                                "completion": c if isinstance(c, list) else [{"role": "assistant", "content": c}],
                                "reward": b.model_dump()} for v, c, b in zip(views, completions, scored, strict=True)]
        return scored

    def _component(self, name: str):
        def fn(completions, environments=None, label=None, claim=None, claim_id=None, **_: Any) -> list[float]:
            if environments is None:
                raise ValueError("the BioCheck rewards need the rollout environments (environment_factory)")
            scored = self._breakdowns(completions, environments, label, claim, claim_id)
            if name == "searches":
                return [float(len(e.budget.queries)) for e in environments]
            return [float(getattr(b, name)) for b in scored]

        fn.__name__ = name  # TRL logs rewards/<__name__>/mean
        return fn

    def functions(self) -> list:
        return [self._component(n) for n in COMPONENTS]
