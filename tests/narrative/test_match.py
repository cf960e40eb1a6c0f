"""The matching rule on hand-computed cases, and its threshold on hand-labelled pairs."""

from __future__ import annotations

import pytest

from biocheck.narrative.match import MATCH_THRESHOLD, Match, extraction_scores, match_claims, similarity

# (gold claim, extracted claim, the same claim? — labelled by reading, before any score was computed)
LABELLED = [
    ("0-dimensional biomaterials show inductive properties.",
     "Zero-dimensional biomaterials have inductive properties.", True),
    ("ALDH1 expression is associated with poorer prognosis for breast cancer primary tumors.",
     "High ALDH1 expression in primary breast tumors is linked to worse prognosis.", True),
    ("Vitamin D deficiency is associated with an increased risk of tuberculosis.",
     "Low vitamin D raises tuberculosis risk.", True),
    ("Aspirin reduces the risk of colorectal cancer.",
     "Aspirin lowers mortality after a colorectal cancer diagnosis.", False),
    ("Metformin lowers blood glucose in type 2 diabetes.",
     "In type 2 diabetes, metformin reduces blood glucose.", True),
    ("Metformin lowers blood glucose in type 2 diabetes.",
     "Metformin reduces body weight in type 2 diabetes.", False),
    ("Statin therapy reduces cardiovascular events in older adults.",
     "Statins reduce cardiovascular events in the elderly.", True),
    ("Statin therapy reduces cardiovascular events in older adults.",
     "Statin therapy increases the risk of muscle pain.", False),
    ("Smoking during pregnancy increases the risk of low birth weight.",
     "Maternal smoking raises the risk of low birth weight.", True),
    ("Smoking during pregnancy increases the risk of low birth weight.",
     "Smoking increases the risk of lung cancer.", False),
    ("BRCA1 mutations increase the risk of ovarian cancer.", "Mutations in BRCA1 raise ovarian cancer risk.", True),
    ("BRCA1 mutations increase the risk of ovarian cancer.",
     "PARP inhibitors are effective in BRCA1-mutated ovarian cancer.", False),
    ("Exercise improves insulin sensitivity.", "Regular exercise improves insulin sensitivity in adults.", True),
    ("Exercise improves insulin sensitivity.", "Exercise reduces depressive symptoms.", False),
    ("Antibiotics are ineffective against viral infections.", "Antibiotics do not work against viral infections.",
     True),
    ("Antibiotic use in infancy is associated with childhood obesity.",
     "Antibiotics are ineffective against viral infections.", False),
]

GLUCOSE = "Metformin lowers blood glucose in type 2 diabetes."
WEIGHT = "Metformin reduces body weight in type 2 diabetes."


@pytest.mark.parametrize("gold, extracted, same", LABELLED)
def test_the_threshold_agrees_with_every_hand_labelled_pair(gold, extracted, same):
    assert (similarity(gold, extracted) >= MATCH_THRESHOLD) is same
    assert bool(match_claims([extracted], [gold])) is same


def test_a_paraphrase_just_above_the_threshold():
    # gold: vitamin d deficiency associated increased risk tuberculosis (7; "is an with of" are stopwords and
    # "tuberculosis" keeps its s); extracted: low vitamin d raise tuberculosis risk (6); shared: vitamin d risk
    # tuberculosis (4). F1 = 2*4 / (7+6) = 8/13
    s = similarity("Vitamin D deficiency is associated with an increased risk of tuberculosis.",
                   "Low vitamin D raises tuberculosis risk.")
    assert s == pytest.approx(8 / 13) and s >= MATCH_THRESHOLD


def test_another_claim_just_below_the_threshold():
    # metformin lower blood glucose type 2 diabete | metformin reduce body weight type 2 diabete: 7 and 7, 4 shared
    s = similarity(GLUCOSE, WEIGHT)
    assert s == pytest.approx(8 / 14) and s < MATCH_THRESHOLD


def test_a_score_at_the_threshold_matches():
    # coffee lower liver cancer risk | coffee lower liver fibrosis progression: 5 and 5, 3 shared: 6/10
    gold, extracted = "Coffee lowers liver cancer risk.", "Coffee lowers liver fibrosis progression."
    assert similarity(gold, extracted) == pytest.approx(0.6)
    assert match_claims([extracted], [gold], threshold=0.6) == (Match(0, 0, similarity(gold, extracted)),)
    assert match_claims([extracted], [gold], threshold=0.61) == ()


def test_word_order_case_stopwords_and_plural_s_do_not_count():
    assert similarity("The statins reduce LDL.", "ldl is reduced by statin") < 1  # "reduced" is another word
    assert similarity("The statins reduce LDL.", "LDL: statin reduces") == 1.0
    assert similarity("Sepsis is common.", "Sepsi is common.") == pytest.approx(2 * 1 / (2 + 2))  # sepsis keeps its s
    assert similarity("It is what it is.", "Statins cut LDL.") == 0.0  # no content word at all


def test_no_check_worthy_claim_and_nothing_extracted_leaves_both_undefined():
    s = extraction_scores([], [])
    assert (s.n_extracted, s.n_gold, s.n_matched, s.precision, s.recall) == (0, 0, 0, None, None)


def test_claims_extracted_from_a_passage_with_none_have_precision_0():
    s = extraction_scores(["I think coffee is great."], [])
    assert (s.precision, s.recall) == (0.0, None)


def test_nothing_extracted_from_a_passage_with_claims_has_recall_0():
    s = extraction_scores([], [GLUCOSE, WEIGHT])
    assert (s.precision, s.recall, s.n_gold) == (None, 0.0, 2)


def test_two_claims_sharing_a_sentence_one_sentence_extracted():
    # the sentence: metformin lower blood glucose reduce body weight type 2 diabete (10 words); it holds all 7 of
    # each gold claim's: F1 = 14/17 with both, a tie the earlier gold claim wins. One of two found.
    sentence = "Metformin lowers blood glucose and reduces body weight in type 2 diabetes."
    assert similarity(sentence, GLUCOSE) == pytest.approx(14 / 17) == similarity(sentence, WEIGHT)
    s = extraction_scores([sentence], [GLUCOSE, WEIGHT])
    assert s.matches == (Match(0, 0, pytest.approx(14 / 17)),)
    assert (s.precision, s.recall) == (1.0, 0.5)


def test_two_claims_sharing_a_sentence_both_extracted_in_another_order():
    # extracted 0 (8 words: ... people ...) shares 7 with WEIGHT: 14/15, and 4 with GLUCOSE: 8/15, below the threshold;
    # extracted 1 (metformin lower blood glucose) shares 4 of GLUCOSE's 7: 8/11
    extracted = ["Metformin reduces body weight in people with type 2 diabetes.", "Metformin lowers blood glucose."]
    s = extraction_scores(extracted, [GLUCOSE, WEIGHT])
    assert s.matches == (Match(0, 1, pytest.approx(14 / 15)), Match(1, 0, pytest.approx(8 / 11)))
    assert (s.precision, s.recall) == (1.0, 1.0)


def test_matching_is_one_to_one_and_the_best_pair_wins():
    # both extracted claims pass the threshold with GLUCOSE (1.0 and 6/10); the exact one takes it, in either order
    paraphrase = "Metformin lowers glucose."
    assert similarity(paraphrase, GLUCOSE) == pytest.approx(0.6)
    for extracted in ([GLUCOSE, paraphrase], [paraphrase, GLUCOSE]):
        s = extraction_scores(extracted, [GLUCOSE])
        assert s.matches == (Match(extracted.index(GLUCOSE), 0, 1.0),)
        assert (s.precision, s.recall) == (0.5, 1.0)


def test_a_claim_extracted_twice_counts_once():
    claim = "Statins cut LDL cholesterol."
    s = extraction_scores([claim, claim], [claim])
    assert (s.n_matched, s.precision, s.recall) == (1, 0.5, 1.0)
