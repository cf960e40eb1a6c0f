"""Headline metrics as ratios of per-claim sums, with their intervals and paired tests.

Every headline number but macro-F1 is sum(numerator) / sum(denominator) over the claims of one system on one
dataset, each claim giving one (numerator, denominator) pair:

    accuracy        right / 1                 parse_rate      parseable report (label-only: a label read) / 1
    citing_rate     cites >= 1 item / 1       grounded_rate   parseable, cites, nothing hallucinated / 1
    ehr             its EHR / 1, for a report that parses and cites (0 / 0 otherwise: silence is not evidence)
    ehr_micro       hallucinated items / cited items
    eqs             its EQS / 1, for a report whose items were judged (eqs_supporting, eqs_refuting: per side)
    rationale_f1    2 x correct rationale sentences (selection + label) / (selected + gold sentences)

So one claim-level bootstrap serves them all (resample claims, sum, divide), the two systems of a paired
test share the resampled claims, and no report that says nothing can look better than one that cites.
Proportions of claims (den 1 per claim) get an exact binomial interval; the others scipy's BCa bootstrap
(`biocheck.measures.bootstrap`, which says when BCa is undefined and what it gave instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biocheck.evaluate.systems.base import Prediction
from biocheck.measures import Interval, bootstrap, proportion_ci

Pair = tuple[float, float]  # (numerator, denominator) of one claim
RATIO_METRICS = ("accuracy", "parse_rate", "citing_rate", "grounded_rate", "ehr", "ehr_micro", "eqs",
                 "eqs_supporting", "eqs_refuting", "rationale_f1")
PROPORTIONS = frozenset({"accuracy", "parse_rate", "citing_rate", "grounded_rate"})  # den = 1 per claim
POWER = 0.80  # the minimum detectable difference is the one a test at level 0.05 finds this often


def _cites(p: Prediction) -> bool:
    return bool(p.cited)


def _claim_pair(metric: str, p: Prediction) -> Pair:
    """One claim's (numerator, denominator) for `metric` (see the module docstring)."""
    if metric == "accuracy":
        return float(p.pred is not None and p.pred == p.gold), 1.0
    if metric == "parse_rate":  # a label-only system "parses" when a label could be read from its answer
        return float(bool(p.parseable) if p.writes_report else p.pred is not None), 1.0
    if metric == "citing_rate":
        return float(_cites(p)), 1.0
    if metric == "grounded_rate":
        return float(bool(p.parseable) and _cites(p) and not p.hallucinated), 1.0
    if metric == "ehr":
        return (float(p.ehr), 1.0) if _cites(p) and p.ehr is not None else (0.0, 0.0)
    if metric == "ehr_micro":
        return float(p.hallucinated or 0), float(p.cited or 0)
    if metric in ("eqs", "eqs_supporting", "eqs_refuting"):
        v = getattr(p, metric)
        return (float(v), 1.0) if v is not None else (0.0, 0.0)
    if metric == "rationale_f1":
        c = p.rationale
        return (0.0, 0.0) if c is None else (2.0 * c.sentence_label, float(c.sentence_retrieved + c.sentence_relevant))
    raise ValueError(f"unknown ratio metric {metric!r}")


def applies(metric: str, preds: Sequence[Prediction]) -> bool:
    """Does `metric` mean anything for these predictions? (report metrics need reports; rationale F1 gold)"""
    if metric in ("accuracy", "parse_rate"):
        return True
    if not any(p.writes_report for p in preds):
        return False
    if metric == "rationale_f1":
        return any(p.rationale is not None for p in preds)
    return True


def columns(metric: str, preds: Sequence[Prediction]) -> tuple[np.ndarray, np.ndarray]:
    pairs = [_claim_pair(metric, p) for p in preds]
    return np.array([a for a, _ in pairs], dtype=float), np.array([b for _, b in pairs], dtype=float)


def _ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
    """sum(num) / sum(den) along the last axis (scipy's `axis`: always -1 here); NaN where the denominator
    sums to 0."""
    n, d = num.sum(-1), den.sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(d > 0, n / np.where(d > 0, d, 1.0), np.nan)


@dataclass(frozen=True)
class Resampling:
    """The bootstrap every metric and system of one evaluation shares: one seed, so scipy draws the same
    resampled claims for each statistic (a paired statistic resamples both systems' claims together)."""

    n_resamples: int
    seed: int


def resamples(n: int, n_resamples: int, seed: int) -> Resampling | None:
    """The bootstrap for `n` claims; None when there is nothing to resample (no claim, or bootstrap 0)."""
    if n == 0 or n_resamples < 1:
        return None
    return Resampling(n_resamples, seed)


def _paired_ratio(na: np.ndarray, da: np.ndarray, nb: np.ndarray, db: np.ndarray, axis: int = -1) -> np.ndarray:
    """Reference minus other, of one resample of claims (both systems' columns resampled together)."""
    return _ratio(na, da) - _ratio(nb, db)


def summary(metric: str, preds: Sequence[Prediction], boot: Resampling | None) -> dict[str, Any]:
    """{value, lo, hi, n, interval}: the metric, its 95% interval, and n (what the denominator counts:
    claims for proportions and rationale F1, citing reports for EHR, judged reports for EQS, cited items for
    micro-EHR); every key present, None where the metric does not apply or nothing was counted."""
    out: dict[str, Any] = {"value": None, "lo": None, "hi": None, "n": 0, "interval": None}
    if not preds or not applies(metric, preds):
        return out
    num, den = columns(metric, preds)
    value = float(_ratio(num, den))
    n = int(den.sum() if metric in ("ehr_micro",) else (den > 0).sum())
    out["n"] = len(preds) if metric in PROPORTIONS or metric == "rationale_f1" else n
    if math.isnan(value):
        return out
    out["value"] = value
    if metric in PROPORTIONS:
        ci, out["interval"] = proportion_ci(int(num.sum()), len(preds)), "exact binomial"
    else:
        found = None if boot is None else bootstrap(_ratio, (num, den), boot.n_resamples, boot.seed)
        ci, out["interval"] = (None, None) if found is None else ((found.lo, found.hi), f"{found.method} over claims")
    if ci is not None:
        out["lo"], out["hi"] = ci
    return out


def mdd(diffs: np.ndarray, level: float = 0.95, power: float = POWER) -> float | None:
    """The minimum detectable difference: the true difference a two-sided test at 1 - level finds with
    `power`, (z_{1-a/2} + z_power) x the bootstrap standard error of the paired difference. None when the
    difference never varies over resamples (the two systems agree on every claim, or too few claims)."""
    from scipy.stats import norm

    d = diffs[np.isfinite(diffs)]
    if d.size < 2 or float(d.std(ddof=1)) == 0.0:
        return None
    return float((norm.ppf(1 - (1 - level) / 2) + norm.ppf(power)) * d.std(ddof=1))


def paired_stat(observed_a: float, observed_b: float, diff_ci: Interval | None, n: int = 0) -> dict[str, Any]:
    """Reference minus other: observed diff, and from the paired bootstrap of the difference (`diff_ci`) its
    mean, 95% interval (`interval` names the method), two-sided p (twice (k + 1) / (R + 1), k of the R resamples
    on the other side of 0, ties included, capped at 1: never 0) and the minimum detectable difference. `n`: the
    claims the metric counts in either system (EHR: those where one of them cites), the n its p can claim."""
    stat: dict[str, Any] = {"reference": _finite(observed_a), "other": _finite(observed_b), "diff": None, "n": n,
                            "mean": None, "lo": None, "hi": None, "p": None, "mdd": None, "interval": None}
    if stat["reference"] is None or stat["other"] is None:
        return stat
    diff = observed_a - observed_b
    stat["diff"] = float(diff)
    if diff_ci is None:
        return stat
    d = diff_ci.distribution
    ok = d[np.isfinite(d)]
    # (k + 1) / (R + 1): a resampling p is never 0, its smallest value is one resample's worth
    k = int(np.sum(ok <= 0)) if diff > 0 else int(np.sum(ok >= 0)) if diff < 0 else ok.size
    beyond = (k + 1) / (ok.size + 1)
    stat.update(mean=float(ok.mean()), lo=diff_ci.lo, hi=diff_ci.hi, p=float(min(1.0, 2 * beyond)), mdd=mdd(d),
                interval=f"paired {diff_ci.method} over claims")
    return stat


def paired_ratio(metric: str, a: Sequence[Prediction], b: Sequence[Prediction],
                 boot: Resampling | None) -> dict[str, Any]:
    """`paired_stat` of a ratio metric for two systems' predictions of the same claims, in the same order."""
    if not (applies(metric, a) and applies(metric, b)):
        return paired_stat(math.nan, math.nan, None)
    (na, da), (nb, db) = columns(metric, a), columns(metric, b)
    ci = None if boot is None else bootstrap(_paired_ratio, (na, da, nb, db), boot.n_resamples, boot.seed)
    # a claim neither system's denominator counts moves no resample's difference: it is not one of the test's claims
    return paired_stat(float(_ratio(na, da)), float(_ratio(nb, db)), ci, n=int(np.sum((da > 0) | (db > 0))))


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None
