"""The passage benchmark's metrics on cases computed by hand (evaluate/narrative_scores.py)."""

from __future__ import annotations

import pytest

from biocheck.evaluate.narrative_scores import (
    Checked,
    GoldRef,
    PassageArm,
    constant_accuracy,
    extraction_cost,
    narrative_metrics,
    outcomes,
    score_arm,
)
from biocheck.labels import Label
from biocheck.narrative.schema import Span

S, R, N = Label.SUPPORTED, Label.REFUTED, Label.NEI
VIT = GoldRef("1", "Vitamin D supplementation prevents hip fractures in older adults.", S)
ASP = GoldRef("2", "Aspirin increases the risk of gastrointestinal bleeding.", R)
CONNECTIVE = "Another study looked at a related question."


def checked(text: str, pred: Label | None, start: int = 0, end: int = 10, **kw) -> Checked:
    return Checked(text, start, end, pred=pred, **kw)


def test_an_extraction_with_a_connective_and_a_wrong_verdict():
    # 3 extracted, 2 of them match the 2 gold claims; one verdict right
    pa = PassageArm("p0", (VIT, ASP), (checked(VIT.text, S), checked(CONNECTIVE, N),
                                       checked("Aspirin increases gastrointestinal bleeding risk.", S)))
    m = score_arm([pa], n_resamples=0)
    assert (m["precision"]["num"], m["precision"]["den"]) == (2, 3)
    assert m["precision"]["value"] == pytest.approx(2 / 3)
    assert m["recall"]["value"] == 1.0
    assert m["claim_accuracy"]["value"] == 0.5  # VIT right, ASP concluded SUPPORTED against REFUTED
    assert (m["passage_accuracy"]["k"], m["passage_accuracy"]["n"]) == (0, 1)
    found, pairs = outcomes(pa)
    assert pairs == {0: 0, 2: 1} and [o.correct for o in found] == [True, False]


def test_a_passage_with_no_check_worthy_claim_found():
    # nothing extracted: precision undefined (None, never 0 or 1), recall and accuracy 0 of 2
    m = score_arm([PassageArm("p0", (VIT, ASP), ())], n_resamples=0)
    assert m["precision"]["value"] is None and m["precision"]["den"] == 0
    assert m["recall"]["value"] == 0.0 and m["claim_accuracy"]["value"] == 0.0
    assert m["ehr"]["value"] is None and m["eqs"]["value"] is None  # nothing cited, nothing judged


def test_two_claims_sharing_one_sentence():
    sentence = "Metformin lowers blood glucose and causes weight loss in adults."
    glucose = GoldRef("3", "Metformin lowers blood glucose in adults.", S)
    weight = GoldRef("4", "Metformin causes weight loss in adults.", R)
    # a model that splits the sentence: two claims on one span, each matched (F1 1.0 each)
    split = PassageArm("p0", (glucose, weight), (checked(glucose.text, S, 0, len(sentence)),
                                                 checked(weight.text, R, 0, len(sentence))))
    m = score_arm([split], n_resamples=0)
    assert (m["recall"]["value"], m["precision"]["value"], m["claim_accuracy"]["value"]) == (1.0, 1.0, 1.0)
    # the sentence rule: one claim for the sentence, matching at most one gold claim. Content words of the
    # sentence {metformin, lower, blood, glucose, and-less: cause, weight, los, adult} = 8; of `glucose`'s claim
    # 5 shared of 5: F1 = 2*5/(8+5) = 0.769; of `weight`'s 4 of 4: 2*4/(8+4) = 0.667. Greedy: glucose first.
    whole_sentence = PassageArm("p0", (glucose, weight), (checked(sentence, S, 0, len(sentence)),))
    found, pairs = outcomes(whole_sentence)
    assert pairs == {0: 0} and found[0].score == pytest.approx(10 / 13)
    m = score_arm([whole_sentence], n_resamples=0)
    assert (m["recall"]["value"], m["precision"]["value"], m["claim_accuracy"]["value"]) == (0.5, 1.0, 0.5)


def test_the_whole_passage_gives_its_one_verdict_to_every_gold_claim():
    passage = f"{VIT.text} {CONNECTIVE} {ASP.text}"
    pa = PassageArm("p0", (VIT, ASP), (checked(passage, S, 0, len(passage)),), whole=True)
    m = score_arm([pa], n_resamples=0)
    assert m["claim_accuracy"]["value"] == 0.5  # SUPPORTED: right for VIT, wrong for ASP
    assert m["passage_accuracy"]["k"] == 0
    # the rule still matches the passage to one short claim: 18 content words, 8 of them VIT's: F1 = 16/26 =
    # 0.615 (ASP's 5: 10/23 = 0.435); one claim, so one match at most: recall 1/2, precision 1/1
    assert (m["recall"]["value"], m["precision"]["value"]) == (0.5, 1.0)
    same = PassageArm("p1", (VIT, GoldRef("5", "Zinc shortens colds.", S)), (checked(passage, S),), whole=True)
    assert score_arm([same], n_resamples=0)["passage_accuracy"]["k"] == 1


def test_a_failed_episode_is_wrong_and_is_counted():
    pa = PassageArm("p0", (VIT,), (checked(VIT.text, None, error="llm_error: timeout"),))
    m = score_arm([pa], n_resamples=0)
    assert m["claim_accuracy"]["value"] == 0.0 and m["failed_claims"] == 1
    assert m["recall"]["value"] == 1.0  # extraction found it; the check failed


def test_pooled_ratios_and_their_intervals_over_passages():
    right = PassageArm("a", (VIT, ASP), (checked(VIT.text, S), checked(ASP.text, R)))
    half = PassageArm("b", (VIT, ASP), (checked(VIT.text, S), checked(ASP.text, S)))
    wrong = PassageArm("c", (VIT,), (checked(VIT.text, R),))
    m = score_arm([right, half, wrong, right], n_resamples=200)
    acc = m["claim_accuracy"]
    assert (acc["num"], acc["den"], acc["passages"]) == (5, 7, 4)  # 2 + 1 + 0 + 2 of 2 + 2 + 1 + 2
    assert acc["value"] == pytest.approx(5 / 7)
    assert acc["lo"] <= acc["value"] <= acc["hi"] and acc["hi"] <= 1.0 and acc["lo"] >= 0.0
    pas = m["passage_accuracy"]
    assert (pas["k"], pas["n"]) == (2, 4)
    assert pas["lo"] == pytest.approx(0.0676, abs=1e-3) and pas["hi"] == pytest.approx(0.9324, abs=1e-3)  # exact
    one = score_arm([right], n_resamples=200)["claim_accuracy"]
    assert one["lo"] is None and one["hi"] is None  # one passage: no interval, not [1, 1]


def test_every_passage_alike_gets_the_exact_interval_of_the_pooled_counts_not_a_point():
    # 0 of 5 right in every passage: each bootstrap resample is 0, which would read as [0, 0]
    wrong = [PassageArm(p, (VIT, ASP), (checked(VIT.text, R), checked(ASP.text, S))) for p in "ab"] + [
        PassageArm("c", (VIT,), (checked(VIT.text, R),))]
    acc = score_arm(wrong, n_resamples=200)["claim_accuracy"]
    assert (acc["value"], acc["num"], acc["den"]) == (0.0, 0, 5)
    assert acc["lo"] == 0.0 and acc["hi"] == pytest.approx(0.5218, abs=1e-3)  # Clopper-Pearson 0 of 5
    assert acc["method"].startswith("exact binomial of the pooled counts")
    recall = score_arm(wrong, n_resamples=200)["recall"]  # 5 of 5 matched: [0.478, 1], not [1, 1]
    assert recall["hi"] == 1.0 and recall["lo"] == pytest.approx(0.4782, abs=1e-3)


def test_evidence_scores_pool_items_and_judged_reports():
    pa = PassageArm("p0", (VIT, ASP), (checked(VIT.text, S, cited=3, hallucinated=1, eqs=0.8),
                                       checked(ASP.text, R, cited=1, hallucinated=0, eqs=None),
                                       checked(CONNECTIVE, N, cited=0)))
    m = score_arm([pa], n_resamples=0)
    assert (m["ehr"]["num"], m["ehr"]["den"], m["ehr"]["value"]) == (1, 4, 0.25)
    assert (m["eqs"]["den"], m["eqs"]["value"]) == (1, 0.8)


def test_the_non_claim_sentence_and_a_model_that_fell_back():
    non_claim = Span(50, 80)
    kept_out = PassageArm("a", (VIT,), (checked(VIT.text, S, 0, 49),), non_claim=non_claim, fallback=False)
    taken = PassageArm("b", (VIT,), (checked(VIT.text, S, 0, 49), checked("Is it?", N, 60, 66)),
                       non_claim=non_claim, fallback=True)
    m = score_arm([kept_out, taken], n_resamples=0)
    assert (m["non_claim_left_out"]["k"], m["non_claim_left_out"]["n"]) == (1, 2)
    assert (m["fallback"]["k"], m["fallback"]["n"]) == (1, 2)
    assert "fallback" not in score_arm([PassageArm("c", (VIT,), ())], n_resamples=0)  # no model extracted


def test_what_extraction_costs_is_paired_over_the_same_gold_claims():
    gold = [PassageArm("a", (VIT, ASP), (checked(VIT.text, S), checked(ASP.text, R))),
            PassageArm("b", (VIT,), (checked(VIT.text, S),))]
    arm = [PassageArm("a", (VIT, ASP), (checked(VIT.text, S),)),  # ASP missed
           PassageArm("b", (VIT,), (checked(VIT.text, S),))]
    cost = extraction_cost(gold, arm, n_resamples=0)
    assert (cost["num"], cost["den"], cost["value"]) == (1, 3, pytest.approx(1 / 3))  # 3/3 right minus 2/3
    same = extraction_cost(gold, gold, n_resamples=100)  # a difference: no binomial interval, which excludes < 0
    assert (same["value"], same["lo"], same["hi"]) == (0.0, 0.0, 0.0) and same["method"].startswith("degenerate")
    with pytest.raises(ValueError, match="different passages"):
        extraction_cost(gold, arm[::-1], n_resamples=0)


def test_the_constant_answer_and_every_arm_together():
    arms = {"gold": [PassageArm("a", (VIT, ASP, GoldRef("6", "Coffee causes cancer.", R)),
                                (checked(VIT.text, S), checked(ASP.text, R), checked("Coffee causes cancer.", N)))],
            "passage": [PassageArm("a", (VIT, ASP, GoldRef("6", "Coffee causes cancer.", R)),
                                   (checked("all of it", R),), whole=True)]}
    const = constant_accuracy(arms["gold"])
    assert (const["label"], const["k"], const["n"]) == ("REFUTED", 2, 3)
    m = narrative_metrics(arms, n_resamples=0)
    assert m["arms"]["gold"]["claim_accuracy"]["value"] == pytest.approx(2 / 3)
    assert m["arms"]["passage"]["claim_accuracy"]["value"] == pytest.approx(2 / 3)  # REFUTED for all three
    assert m["extraction_cost"]["passage"]["value"] == 0.0 and "gold" not in m["extraction_cost"]
