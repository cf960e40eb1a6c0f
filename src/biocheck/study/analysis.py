"""A study's answer: a difference between two systems over seeds, with an interval that keeps its promise.

A study (issue 33) evaluates every trained (variant, seed) unit and the shared start on the same claims. The data
of one metric is a seeds x claims table per variant, in the (numerator, denominator) form of `evaluate.ratios`
(accuracy: right / 1 per claim; EHR: its rate / 1 for a citing report, 0 / 0 otherwise), and a unit's value is
sum(num) / sum(den) over the claims, as in every other table of this project.

The inference is over seeds. Seed s of each variant starts from the same SFT start with the same data order, so
the two variants are paired by seed: d_s = value(reference, s) - value(other, s), and against the start (one
unit, no seeds) d_s = value(reference, s) - value(start). The difference is the mean of the d_s, its interval
the t interval with S - 1 degrees of freedom (scipy's one-sample t test), its p the t test's, and the minimum
detectable difference the true mean difference that test finds with 80% power at this S and this spread of the
d_s (the noncentral t). Why not the two-level bootstrap of seeds x claims this module used before: with 3 seeds
its seed term rests on 3 values resampled with replacement, so its intervals are too narrow; in null studies
simulated at the smol study's design they excluded 0 in 15-22% of studies at 95% (tests/study/test_analysis.py and
bench/study_calibration.py measure both methods). The t interval holds its level when the d_s are close to
normal; it is wide at few seeds (t(0.975, 2) = 4.30), which is the honest price of 3 seeds.

What it conditions on: the claims (one sample of the test split) and, against the start, the start's own
answers. A seed whose unit has no denominator (a model that never cites has no EHR) is left out of that metric.

Per-claim binary rates (accuracy, citing, grounded) also get an exact McNemar test per seed (the reference's
unit against the other's unit of the same seed, or against the start, claim by claim): b = claims only the
reference gets (right / citing / grounded), c = only the other; scipy's exact binomial test of b in b + c.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biocheck.evaluate.ratios import PROPORTIONS, applies, columns
from biocheck.evaluate.systems.base import Prediction

LEVEL = 0.95
POWER = 0.80  # the MDD is the difference the test finds this often
INTERVAL = "t interval over seeds (paired by seed; scipy.stats.ttest_1samp)"


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


def per_seed(t: Table) -> np.ndarray:
    """Each seed's value: sum(num) / sum(den) over the claims; NaN for a seed with no denominator."""
    num, den = t.num.sum(axis=1), t.den.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)


def observed(t: Table) -> float:
    """The table's value: the mean over seeds of each seed's ratio (NaN when no seed has a denominator)."""
    v = per_seed(t)
    return float(np.nanmean(v)) if np.isfinite(v).any() else math.nan


def mdd(sd: float, n: int, level: float = LEVEL, power: float = POWER) -> float | None:
    """The minimum detectable difference of a two-sided one-sample t test at 1 - level over n paired values
    with standard deviation `sd`: the true mean it rejects 0 for with probability `power` (noncentral t)."""
    from scipy.optimize import brentq
    from scipy.stats import nct
    from scipy.stats import t as student

    if n < 2 or not sd > 0:
        return None
    df, crit = n - 1, student.ppf(1 - (1 - level) / 2, n - 1)

    def short(delta: float) -> float:  # power at standardized effect delta, minus the power wanted
        nc = delta * math.sqrt(n)
        lower = float(nct.cdf(-crit, df, nc))  # the wrong-side tail: negligible, and NaN where scipy underflows
        return float(nct.sf(crit, df, nc)) + (lower if math.isfinite(lower) else 0.0) - power

    hi = 1.0
    while short(hi) < 0:  # the power grows with the effect: double until it is reached (before nct overflows)
        hi *= 2
    return float(brentq(short, 1e-9, hi) * sd)


def seeds_needed(effect: float, sd: float, level: float = LEVEL, power: float = POWER, most: int = 200) -> int | None:
    """The fewest seeds at which the paired t test over seeds finds a true mean difference `effect` with
    probability `power`, when per-seed differences spread with `sd` (noncentral t); None above `most` or when
    there is nothing to detect. What a pilot's estimates say a confirmatory study needs."""
    if not effect or not sd > 0:
        return None
    for n in range(2, most + 1):
        m = mdd(sd, n, level, power)
        if m is not None and m <= abs(effect):
            return n
    return None


def difference(a: Table, b: Table) -> dict[str, Any]:
    """`a` minus `b` on the same claims, paired by seed (`b` with a's seeds) or against one unit (`b` one row,
    the start): the mean of the per-seed differences, its t interval, two-sided p, standard error and minimum
    detectable difference (see the module docstring). Seeds where either side has no denominator are left out;
    with fewer than 2 left, or no spread between them, there is no interval."""
    if a.claims != b.claims:
        raise ValueError(f"the two systems were scored on {a.claims} and {b.claims} claims: not the same claims")
    if b.seeds not in (1, a.seeds):
        raise ValueError(f"{a.seeds} seeds against {b.seeds}: pair by seed (the same count) or compare with one unit")
    va, vb = per_seed(a), per_seed(b)
    d = va - (vb if b.seeds == a.seeds else vb[0])
    d = d[np.isfinite(d)]
    out: dict[str, Any] = {"a": _finite(observed(a)), "b": _finite(observed(b)), "diff": None, "lo": None,
                           "hi": None, "p": None, "se": None, "mdd": None, "seeds": int(d.size), "claims": a.claims,
                           "per_seed": [float(x) for x in d], "interval": None, "sd": None, "seeds_needed": None}
    if out["a"] is None or out["b"] is None or d.size == 0:
        return out
    out["diff"] = float(d.mean())
    sd = float(d.std(ddof=1)) if d.size >= 2 else 0.0
    if sd == 0.0:  # one seed, or every seed the same difference: nothing to say how far another seed would move it
        return out
    from scipy.stats import ttest_1samp

    test = ttest_1samp(d, 0.0)
    ci = test.confidence_interval(LEVEL)
    out.update(lo=float(ci.low), hi=float(ci.high), p=float(test.pvalue), se=sd / math.sqrt(d.size),
               mdd=mdd(sd, d.size), interval=INTERVAL, sd=sd,
               seeds_needed=seeds_needed(out["diff"], sd))  # to find this difference 80% of the time, if it is real
    return out


def mcnemar_by_seed(a: Table, b: Table) -> list[dict[str, Any]]:
    """An exact McNemar test per seed for a per-claim binary rate (den 1 per claim): b = claims where only `a`
    scores 1, c = only `b` (its row of the same seed, or its one row: the start); p of b in b + c at 1/2."""
    from scipy.stats import binomtest

    out = []
    for s in range(a.seeds):
        x, y = a.num[s] > 0, b.num[s if b.seeds == a.seeds else 0] > 0
        nb, nc = int((x & ~y).sum()), int((~x & y).sum())
        p = 1.0 if nb + nc == 0 else float(binomtest(nb, nb + nc, 0.5).pvalue)
        out.append({"seed_row": s, "b": nb, "c": nc, "p": p})
    return out


def sentence(metric: str, a: str, b: str, d: dict[str, Any]) -> str:
    """What the difference says, in words: its size and interval, its p, and what this design could detect."""
    from biocheck.evaluate.headline import p_text

    size = f"{d['seeds']} seed{'s' * (d['seeds'] != 1)} x {d['claims']} claims"
    if d["diff"] is None:
        return f"{metric}, {a} minus {b}: not measured ({size}; a system has nothing to count)."
    head = f"{metric}, {a} minus {b}: {d['diff']:+.3f}"
    if d["lo"] is None:
        why = "one seed" if d["seeds"] < 2 else "every seed gave the same difference"
        return f"{head} ({size}); no interval ({why}), so this study cannot say how far another seed would move it."
    head += f" [{d['lo']:+.3f}, {d['hi']:+.3f}] ({size}, p = {p_text(d['p'])[0]})"
    could = f"; at this size it would detect a true difference of {d['mdd']:.3f} with 80% power" if d["mdd"] else ""
    if d["lo"] > 0 or d["hi"] < 0:
        side = "higher" if d["lo"] > 0 else "lower"
        return f"{head}: {a} is {side} than {b} on these claims, over seeds{could}."
    return f"{head}: the interval includes 0, so this study does not show a difference{could}."


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


def majority(runs: Sequence[Prediction]) -> dict[str, Any]:
    """The majority-class baseline of the claims: the commonest gold label and the accuracy of always
    answering it (ties: the label named first in sorted order)."""
    counts = Counter(p.gold.value for p in runs)
    label, k = min(counts.items(), key=lambda x: (-x[1], x[0]))
    return {"label": label, "rate": k / len(runs), "claims": len(runs)}


def analyze(systems: Mapping[str, Sequence[Sequence[Prediction]]], metrics: Sequence[str],
            reference: str, others: Sequence[str]) -> dict[str, Any]:
    """`reference` (e.g. eg_grpo) minus each of `others` (outcome_only, the start) on each metric: the values,
    the differences over seeds, for per-claim binary rates the exact McNemar test per seed, for accuracy the
    majority-class rate beside it, and a sentence each. `systems`: name -> its runs' predictions (one run per
    seed; the start: one run)."""
    out: dict[str, Any] = {"reference": reference, "metrics": {}}
    ids = {name: sorted(p.id for p in runs[0]) for name, runs in systems.items()}
    for name, got in ids.items():  # paired by claim id: the same claims, not only as many
        if got != ids[reference]:
            raise ValueError(f"{name} scored other claims than {reference} ({len(got)} against "
                             f"{len(ids[reference])}): a study compares the same claims")
    for metric in metrics:
        tables = {name: table(metric, runs) for name, runs in systems.items()}
        entry: dict[str, Any] = {"values": {n: None if t is None else _finite(observed(t)) for n, t in tables.items()},
                                 "per_seed": {n: None if t is None else [_finite(x) for x in per_seed(t)]
                                              for n, t in tables.items()},
                                 "differences": {}}
        if metric == "accuracy":
            entry["majority"] = majority(systems[reference][0])
        for other in others:
            a, b = tables[reference], tables[other]
            if a is None or b is None:
                continue
            d = difference(a, b)
            if metric in PROPORTIONS:
                d["mcnemar"] = mcnemar_by_seed(a, b)
            d["sentence"] = sentence(metric, reference, other, d)
            entry["differences"][other] = d
        out["metrics"][metric] = entry
    return out


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


__all__ = ["INTERVAL", "Table", "analyze", "difference", "majority", "mcnemar_by_seed", "mdd", "observed",
           "per_seed", "seeds_needed", "sentence", "table"]
