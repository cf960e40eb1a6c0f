"""Evaluation metrics: equal to scikit-learn on random labels, hand-computed cases, bootstrap, evidence means."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import scipy.stats

from biocheck.labels import Label
from biocheck.measures import (
    BCA,
    DEGENERATE,
    LABEL_SETS,
    OTHER,
    PERCENTILE,
    aggregate,
    bootstrap,
    bootstrap_ci,
    bootstrap_mean_ci,
    classification_metrics,
    evidence_metrics,
)
from biocheck.rewards.components import EntryScore, RewardBreakdown

sklearn_metrics = pytest.importorskip("sklearn.metrics")

S, R, N = "SUPPORTED", "REFUTED", "NEI"


def _sk(gold, pred, labels):
    # sklearn needs one type: an unreadable conclusion (None) becomes a label outside the set
    pred = ["NONE" if p is None else p for p in pred]
    p, r, f, support = sklearn_metrics.precision_recall_fscore_support(gold, pred, labels=list(labels),
                                                                       zero_division=0)
    mp, mr, mf, _ = sklearn_metrics.precision_recall_fscore_support(gold, pred, labels=list(labels), average="macro",
                                                                    zero_division=0)
    return {"accuracy": sklearn_metrics.accuracy_score(gold, pred), "macro_precision": mp, "macro_recall": mr,
            "macro_f1": mf, "p": p, "r": r, "f": f, "support": support,
            "cm": sklearn_metrics.confusion_matrix(gold, pred, labels=list(labels))}


@pytest.mark.parametrize("seed", range(40))
def test_equal_to_sklearn_on_random_labels(seed):
    rng = random.Random(seed)
    name = "2way" if seed % 2 else "3way"
    labels = LABEL_SETS[name]
    n = rng.randrange(1, 60)
    gold = [rng.choice(labels[: rng.randrange(1, len(labels) + 1)]) for _ in range(n)]  # some labels may be absent
    pred = [rng.choice([*labels, N, None]) for _ in range(n)]  # NEI is outside the 2-way set; None is unreadable
    ours, ref = classification_metrics(gold, pred, labels), _sk(gold, pred, labels)
    for key in ("accuracy", "macro_precision", "macro_recall", "macro_f1"):
        assert ours[key] == pytest.approx(ref[key], abs=1e-12), key
    for i, lab in enumerate(labels):
        got = ours["per_label"][lab]
        assert (got["precision"], got["recall"], got["f1"]) == pytest.approx((ref["p"][i], ref["r"][i], ref["f"][i]))
        assert got["support"] == ref["support"][i]
        assert [ours["confusion"][lab][col] for col in labels] == list(ref["cm"][i])
    assert sum(sum(row.values()) for row in ours["confusion"].values()) == n


def f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def test_hand_computed_three_way():
    gold = [S, S, S, R, R, N]
    pred = [S, R, None, R, S, N]
    m = classification_metrics(gold, pred, LABEL_SETS["3way"])
    assert m["accuracy"] == pytest.approx(3 / 6)
    # S: 1 of 2 S-predictions right, 1 of 3 S-claims found; R: 1 of 2, 1 of 2; NEI: 1 of 1, 1 of 1
    p = {S: 1 / 2, R: 1 / 2, N: 1 / 1}
    r = {S: 1 / 3, R: 1 / 2, N: 1 / 1}
    assert m["per_label"][S] == pytest.approx({"precision": p[S], "recall": r[S], "f1": f1(p[S], r[S]), "support": 3})
    assert m["per_label"][R] == pytest.approx({"precision": p[R], "recall": r[R], "f1": f1(p[R], r[R]), "support": 2})
    assert m["macro_f1"] == pytest.approx(sum(f1(p[k], r[k]) for k in (S, R, N)) / 3)
    assert m["macro_precision"] == pytest.approx(sum(p.values()) / 3)
    assert m["macro_recall"] == pytest.approx(sum(r.values()) / 3)
    assert m["confusion"][S] == {S: 1, R: 1, N: 0, OTHER: 1}


def test_two_way_nei_prediction_is_wrong_and_nobodys_precision():
    m = classification_metrics([S, R], [N, R], LABEL_SETS["2way"])
    assert m["accuracy"] == 0.5 and m["per_label"][S] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["per_label"][R]["precision"] == 1.0 and m["confusion"][S][OTHER] == 1
    with pytest.raises(ValueError, match="not in the label set"):
        classification_metrics([N], [N], LABEL_SETS["2way"])
    assert classification_metrics([], [], LABEL_SETS["2way"]) == {"n": 0}
    assert classification_metrics([Label.SUPPORTED], [Label.SUPPORTED])["accuracy"] == 1.0  # enums accepted


def _scipy_bca(statistic, data, n_resamples, seed, level=0.95):
    """scipy.stats.bootstrap called directly, the statistic applied one resample at a time (not vectorized)."""
    res = scipy.stats.bootstrap(data, statistic, n_resamples=n_resamples, paired=True, vectorized=False,
                                method="BCa", confidence_level=level, rng=np.random.default_rng(seed))
    return res.confidence_interval.low, res.confidence_interval.high


def test_bootstrap_is_scipys_bca_over_a_naive_statistic():
    rng = random.Random(5)
    labels = LABEL_SETS["3way"]
    gold = [rng.choice(labels) for _ in range(40)]
    pred = [rng.choice([*labels, None]) for _ in range(40)]
    ci = bootstrap_ci(gold, pred, labels, n_resamples=200, seed=7)
    rows, percentile = np.arange(40), []
    for key in ("accuracy", "macro_precision", "macro_recall", "macro_f1"):
        def naive(i, key=key):
            return classification_metrics([gold[j] for j in i], [pred[j] for j in i], labels)[key]

        assert ci[key] == pytest.approx(_scipy_bca(naive, (rows,), 200, 7), rel=0, abs=1e-12)
        assert ci[key][0] <= classification_metrics(gold, pred, labels)[key] <= ci[key][1]
        lo, hi = np.percentile([naive(rng_row) for rng_row in np.random.default_rng(7).integers(0, 40, (200, 40))],
                               [2.5, 97.5])
        percentile.append(ci[key] == pytest.approx((lo, hi), rel=0, abs=1e-12))
    assert not all(percentile)  # BCa, not the percentile interval (they may agree on a discrete statistic)
    assert bootstrap_ci(gold, pred, labels, n_resamples=200, seed=7) == ci  # seeded
    assert bootstrap_ci(gold, pred, labels, n_resamples=200, seed=8) != ci
    assert bootstrap_ci([], [], labels) == {}
    assert bootstrap_ci([S] * 5, [S] * 5, labels)["accuracy"] == (1.0, 1.0)  # degenerate: the point


def test_bootstrap_mean_ci():
    values = [0.0, 1.0, 1.0, 0.5, 0.25] * 20
    lo, hi = bootstrap_mean_ci(values, n_resamples=500, seed=1)
    assert (lo, hi) == pytest.approx(_scipy_bca(np.mean, (np.array(values),), 500, 1), rel=0, abs=1e-12)
    assert lo < float(np.mean(values)) < hi
    assert bootstrap_mean_ci(values, n_resamples=500, seed=1, level=0.5) == pytest.approx(
        _scipy_bca(np.mean, (np.array(values),), 500, 1, level=0.5), rel=0, abs=1e-12)
    assert bootstrap_mean_ci([]) is None and bootstrap_mean_ci([2.0, 2.0]) == (2.0, 2.0)


def test_a_degenerate_sample_gets_the_point_and_says_so():
    ci = bootstrap(np.mean, (np.full(300, 0.7),), n_resamples=1000, seed=0)
    assert (ci.lo, ci.hi, ci.method) == (pytest.approx(0.7), pytest.approx(0.7), DEGENERATE)
    ratio = bootstrap(lambda a, axis=-1: a.sum(axis) / (a > 0).sum(axis), (np.array([0.0] * 38 + [1.0, 2.0]),), 200, 0)
    assert ratio.method == PERCENTILE  # some resamples divide by zero: BCa is NaN, the finite percentiles remain
    assert bootstrap(np.mean, (np.arange(300.0),), 1000, 0).method == BCA
    assert bootstrap(np.mean, (np.array([1.0]),), 1000, 0) is None  # one claim: nothing to resample


def _b(gold, conclusion, s=(), hallucinated=(), judge=True, total=0.0) -> RewardBreakdown:
    entries = [EntryScore(side="supporting", pmid="1", quote="q", pmid_retrieved=True, strict=not h, fuzzy=not h,
                          hallucinated=h, s=0.0 if h else x, counted=False) for x, h in zip(s, hallucinated,
                                                                                           strict=True)]
    n, nh = len(entries), sum(hallucinated)
    return RewardBreakdown(variant="eg_grpo", outcome=float(gold == conclusion), search=0.0, evidence=0.0,
                           hallucination=nh / n if n else 0.0, total=total, ehr=nh / n if n else 0.0,
                           eqs=sum(e.s for e in entries) / n if n else None, n_cited=n, n_hallucinated=nh,
                           n_searches=0, n_advanced=0, conclusion=conclusion, gold=gold, judge_used=judge,
                           entries=entries)


def test_evidence_metrics_hand_computed():
    bs = [_b(S, S, s=[0.8, 0.4], hallucinated=[False, False]),  # eqs 0.6, ehr 0
          _b(R, R, s=[0.9, 0.0, 0.0], hallucinated=[False, True, True]),  # eqs 0.3, ehr 2/3
          _b(N, None)]  # nothing cited: eqs and ehr undefined (skipped), the citing rate shows it
    m = evidence_metrics(bs)
    assert m["eqs"] == pytest.approx((0.6 + 0.3) / 2)
    assert m["eqs_micro"] == pytest.approx((0.8 + 0.4 + 0.9) / 5)
    assert m["ehr"] == pytest.approx((0 + 2 / 3) / 2)  # over the citing reports: silence earns no 0
    assert m["ehr_micro"] == pytest.approx(2 / 5)
    assert m["citing_rate"] == pytest.approx(2 / 3)
    assert (m["reports"], m["reports_citing"], m["cited_per_report"]) == (3, 2, pytest.approx(5 / 3))
    assert evidence_metrics([])["eqs"] is None and evidence_metrics([])["ehr"] is None
    silent = evidence_metrics([_b(S, None), _b(R, None)])
    assert silent["ehr"] is None and silent["ehr_micro"] is None and silent["citing_rate"] == 0.0
    # An unparseable report (no conclusion) that cites only grounded items: a failure, never an EHR of 0;
    # a broken one that invents is still seen by the micro-EHR.
    broken = evidence_metrics([_b(S, None, s=[0.7], hallucinated=[False]), _b(R, None, s=[0.0], hallucinated=[True])])
    assert broken["ehr"] is None and broken["parse_rate"] == 0.0 and broken["ehr_micro"] == 0.5


def test_aggregate_is_small_json_of_finite_numbers():
    bs = [_b(S, S, [0.7], [False], total=2.0), _b(R, S, [0.1], [True], total=-1.0), _b(N, N, total=1.0),
          _b(None, R, total=0.5)]
    out = aggregate([("episode", b) for b in bs[:2]] + bs[2:], n_resamples=100)
    assert out["n"] == 4 and out["reward"]["total"] == pytest.approx(sum(b.total for b in bs) / 4)
    assert out["reward"]["outcome"] == pytest.approx((1 + 0 + 1 + 0) / 4)  # S/S and N/N right; no gold: 0
    assert out["3way"]["n"] == 3 and out["3way"]["accuracy"] == pytest.approx(2 / 3)
    assert out["2way"]["n"] == 2 and out["2way"]["accuracy"] == 0.5
    assert out["3way"]["accuracy_lo"] <= out["3way"]["accuracy"] <= out["3way"]["accuracy_hi"]
    assert out["parsed_rate"] == 1.0

    def numbers(x):
        if isinstance(x, dict):
            return all(numbers(v) for v in x.values())
        return isinstance(x, int | float) and math.isfinite(x)

    assert numbers(out)
    json.dumps(out, allow_nan=False)
    assert aggregate([])["reward"]["total"] == 0.0 and aggregate([])["3way"] == {"n": 0}
    with pytest.raises(ValueError):
        aggregate(bs, label_sets=("4way",))
