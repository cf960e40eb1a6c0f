"""The study's difference over seeds x claims (evaluate.study): checked against cases computed by hand."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from biocheck.evaluate.study import Table, analyze, difference, draws, observed, pooled_sign_test, sentence
from biocheck.evaluate.systems.base import Prediction


def _all_draws(n_seeds: int, n_claims: int) -> tuple[np.ndarray, np.ndarray]:
    """Every two-level resample once: each seed draw with each claim draw (all equally likely)."""
    s = list(itertools.product(range(n_seeds), repeat=n_seeds))
    c = list(itertools.product(range(n_claims), repeat=n_claims))
    pairs = list(itertools.product(s, c))
    return np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])


def _right(rows) -> Table:
    rows = np.asarray(rows, dtype=float)
    return Table(rows, np.ones_like(rows))


def test_the_two_level_bootstrap_of_a_two_by_two_study_is_the_hand_computed_one():
    """a = [[1,0],[1,1]], b = [[0,0],[1,0]] (right answers; rows seeds, columns claims): a - b per cell is
    [[1,0],[0,1]], observed 0.75 - 0.25 = 0.5. Of the 16 equally likely resamples, the 8 that draw both seeds
    give 0.5 whatever the claims; seeds (0,0) give 1, 0.5, 0.5, 0 over the claim draws (0,0) (0,1) (1,0) (1,1),
    seeds (1,1) give 0, 0.5, 0.5, 1. So the distribution is {0: 2, 0.5: 12, 1: 2} of 16: mean 0.5, sample
    variance 4 x 0.25 / 15 = 1/15. Drawing claims anew within each seed (nested) would give another one."""
    a, b = _right([[1, 0], [1, 1]]), _right([[0, 0], [1, 0]])
    d = difference(a, b, draw=_all_draws(2, 2))
    assert (d["a"], d["b"], d["diff"]) == (0.75, 0.25, 0.5)
    assert d["resamples"] == 16
    assert d["se"] == pytest.approx(math.sqrt(1 / 15))
    assert (d["lo"], d["hi"]) == (0.0, 1.0)
    assert d["p"] == pytest.approx(2 * 2 / 16)  # the two resamples at 0 (ties count against the difference)
    assert d["mdd"] == pytest.approx((1.959964 + 0.841621) * math.sqrt(1 / 15), rel=1e-5)


def test_the_start_is_one_unit_compared_with_every_seed():
    """b has no seeds: a - start per resample is mean over a's drawn seeds minus the start on the same claims.
    a as above, start [[0,1]]: observed 0.75 - 0.5 = 0.25; by hand over the 16 resamples: seeds (0,0) with the
    claim draws give 1-0, 0.5-0.5, 0.5-0.5, 0-1 = 1, 0, 0, -1; seeds (1,1): 1-0, 1-0.5, 1-0.5, 1-1 = 1, .5, .5, 0;
    mixed seeds (x2): 1-0, .75-.5, .75-.5, .5-1 = 1, .25, .25, -.5. Mean 4.5 / 16."""
    a, start = _right([[1, 0], [1, 1]]), _right([[0, 1]])
    seeds, claims = _all_draws(2, 2)
    d = difference(a, start, draw=(seeds, claims))
    assert d["diff"] == pytest.approx(0.25)
    by_hand = [1, 0, 0, -1, 1, 0.25, 0.25, -0.5, 1, 0.25, 0.25, -0.5, 1, 0.5, 0.5, 0]
    assert d["se"] == pytest.approx(float(np.std(by_hand, ddof=1)))
    assert (d["lo"], d["hi"]) == (pytest.approx(np.quantile(by_hand, 0.025)), pytest.approx(np.quantile(by_hand, 0.975)))


def test_a_unit_is_a_ratio_of_sums_and_a_seed_without_a_denominator_is_left_out():
    """EHR-like: seed 0 cites on claims 0 and 1 (rates 1 and 0: 0.5), seed 1 cites nowhere: the value is seed
    0's 0.5, not (0.5 + 0) / 2. A ratio of sums, not a mean of claim rates: seed 0 of `w` is 3 / 4."""
    t = Table([[1, 0], [0, 0]], [[1, 1], [0, 0]])
    assert observed(t) == 0.5
    w = Table([[2, 1]], [[2, 2]])
    assert observed(w) == 0.75
    assert math.isnan(observed(Table([[0, 0]], [[0, 0]])))
    assert difference(Table([[0, 0]], [[0, 0]]), w)["diff"] is None


def test_random_draws_share_the_claims_across_seeds_and_pair_the_seeds():
    seeds, claims = draws(3, 50, 400, seed=1)
    assert seeds.shape == (400, 3) and claims.shape == (400, 50)
    assert seeds.max() == 2 and claims.max() == 49
    rng = np.random.default_rng(0)
    a = _right(rng.integers(0, 2, (3, 50)))
    same = difference(a, a, n_resamples=300)
    assert same["diff"] == 0 and same["lo"] == same["hi"] == 0  # paired: a system against itself never differs
    b = _right(rng.integers(0, 2, (3, 50)))
    assert difference(a, b, n_resamples=300, seed=5) == difference(a, b, n_resamples=300, seed=5)


def test_claims_shared_by_every_seed_keep_their_whole_variance():
    """Four seeds that answer alike: the difference varies only with the claims, so its standard error is that
    of a mean over 60 claims, sd / sqrt(60). Claims drawn anew within each seed would halve it (sqrt(4 x 60))."""
    x = np.random.default_rng(3).integers(0, 2, 60).astype(float)
    a, b = _right(np.tile(x, (4, 1))), _right(np.zeros((4, 60)))
    se = difference(a, b, n_resamples=4000, seed=0)["se"]
    assert se == pytest.approx(x.std() / math.sqrt(60), rel=0.1)


def test_shapes_that_cannot_be_paired_are_refused():
    with pytest.raises(ValueError, match="not the same claims"):
        difference(_right([[1, 0]]), _right([[1, 0, 1]]))
    with pytest.raises(ValueError, match="pair by seed"):
        difference(_right([[1, 0]] * 3), _right([[1, 0]] * 2))
    with pytest.raises(ValueError, match="differ in shape"):
        Table([[1, 0]], [[1, 1, 1]])


def test_the_pooled_sign_test_counts_claims_by_their_share_over_seeds():
    """Shares right over 2 seeds: a [1, .5, 0], b [0, 1, 0]: one claim better, one worse, one tied: p = 1.
    Six claims all better: p = 2 x 0.5^6."""
    r = pooled_sign_test([[1, 1, 0], [1, 0, 0]], [[0, 1, 0], [0, 1, 0]])
    assert (r["better"], r["worse"], r["tied"], r["p"]) == (1, 1, 1, 1.0)
    r = pooled_sign_test(np.ones((3, 6)), np.zeros((1, 6)))
    assert (r["better"], r["worse"]) == (6, 0) and r["p"] == pytest.approx(2 * 0.5**6)
    assert pooled_sign_test(np.ones((2, 4)), np.ones((2, 4)))["p"] == 1.0


def test_the_sentence_says_whether_the_study_can_tell():
    a, b = _right([[1, 0], [1, 1]]), _right([[0, 0], [1, 0]])
    d = difference(a, b, draw=_all_draws(2, 2))
    text = sentence("accuracy", "eg_grpo", "outcome_only", d)
    assert text.startswith("accuracy, eg_grpo minus outcome_only: +0.500 [+0.000, +1.000] (2 seeds x 2 claims")
    assert "cannot tell them apart" in text and "detect a difference of" in text
    clear = dict(d, lo=0.1, hi=0.9)
    assert "eg_grpo is higher" in sentence("accuracy", "eg_grpo", "outcome_only", clear)
    none = difference(Table([[0, 0]], [[0, 0]]), _right([[1, 0]]))
    assert "not measured" in sentence("ehr", "eg_grpo", "start", none)


def _pred(i: int, right: bool, system: str, ehr: float | None = None) -> Prediction:
    return Prediction(id=f"c{i}", dataset="scifact", system=system, fingerprint="f", gold="SUPPORTED",
                      pred="SUPPORTED" if right else "REFUTED", writes_report=True, parseable=True,
                      cited=None if ehr is None else 2, hallucinated=None if ehr is None else int(2 * ehr), ehr=ehr)


def test_analyze_lines_up_the_runs_by_claim_and_compares_the_reference_with_each_other():
    """The hand case of the first test, as predictions given in another claim order per run."""
    eg = [[_pred(1, False, "eg"), _pred(0, True, "eg")], [_pred(0, True, "eg"), _pred(1, True, "eg")]]
    oo = [[_pred(0, False, "oo"), _pred(1, False, "oo")], [_pred(1, False, "oo"), _pred(0, True, "oo")]]
    start = [[_pred(0, False, "start", ehr=0.5), _pred(1, True, "start")]]
    r = analyze({"eg": eg, "oo": oo, "start": start}, ["accuracy", "ehr"], "eg", ["oo", "start"], n_resamples=500)
    acc = r["metrics"]["accuracy"]
    assert acc["values"] == {"eg": 0.75, "oo": 0.25, "start": 0.5}
    assert acc["differences"]["oo"]["diff"] == 0.5 and acc["differences"]["start"]["diff"] == 0.25
    assert acc["differences"]["oo"]["sign_test"]["better"] == 2  # shares right per claim: eg [1, .5], oo [.5, 0]
    assert acc["differences"]["oo"]["sentence"].startswith("accuracy, eg minus oo: +0.500")
    ehr = r["metrics"]["ehr"]  # only the start cites: the others have no EHR, so there is no difference
    assert ehr["values"] == {"eg": None, "oo": None, "start": 0.5}
    assert ehr["differences"]["start"]["diff"] is None
    with pytest.raises(ValueError, match="scored other claims"):
        analyze({"eg": [eg[0], eg[1][:1]], "oo": oo}, ["accuracy"], "eg", ["oo"])
