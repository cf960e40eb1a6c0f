"""How good a judge is on labelled claim–paper pairs: accuracy, macro-F1, per-label recall, calibration.

The judge is scored exactly as R_evidence reads it (s per label from the judge protocol); its prediction is
the label with the largest s, its confidence that s. ECE (expected calibration error) is the usual binned
|accuracy - confidence| weighted by bin size; `above_threshold` is the share of pairs whose top s exceeds the
reward's threshold (a pair counts towards R_evidence only then).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from biocheck.labels import LABELS
from biocheck.measures import classification_metrics
from biocheck.rewards.judge.base import KEYS, Judge, Scores
from biocheck.rewards.judge_train.pairs import JudgePair


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """sum over equal-width confidence bins of (bin share) * |accuracy - mean confidence| (bins (a, b], 0 in the first)."""
    conf = np.asarray(confidence, dtype=float)
    ok = np.asarray(correct, dtype=float)
    if conf.size == 0:
        return 0.0
    which = np.clip(np.ceil(conf * bins).astype(int) - 1, 0, bins - 1)
    ece = 0.0
    for b in range(bins):
        m = which == b
        if m.any():
            ece += m.mean() * abs(ok[m].mean() - conf[m].mean())
    return float(ece)


def score_metrics(gold: Sequence[str], scores: Sequence[Scores], threshold: float = 0.5,
                  bins: int = 10) -> dict[str, Any]:
    """Metrics of judge scores against gold label values (SUPPORTED / REFUTED / NEI)."""
    if len(gold) != len(scores):
        raise ValueError(f"{len(gold)} gold labels but {len(scores)} scores")
    pred = [max(KEYS, key=s.__getitem__) for s in scores]
    conf = [s[p] for s, p in zip(scores, pred, strict=True)]
    m = classification_metrics(list(gold), pred, LABELS)
    if not gold:
        return m
    counts = Counter(gold)
    return {
        "n": m["n"],
        "accuracy": m["accuracy"],
        "macro_f1": m["macro_f1"],
        "recall": {label: m["per_label"][label]["recall"] for label in LABELS},
        "ece": expected_calibration_error(conf, [p == g for p, g in zip(pred, gold, strict=True)], bins),
        "above_threshold": float(np.mean([c > threshold for c in conf])),
        "answer_mass": float(np.mean([sum(s.values()) for s in scores])),  # how much of p the 3 tokens hold
        "majority_accuracy": max(counts.values()) / len(gold),
        "predicted": {label: sum(p == label for p in pred) for label in LABELS},
        "gold": {label: counts.get(label, 0) for label in LABELS},
        "confusion": m["confusion"],
    }


def evaluate_judge(judge: Judge, pairs: Sequence[JudgePair], threshold: float = 0.5) -> dict[str, Any]:
    """Score every pair with `judge` (its own batching) and measure it against the pairs' gold labels."""
    scores = judge.score([(p.claim, p.article()) for p in pairs])
    return score_metrics([p.label for p in pairs], scores, threshold)
