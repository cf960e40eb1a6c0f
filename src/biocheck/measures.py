"""Evaluation metrics: classification (2-way / 3-way), bootstrap intervals, evidence quality (EQS, EHR).

Classification follows scikit-learn exactly (macro averages over the label set in use, zero_division=0). A
prediction that is None (no conclusion could be read) or outside the label set (NEI in the 2-way setting)
counts as wrong: it lowers accuracy and the gold label's recall, and is nobody's precision, as sklearn does
for a predicted label outside `labels`. The confusion matrix has an extra column "OTHER" for those.
Everything returned is plain JSON numbers, ready for DVC metrics.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biocheck.labels import Label

LABEL_SETS: dict[str, tuple[str, ...]] = {
    "2way": (Label.SUPPORTED.value, Label.REFUTED.value),
    "3way": (Label.SUPPORTED.value, Label.REFUTED.value, Label.NEI.value),
}
OTHER = "OTHER"  # confusion-matrix column for predictions outside the label set (None included)


def _name(x: Label | str | None) -> str | None:
    if x is None:
        return None
    return x.value if isinstance(x, Label) else str(x)


def _encode(gold: Sequence[Any], pred: Sequence[Any], labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Gold and predicted label indices; a prediction outside `labels` (or None) gets index len(labels)."""
    if len(gold) != len(pred):
        raise ValueError(f"gold has {len(gold)} labels, pred {len(pred)}")
    index = {lab: i for i, lab in enumerate(labels)}
    g = [index.get(_name(x), -1) for x in gold]
    if any(i < 0 for i in g):
        bad = sorted({str(_name(x)) for x, i in zip(gold, g, strict=True) if i < 0})
        raise ValueError(f"gold labels {bad} are not in the label set {list(labels)}")
    p = [index.get(_name(x), len(labels)) for x in pred]
    return np.asarray(g, dtype=np.int64), np.asarray(p, dtype=np.int64)


def _scores(cm: np.ndarray) -> dict[str, np.ndarray]:
    """Per-label precision/recall/F1 from confusion matrices [..., k, k+1] (rows gold, cols pred + OTHER)."""
    k = cm.shape[-2]
    tp = np.diagonal(cm[..., :k], axis1=-2, axis2=-1).astype(float)
    predicted = cm[..., :k].sum(axis=-2).astype(float)  # column sums over the label columns
    support = cm.sum(axis=-1).astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(support > 0, tp / support, 0.0)
        denom = precision + recall
        f1 = np.where(denom > 0, 2 * precision * recall / denom, 0.0)
    n = cm.sum(axis=(-2, -1)).astype(float)
    accuracy = np.where(n > 0, tp.sum(axis=-1) / np.where(n > 0, n, 1), 0.0)
    return {"precision": precision, "recall": recall, "f1": f1, "support": support, "accuracy": accuracy}


def _confusion(g: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
    return np.bincount(g * (k + 1) + p, minlength=k * (k + 1)).reshape(k, k + 1)


def classification_metrics(gold: Sequence[Label | str], pred: Sequence[Label | str | None],
                           labels: Sequence[str] = LABEL_SETS["3way"]) -> dict[str, Any]:
    """Accuracy, macro precision/recall/F1 (sklearn, zero_division=0), per-label scores and confusion matrix."""
    labels = [_name(x) for x in labels]
    g, p = _encode(gold, pred, labels)
    k = len(labels)
    if len(g) == 0:
        return {"n": 0}
    cm = _confusion(g, p, k)
    s = _scores(cm)
    return {
        "n": int(len(g)),
        "accuracy": float(s["accuracy"]),
        "macro_precision": float(s["precision"].mean()),
        "macro_recall": float(s["recall"].mean()),
        "macro_f1": float(s["f1"].mean()),
        "per_label": {lab: {"precision": float(s["precision"][i]), "recall": float(s["recall"][i]),
                            "f1": float(s["f1"][i]), "support": int(s["support"][i])} for i, lab in enumerate(labels)},
        "confusion": {lab: {col: int(cm[i, j]) for j, col in enumerate([*labels, OTHER])}
                      for i, lab in enumerate(labels)},
    }


BCA = "BCa bootstrap"  # the interval method, as records and docs name it
DEGENERATE = "degenerate: every resample equal"  # BCa is undefined; the interval is the point
PERCENTILE = "percentile bootstrap (BCa undefined)"  # BCa is NaN on non-constant resamples (a ratio over no claim)


@dataclass(frozen=True)
class Interval:
    """A bootstrap interval, the method that made it, and the resampled statistic (for paired p and MDD)."""

    lo: float
    hi: float
    method: str
    distribution: np.ndarray


def bootstrap(statistic: Callable[..., np.ndarray], data: Sequence[np.ndarray], n_resamples: int = 1000,
              seed: int = 0, level: float = 0.95) -> Interval | None:
    """scipy.stats.bootstrap's BCa interval of `statistic(*data, axis=-1)` (vectorized), the arrays of `data`
    resampled together (paired: one row per claim), seeded. None without two claims or resamples. Where BCa
    is undefined, the interval says so in `method`: the point itself when every resample is equal (all claims
    alike), else the percentile interval of the finite resamples."""
    from scipy.stats import bootstrap as scipy_bootstrap

    arrays = [np.asarray(d) for d in data]
    if n_resamples < 1 or arrays[0].shape[-1] < 2:
        return None
    with warnings.catch_warnings():  # a degenerate BCa is handled below, not warned about
        warnings.simplefilter("ignore", RuntimeWarning)
        res = scipy_bootstrap(arrays, statistic, n_resamples=n_resamples, vectorized=True, paired=True, axis=-1,
                              confidence_level=level, method="BCa", rng=np.random.default_rng(seed))
    dist = np.asarray(res.bootstrap_distribution, dtype=float)
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if math.isfinite(lo) and math.isfinite(hi):
        return Interval(lo, hi, BCA, dist)
    finite = dist[np.isfinite(dist)]
    if finite.size == 0:
        return None
    if np.ptp(finite) == 0:
        return Interval(float(finite[0]), float(finite[0]), DEGENERATE, dist)
    return Interval(*_interval(finite, level), PERCENTILE, dist)


def macro_score(name: str, k: int) -> Callable[..., np.ndarray]:
    """A vectorized statistic: gold and predicted label indices ([..., n], `_encode`'s) -> accuracy or the
    macro average of `name` ("precision", "recall", "f1") over k labels, for each leading index."""

    def statistic(g: np.ndarray, p: np.ndarray, axis: int = -1) -> np.ndarray:
        lead, n = g.shape[:-1], g.shape[-1]
        r = int(np.prod(lead))
        cells = (g * (k + 1) + p).reshape(r, n) + np.arange(r)[:, None] * (k * (k + 1))
        cm = np.bincount(cells.ravel(), minlength=r * k * (k + 1)).reshape(r, k, k + 1)
        s = _scores(cm)
        return (s[name] if name == "accuracy" else s[name].mean(-1)).reshape(lead)

    return statistic


def bootstrap_ci(gold: Sequence[Label | str], pred: Sequence[Label | str | None],
                 labels: Sequence[str] = LABEL_SETS["3way"], n_resamples: int = 1000, seed: int = 0,
                 level: float = 0.95) -> dict[str, tuple[float, float]]:
    """BCa bootstrap intervals (episodes resampled with replacement, seeded) for accuracy and macro P/R/F1."""
    labels = [_name(x) for x in labels]
    g, p = _encode(gold, pred, labels)
    out = {}
    for metric, score in (("accuracy", "accuracy"), ("macro_precision", "precision"), ("macro_recall", "recall"),
                          ("macro_f1", "f1")):
        ci = bootstrap(macro_score(score, len(labels)), (g, p), n_resamples, seed, level)
        if ci is not None:
            out[metric] = (ci.lo, ci.hi)
    return out


def bootstrap_mean_ci(values: Sequence[float], n_resamples: int = 1000, seed: int = 0,
                      level: float = 0.95) -> tuple[float, float] | None:
    """BCa bootstrap interval of a mean (None for fewer than two values)."""
    ci = bootstrap(np.mean, (np.asarray(list(values), dtype=float),), n_resamples, seed, level)
    return None if ci is None else (ci.lo, ci.hi)


def _interval(v: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2 * 100
    lo, hi = np.percentile(v, [tail, 100 - tail])
    return float(lo), float(hi)


def proportion_ci(k: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Clopper-Pearson (exact binomial) interval of k successes in n trials; None for n = 0.

    A bootstrap of 0 of 4 is [0, 0], which reads as certainty; the exact interval is [0, 0.60]. Exact
    rather than Wilson: at this project's small n its coverage is never below the level it claims.
    """
    if n <= 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def evidence_metrics(breakdowns: Iterable[Any]) -> dict[str, float | int | None]:
    """Report quality over reports (docs/evaluation.md): nothing here rewards a report for saying nothing.

    parse_rate: reports with a conclusion and no parse problem; citing_rate: reports with at least one
    evidence item; ehr: mean per-report EHR over the reports that parse and cite (None when none does: an
    unparseable report is a failure, never an EHR); ehr_micro: hallucinated / cited items over every report
    (None when nothing is cited); eqs: mean per-report EQS over citing reports;
    eqs_micro: mean s over all cited items. Rates over no reports are None.
    """
    bs = list(breakdowns)
    citing = [b for b in bs if b.n_cited > 0]
    rated = [b for b in citing if b.conclusion is not None and not b.parse_problems]  # EHR: parsed and citing
    entries = [e for b in bs for e in b.entries]
    cited = sum(b.n_cited for b in bs)
    n = len(bs)
    return {
        "reports": n,
        "reports_citing": len(citing),
        "parse_rate": sum(b.conclusion is not None and not b.parse_problems for b in bs) / n if n else None,
        "citing_rate": len(citing) / n if n else None,
        "cited_per_report": cited / n if n else None,
        "eqs": sum(b.eqs for b in citing) / len(citing) if citing else None,
        "eqs_micro": sum(e.s for e in entries) / len(entries) if entries else None,
        "ehr": sum(b.ehr for b in rated) / len(rated) if rated else None,
        "ehr_micro": sum(b.n_hallucinated for b in bs) / cited if cited else None,
        "fuzzy_only_rate": sum(e.fuzzy and not e.strict for e in entries) / len(entries) if entries else None,
        "judge_used": sum(b.judge_used for b in bs) / n if n else None,
    }


def aggregate(items: Iterable[Any], label_sets: Sequence[str] = ("2way", "3way"), n_resamples: int = 1000,
              seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """DVC-ready metrics for scored episodes: `RewardBreakdown`s, or (episode, breakdown) pairs.

    reward: mean of each component (+ bootstrap interval of the total); evidence: `evidence_metrics`;
    per label set: `classification_metrics` over the episodes whose gold label is in the set, with bootstrap
    intervals as <metric>_lo / <metric>_hi. Episodes without a gold label only enter reward and evidence.
    """
    bs = [x[1] if isinstance(x, tuple) else x for x in items]
    n = len(bs)
    out: dict[str, Any] = {"n": n}
    reward = {name: (sum(getattr(b, name) for b in bs) / n if n else 0.0)
              for name in ("total", "outcome", "search", "evidence", "hallucination")}
    ci = bootstrap_mean_ci([b.total for b in bs], n_resamples, seed, level)
    if ci is not None:
        reward["total_lo"], reward["total_hi"] = ci
    out["reward"] = reward
    out["evidence"] = evidence_metrics(bs)
    out["parsed_rate"] = sum(b.conclusion is not None for b in bs) / n if n else 0.0
    for name in label_sets:
        if name not in LABEL_SETS:
            raise ValueError(f"label set {name!r}: expected one of {', '.join(LABEL_SETS)}")
        labels = LABEL_SETS[name]
        keep = [b for b in bs if _name(b.gold) in labels]
        gold = [_name(b.gold) for b in keep]
        pred = [_name(b.conclusion) for b in keep]
        m = classification_metrics(gold, pred, labels)
        for metric, (lo, hi) in bootstrap_ci(gold, pred, labels, n_resamples, seed, level).items():
            m[f"{metric}_lo"], m[f"{metric}_hi"] = lo, hi
        out[name] = m
    return out
