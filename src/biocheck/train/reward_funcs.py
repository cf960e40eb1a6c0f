"""EG-GRPO's reward as TRL reward functions, one per component, over the rewards library.

The whole breakdown of a batch is computed once (one batched judge call) and each component is read
from it, so TRL logs every component (`rewards/<name>/mean`) and sums them with `reward_weights`:
  eg_grpo:      1*outcome + beta1*search + beta2*evidence - beta3*hallucination
  outcome_only: 1*outcome (the other components are still computed and logged, with weight 0)
`searches` (searches per episode) is logged the same way, always with weight 0.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from biocheck.labels import Label
from biocheck.rewards.components import EpisodeView, RewardConfig, score_many

COMPONENTS = ("outcome", "search", "evidence", "hallucination", "searches")


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

    def __init__(self, cfg: RewardConfig, judge=None, keep: int = 64) -> None:
        self.cfg, self.judge = cfg, judge
        self._cache: OrderedDict[tuple, list] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()
        self.last_batch: list[dict[str, Any]] = []  # sample episodes for logging

    def weights(self) -> list[float]:
        if self.cfg.variant == "outcome_only":
            return [1.0, 0.0, 0.0, 0.0, 0.0]
        return [1.0, self.cfg.beta1, self.cfg.beta2, -self.cfg.beta3, 0.0]

    def _breakdowns(self, completions, environments, label, claim) -> list:
        texts = [final_text(c) for c in completions]
        key = tuple((id(e.budget), t, tuple(e.budget.query_texts())) for e, t in zip(environments, texts, strict=True))
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        views = [EpisodeView(claim=c, gold=Label(g) if g else None, queries=e.budget.query_texts(), ledger=dict(e.budget.ledger),
                             final_text=t) for c, g, e, t in zip(claim, label, environments, texts, strict=True)]
        scored = score_many(views, self.cfg, self.judge)
        with self._lock:
            self._cache[key] = scored
            while len(self._cache) > self._keep:
                self._cache.popitem(last=False)
            self.last_batch = [{"claim": v.claim, "gold": v.gold.value if v.gold else None, "queries": v.queries,
                                "completion": c if isinstance(c, list) else [{"role": "assistant", "content": c}],
                                "reward": b.model_dump()} for v, c, b in zip(views, completions, scored, strict=True)]
        return scored

    def _component(self, name: str):
        def fn(completions, environments=None, label=None, claim=None, **_: Any) -> list[float]:
            if environments is None:
                raise ValueError("the BioCheck rewards need the rollout environments (environment_factory)")
            scored = self._breakdowns(completions, environments, label, claim)
            if name == "searches":
                return [float(len(e.budget.queries)) for e in environments]
            return [float(getattr(b, name)) for b in scored]

        fn.__name__ = name  # TRL logs rewards/<__name__>/mean
        return fn

    def functions(self) -> list:
        return [self._component(n) for n in COMPONENTS]
