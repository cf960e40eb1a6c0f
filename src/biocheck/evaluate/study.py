"""A study's answer: a difference between two systems over seeds x claims, with its uncertainty.

A study (issue 33) evaluates every trained (variant, seed) unit and the shared start on the same claims. So the
data of one metric is a seeds x claims table per variant, in the (numerator, denominator) form of
`evaluate.ratios` (accuracy: right / 1 per claim; EHR: its rate / 1 for a citing report, 0 / 0 otherwise), and a
unit's value is sum(num) / sum(den) over the claims, as in every other table of this project.

The interval is a two-level bootstrap: each resample draws seeds with replacement and, independently, claims
with replacement. Seeds and claims are crossed, not nested (every seed is scored on the same claims), so the
claims are drawn once per resample and shared by every seed and both systems; drawing them again within each
seed would treat the same 100 claims as 300 fresh ones and shrink the claim term of the variance by the number
of seeds. Both systems take the same seeds (a variant's seed k starts from the same SFT start and the same data
order as the other's), so the comparison is paired by seed and by claim. The start is one unit, without seeds.

For accuracy there is also a test that needs no resampling: per claim, each system's share of right answers over
its seeds; a sign test over the claims where the two shares differ (scipy's exact binomial test).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biocheck.evaluate.ratios import applies, columns, mdd
from biocheck.evaluate.systems.base import Prediction

LEVEL = 0.95


@dataclass
class Table:
    """One system's scores of one metric: per seed (rows) and claim (columns), numerator and denominator.
    The start, which has no seeds, is a table of one row."""

    num: np.ndarray
    den: np.ndarray

    def __post_init__(self) -> None:
        self.num = np.atleast_2d(np.asarray(self.num, dtype=float))
        self.den = np.atleast_2d(np.asarray(self.den, dtype=float))
        if self.num.shape != self.den.shape:
            raise ValueError(f"numerators {self.num.shape} and denominators {self.den.shape} differ in shape")

    @property
    def seeds(self) -> int:
        return self.num.shape[0]

    @property
    def claims(self) -> int:
        return self.num.shape[1]


def unit_values(t: Table, seeds: np.ndarray, claims: np.ndarray) -> np.ndarray:
    """The metric of each resample: the mean over its seeds of each seed's ratio over its claims.
    `seeds` [R, S] and `claims` [R, C] are row and column indices; NaN where no drawn seed has a denominator."""
    num = t.num[seeds[:, :, None], claims[:, None, :]].sum(-1)  # [R, S]
    den = t.den[seeds[:, :, None], claims[:, None, :]].sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_seed = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
    out = np.full(per_seed.shape[0], np.nan)
    some = ~np.isnan(per_seed).all(axis=1)
    out[some] = np.nanmean(per_seed[some], axis=1)
    return out


def draws(n_seeds: int, n_claims: int, n_resamples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seed and claim indices of `n_resamples` two-level resamples (seeds and claims drawn independently)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_seeds, (n_resamples, n_seeds)), rng.integers(0, n_claims, (n_resamples, n_claims))


def observed(t: Table) -> float:
    """The table's value: the mean over seeds of each seed's ratio (NaN when no seed has a denominator)."""
    return float(unit_values(t, np.arange(t.seeds)[None], np.arange(t.claims)[None])[0])


def difference(a: Table, b: Table, n_resamples: int = 2000, seed: int = 0,
               draw: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, Any]:
    """`a` minus `b` on the same claims: the observed difference, the two-level bootstrap's percentile interval,
    its two-sided p (twice the share of resamples on the other side of 0, capped at 1), its standard error and
    the minimum detectable difference (a test at 0.05 with 80% power, `ratios.mdd`). `b` has a's seeds (paired
    by seed) or one row (the start). `draw`: explicit (seed, claim) indices instead of random ones."""
    if a.claims != b.claims:
        raise ValueError(f"the two systems were scored on {a.claims} and {b.claims} claims: not the same claims")
    if b.seeds not in (1, a.seeds):
        raise ValueError(f"{a.seeds} seeds against {b.seeds}: pair by seed (the same count) or compare with one unit")
    out: dict[str, Any] = {"a": _finite(observed(a)), "b": _finite(observed(b)), "diff": None, "lo": None,
                           "hi": None, "p": None, "se": None, "mdd": None, "seeds": a.seeds, "claims": a.claims,
                           "resamples": 0, "interval": None}
    if out["a"] is None or out["b"] is None:
        return out
    out["diff"] = diff = out["a"] - out["b"]
    seeds, claims = draw if draw is not None else draws(a.seeds, a.claims, n_resamples, seed)
    b_seeds = seeds if b.seeds == a.seeds else np.zeros((seeds.shape[0], 1), dtype=int)
    d = unit_values(a, seeds, claims) - unit_values(b, b_seeds, claims)
    d = d[np.isfinite(d)]
    if d.size < 2:
        return out
    lo, hi = np.quantile(d, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    beyond = np.mean(d <= 0) if diff > 0 else np.mean(d >= 0) if diff < 0 else 1.0
    out.update(lo=float(lo), hi=float(hi), p=float(min(1.0, 2 * beyond)), se=float(d.std(ddof=1)), mdd=mdd(d),
               resamples=int(d.size), interval="two-level percentile bootstrap (seeds x claims)")
    return out


def pooled_sign_test(a_right: np.ndarray, b_right: np.ndarray) -> dict[str, Any]:
    """Accuracy's paired test over claims: each claim's share of right answers over a system's seeds; an exact
    two-sided sign test over the claims where the shares differ. `b_right` may have one row (the start)."""
    from scipy.stats import binomtest

    a = np.atleast_2d(np.asarray(a_right, dtype=float)).mean(axis=0)
    b = np.atleast_2d(np.asarray(b_right, dtype=float)).mean(axis=0)
    if a.shape != b.shape:
        raise ValueError(f"{a.size} claims against {b.size}: not the same claims")
    better, worse = int((a > b).sum()), int((a < b).sum())
    p = 1.0 if better + worse == 0 else float(binomtest(better, better + worse, 0.5).pvalue)
    return {"better": better, "worse": worse, "tied": int(a.size - better - worse), "p": p,
            "test": "exact sign test over claims (per-claim share right, pooled over seeds)"}


def sentence(metric: str, a: str, b: str, d: dict[str, Any]) -> str:
    """What the difference says, in words: its size and interval, and whether this study can tell."""
    size = f"{d['seeds']} seed{'s' * (d['seeds'] != 1)} x {d['claims']} claims"
    if d["diff"] is None:
        return f"{metric}, {a} minus {b}: not measured ({size}; a system has nothing to count)."
    head = f"{metric}, {a} minus {b}: {d['diff']:+.3f}"
    if d["lo"] is None:
        return f"{head} ({size}); no interval: too few resamples differ, so this study cannot say more."
    head += f" [{d['lo']:+.3f}, {d['hi']:+.3f}] ({size}, p = {d['p']:.2g})"
    detect = f"it could detect a difference of {d['mdd']:.3f} or more" if d["mdd"] is not None else ""
    if d["lo"] > 0 or d["hi"] < 0:
        side = "higher" if d["lo"] > 0 else "lower"
        return f"{head}: {a} is {side} on these claims and seeds; {detect or 'the interval excludes 0'}."
    return (f"{head}: the interval includes 0, so this study cannot tell them apart"
            + (f"; {detect}, with 80% power." if detect else "."))


def table(metric: str, runs: Sequence[Sequence[Prediction]]) -> Table | None:
    """One system's table of `metric`: a row per run (seed), the claims in the order of their ids. Every run must
    have scored the same claims; None when the metric does not apply to the system (a label-only one's EHR)."""
    ids = sorted(p.id for p in runs[0])
    rows = []
    for k, run in enumerate(runs):
        by_id = {p.id: p for p in run}
        if sorted(by_id) != ids or len(by_id) != len(run):
            raise ValueError(f"run {k} scored other claims than run 0 ({len(by_id)} against {len(ids)}): a study "
                             "compares the same claims")
        if not applies(metric, run):
            return None
        rows.append(columns(metric, [by_id[i] for i in ids]))
    return Table(np.stack([n for n, _ in rows]), np.stack([d for _, d in rows]))


def analyze(systems: Mapping[str, Sequence[Sequence[Prediction]]], metrics: Sequence[str],
            reference: str, others: Sequence[str], n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """`reference` (e.g. eg_grpo) minus each of `others` (outcome_only, the start) on each metric: the values,
    the differences with their two-level bootstrap, for accuracy the pooled sign test, and a sentence each.
    `systems`: name -> its runs' predictions (one run per seed; the start: one run)."""
    out: dict[str, Any] = {"reference": reference, "metrics": {}}
    ids = {name: sorted(p.id for p in runs[0]) for name, runs in systems.items()}
    for name, got in ids.items():  # paired by claim id: the same claims, not only as many
        if got != ids[reference]:
            raise ValueError(f"{name} scored other claims than {reference} ({len(got)} against "
                             f"{len(ids[reference])}): a study compares the same claims")
    for metric in metrics:
        tables = {name: table(metric, runs) for name, runs in systems.items()}
        entry: dict[str, Any] = {"values": {n: None if t is None else _finite(observed(t)) for n, t in tables.items()},
                                 "differences": {}}
        for other in others:
            a, b = tables[reference], tables[other]
            if a is None or b is None:
                continue
            d = difference(a, b, n_resamples, seed)
            if metric == "accuracy":
                d["sign_test"] = pooled_sign_test(a.num, b.num)
            d["sentence"] = sentence(metric, reference, other, d)
            entry["differences"][other] = d
        out["metrics"][metric] = entry
    return out


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


__all__ = ["Table", "analyze", "difference", "draws", "observed", "pooled_sign_test", "sentence", "table",
           "unit_values"]
