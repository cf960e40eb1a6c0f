"""The study's statistics (evaluate.study): hand-computed cases, edge cases, and the calibration of its interval.

The calibration test simulates null studies at the study's own design (its seeds and claims, claims of unequal
difficulty and a seed-to-seed spread as large as the smol study's) and fails if a nominal 95% interval excludes 0
in more than 7% of them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from biocheck.evaluate.headline import p_text
from biocheck.evaluate.systems.base import Prediction
from biocheck.study.analysis import (
    Table,
    analyze,
    difference,
    majority,
    mcnemar_by_seed,
    mdd,
    observed,
    per_seed,
    seeds_needed,
    sentence,
)
from tests.helpers.null_studies import null_studies


def _right(rows) -> Table:
    rows = np.asarray(rows, dtype=float)
    return Table(rows, np.ones_like(rows))


A = [[1, 0, 1, 1], [1, 1, 0, 1], [0, 0, 1, 1]]  # accuracy per seed 0.75, 0.75, 0.5
B = [[0, 0, 1, 0], [1, 0, 0, 1], [0, 0, 1, 1]]  # 0.25, 0.5, 0.5


def test_the_t_interval_over_seeds_by_hand():
    """d = (0.5, 0.25, 0): mean 0.25, sd 0.25, se 0.25 / sqrt 3; t(0.975, 2) = 4.302653 so the interval is
    0.25 -+ 4.302653 x 0.144338 = [-0.3711, 0.8711]; t = sqrt 3, and for 2 degrees of freedom
    P(T <= t) = 1/2 + t / (2 sqrt(2 + t^2)), so p = 1 - sqrt 3 / sqrt 5 = 0.2254."""
    d = difference(_right(A), _right(B))
    assert (d["a"], d["b"], d["diff"]) == (pytest.approx(2 / 3), pytest.approx(5 / 12), pytest.approx(0.25))
    assert d["per_seed"] == [0.5, 0.25, 0.0] and d["seeds"] == 3 and d["claims"] == 4
    assert d["se"] == pytest.approx(0.25 / math.sqrt(3))
    assert (d["lo"], d["hi"]) == (pytest.approx(0.25 - 4.302653 * 0.25 / math.sqrt(3), rel=1e-5),
                                  pytest.approx(0.25 + 4.302653 * 0.25 / math.sqrt(3), rel=1e-5))
    assert d["p"] == pytest.approx(1 - math.sqrt(3) / math.sqrt(5), rel=1e-6)
    assert d["interval"].startswith("t interval over seeds")


def test_against_the_start_each_seed_minus_the_one_start():
    d = difference(_right(A), _right([[0, 1, 0, 1]]))  # start 0.5: d = 0.25, 0.25, 0
    assert d["per_seed"] == [0.25, 0.25, 0.0] and d["diff"] == pytest.approx(1 / 6)
    sd = np.std([0.25, 0.25, 0.0], ddof=1)
    assert d["se"] == pytest.approx(sd / math.sqrt(3))


def test_units_with_different_ratios_per_seed_are_ratios_of_their_own_sums():
    """EHR-like: seed 0 cites on 3 claims (rates 1, 0, 0.5: 1.5 / 3), seed 1 on 1 (1 / 1), seed 2 on none (left
    out). The variant's value is the mean of the seeds that have one: (0.5 + 1) / 2, not a pooled 2.5 / 4."""
    t = Table([[1, 0, 0.5], [0, 0, 1], [0, 0, 0]], [[1, 1, 1], [0, 0, 1], [0, 0, 0]])
    assert per_seed(t)[:2].tolist() == [0.5, 1.0] and math.isnan(per_seed(t)[2])
    assert observed(t) == 0.75
    d = difference(t, Table(np.zeros((3, 3)), np.ones((3, 3))))
    assert d["per_seed"] == [0.5, 1.0] and d["seeds"] == 2  # the seed without a denominator is left out
    assert math.isnan(observed(Table([[0, 0]], [[0, 0]])))
    assert difference(Table([[0, 0]], [[0, 0]]), _right([[1, 0]]))["diff"] is None


def test_one_seed_or_no_spread_gives_no_interval():
    one = difference(_right([[1, 0]]), _right([[0, 0]]))
    assert one["diff"] == 0.5 and one["lo"] is None and one["p"] is None and one["mdd"] is None
    same = difference(_right([[1, 0], [0, 1]]), _right([[0, 0], [0, 0]]))  # both seeds +0.5
    assert same["diff"] == 0.5 and same["lo"] is None and same["p"] is None
    assert "every seed gave the same difference" in sentence("accuracy", "eg_grpo", "outcome_only", same)
    assert "one seed" in sentence("accuracy", "eg_grpo", "start", one)


@pytest.mark.parametrize(("n", "crit"), [(3, 4.302653), (6, 2.570582)])
def test_mdd_is_the_difference_the_t_test_finds_with_80_percent_power(n, crit):
    """The mean difference at which a two-sided t test at 0.05 over n seeds (sd 1) rejects 0 80% of the time:
    checked by simulating 40,000 such studies."""
    m = mdd(1.0, n)
    rng = np.random.default_rng(n)
    x = rng.normal(m, 1.0, (40000, n))
    t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(n))
    assert np.mean(np.abs(t) > crit) == pytest.approx(0.80, abs=0.01)
    assert mdd(0.5, n) == pytest.approx(0.5 * m)
    assert mdd(1.0, 1) is None and mdd(0.0, 5) is None and mdd(1.0, 40) == pytest.approx(2.8 / math.sqrt(40), rel=0.05)


def test_seeds_needed_is_the_fewest_at_which_the_mdd_reaches_the_effect():
    n = seeds_needed(0.1, 0.1)  # a difference as large as the seed spread
    assert mdd(0.1, n) <= 0.1 < mdd(0.1, n - 1)
    assert seeds_needed(0.5, 0.1) == 3 if mdd(0.1, 2) > 0.5 else 2
    assert seeds_needed(0.0, 0.1) is None and seeds_needed(0.1, 0.0) is None and seeds_needed(1e-4, 1.0) is None
    d = difference(_right(A), _right(B))
    assert d["sd"] == pytest.approx(0.25) and d["seeds_needed"] == seeds_needed(0.25, 0.25)


def test_mcnemar_per_seed_by_hand_and_a_tie():
    """Seed 0: a right on claims 0, 2, 3 and b on 2 only: b = 2, c = 0, p = 2 x 0.5^2 = 0.5. Seed 1: b = 1
    (claim 1), c = 0, p = 1. Seed 2: identical rows: no discordant claim, p = 1. A tie (b = c = 1): p = 1."""
    m = mcnemar_by_seed(_right(A), _right(B))
    assert [(x["b"], x["c"]) for x in m] == [(2, 0), (1, 0), (0, 0)]
    assert [x["p"] for x in m] == [pytest.approx(0.5), 1.0, 1.0]
    tie = mcnemar_by_seed(_right([[1, 0, 1]]), _right([[0, 1, 1]]))
    assert (tie[0]["b"], tie[0]["c"], tie[0]["p"]) == (1, 1, 1.0)
    start = mcnemar_by_seed(_right(A), _right([[0, 0, 0, 0]]))  # every seed against the one start
    assert [(x["b"], x["c"]) for x in start] == [(3, 0), (3, 0), (2, 0)] and start[0]["p"] == pytest.approx(0.25)


def test_the_significance_marker_at_exactly_005_and_p_never_printed_as_0():
    assert p_text(0.05) == ("0.050", False)  # exactly 0.05 is not below it: not marked
    assert p_text(0.0499) == ("0.050", True)
    assert p_text(0.0) == ("<0.001", True) and p_text(None) is None


def _preds(unit: str, rights: list[int], golds: list[str]) -> list[Prediction]:
    other = {"SUPPORTED": "REFUTED", "REFUTED": "SUPPORTED", "NEI": "SUPPORTED"}
    return [Prediction(id=str(i), dataset="scifact", system="eg_grpo", fingerprint=unit, gold=g,
                       pred=g if r else other[g], writes_report=True, parseable=True, cited=1, hallucinated=0, ehr=0.0)
            for i, (r, g) in enumerate(zip(rights, golds, strict=True))]


def test_analyze_gives_values_differences_mcnemar_and_the_majority_rate():
    golds = ["SUPPORTED", "REFUTED", "SUPPORTED", "NEI"]
    systems = {"start": [_preds("start", [0, 1, 0, 1], golds)],
               "eg_grpo": [_preds(f"e{s}", r, golds) for s, r in enumerate(A)],
               "outcome_only": [_preds(f"o{s}", r, golds) for s, r in enumerate(B)]}
    out = analyze(systems, ["accuracy", "ehr"], "eg_grpo", ["outcome_only", "start"])
    acc = out["metrics"]["accuracy"]
    assert acc["values"] == {"start": 0.5, "eg_grpo": pytest.approx(2 / 3), "outcome_only": pytest.approx(5 / 12)}
    assert acc["per_seed"]["eg_grpo"] == [0.75, 0.75, 0.5]
    assert acc["majority"] == {"label": "SUPPORTED", "rate": 0.5, "claims": 4}
    assert acc["differences"]["outcome_only"]["diff"] == pytest.approx(0.25)
    assert [m["b"] for m in acc["differences"]["outcome_only"]["mcnemar"]] == [2, 1, 0]
    assert "mcnemar" not in out["metrics"]["ehr"]["differences"]["outcome_only"]  # not a per-claim binary rate
    assert acc["differences"]["start"]["sentence"].startswith("accuracy, eg_grpo minus start: +0.167 [")


def test_majority_ties_and_the_sentence_never_says_p_0():
    golds = ["REFUTED", "SUPPORTED"]
    assert majority(_preds("u", [1, 1], golds)) == {"label": "REFUTED", "rate": 0.5, "claims": 2}  # tie: sorted first
    d = {"diff": 0.4, "lo": 0.3, "hi": 0.5, "p": 0.0, "mdd": 0.2, "seeds": 6, "claims": 100}
    text = sentence("accuracy", "eg_grpo", "start", d)
    assert "p = <0.001" in text and "p = 0)" not in text and "eg_grpo is higher than start" in text


def test_shapes_that_cannot_be_paired_are_refused():
    with pytest.raises(ValueError, match="not the same claims"):
        difference(_right([[1, 0]]), _right([[1, 0, 1]]))
    with pytest.raises(ValueError, match="pair by seed"):
        difference(_right([[1, 0]] * 3), _right([[1, 0]] * 2))
    with pytest.raises(ValueError, match="differ in shape"):
        Table([[1, 0]], [[1, 1, 1]])


# --- calibration: does a nominal 95% interval hold its level under a true null? -------------------------


def exclusion_rate(a: np.ndarray, b: np.ndarray) -> float:
    """The share of the studies whose 95% interval (evaluate.study.difference) excludes 0."""
    out = [difference(_right(x), _right(y)) for x, y in zip(a, b, strict=True)]
    return float(np.mean([d["lo"] is not None and (d["lo"] > 0 or d["hi"] < 0) for d in out]))


# The smol study's design (3 seeds x 100 claims) and the confirmatory study's least (6 seeds). seed_sd 0.3: unit
# accuracies a few points apart (the smol units' 0.39-0.43); 3.0: as far apart as its outcome-only citing rates
# (0.18, 0.99, 1.00). Against the start the t interval holds its level up to seed_sd 1 at 3 seeds and up to 2 at 6;
# beyond that (a variant collapsing one way or the other by seed) it excludes 0 in 7-9% at 3 seeds
# (bench/study_calibration.py; docs/evaluation.md): 3 seeds cannot compare such a variant with its start.
@pytest.mark.parametrize(("seeds", "seed_sd", "against_start"), [
    (3, 0.3, False), (3, 3.0, False), (6, 3.0, False), (3, 0.3, True), (3, 1.0, True), (6, 2.0, True)])
def test_a_nominal_95_percent_interval_excludes_0_in_at_most_7_percent_of_null_studies(seeds, seed_sd, against_start,
                                                                                      monkeypatch):
    import biocheck.study.analysis as study

    monkeypatch.setattr(study, "mdd", lambda *a, **k: None)  # not part of the interval; the slow part
    rng = np.random.default_rng(seeds * 100 + int(seed_sd * 10) + against_start)
    a, b = null_studies(3000, seeds, 100, seed_sd, rng, against_start=against_start)
    rate = exclusion_rate(a, b)
    assert rate <= 0.07, f"{rate:.3f} of null studies excluded 0 ({seeds} seeds, seed sd {seed_sd})"
    assert rate >= 0.02  # and it is not vacuous: the interval is not so wide that it never excludes 0
