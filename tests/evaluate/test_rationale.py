"""Judge-free evidence scores: reports mapped onto SciFact's gold rationale sentences.

Expected counts and scores are worked out by hand below each report; the rules are evaluate/rationale.py's
docstring (SciFact's own evaluation, plus: a quote on no sentence selects one wrong sentence).
"""

from __future__ import annotations

import pytest

from biocheck.data.schema import GoldEvidence
from biocheck.evaluate.rationale import (
    Cited,
    CorpusSentences,
    RationaleCounts,
    doc_predictions,
    rationale_counts,
    rationale_scores,
)
from biocheck.evidence.types import Article
from biocheck.labels import Label

S, R = Label.SUPPORTED, Label.REFUTED
DOC = ["Vitamin D was measured in 400 adults.",  # 0
       "Supplementation reduced fractures by 20%.",  # 1
       "The effect held in women over 70.",  # 2
       "Funding came from a public grant."]  # 3
OTHER = ["Mice were fed a high fat diet.", "Weight rose in every group."]
CORPUS = CorpusSentences({"101": ("Vitamin D and fractures", DOC), "202": ("A mouse study", OTHER)})
# Gold: doc 101 SUPPORTS the claim with two rationales, {1, 2} and {0}.
GOLD = [GoldEvidence(doc_id="101", sentences=[1, 2], label=S), GoldEvidence(doc_id="101", sentences=[0], label=S)]


def counts(*items, ledger=None):
    return rationale_counts(GOLD, [Cited(*i) for i in items], CORPUS, ledger)


def test_exact_quotes_of_a_whole_rationale_under_the_right_side():
    c = counts(("supporting", "101", DOC[1]), ("supporting", "101", DOC[2]))
    # abstract: 1 relevant, 1 retrieved, label right, first 3 sentences {1, 2} contain rationale {1, 2}
    # sentence: 3 relevant (1, 2, 0), 2 retrieved, both in a fully selected rationale
    assert c == RationaleCounts(abstract_relevant=1, abstract_retrieved=1, abstract_label_only=1,
                                abstract_rationalized=1, sentence_relevant=3, sentence_retrieved=2,
                                sentence_selection=2, sentence_label=2)
    s = rationale_scores([c])
    assert s["sentence_label"] == pytest.approx({"precision": 1.0, "recall": 2 / 3, "f1": 0.8})
    assert s["abstract_rationalized"] == pytest.approx({"precision": 1.0, "recall": 1.0, "f1": 1.0})


def test_partial_quote_selects_its_sentence_and_half_a_rationale_earns_nothing():
    c = counts(("supporting", "101", "reduced fractures by 20"))  # part of sentence 1 only
    # sentence 1 is selected, but its rationale {1, 2} is not complete: 0 correct; abstract label right,
    # not rationalized (neither {1, 2} nor {0} inside {1})
    assert (c.sentence_retrieved, c.sentence_selection, c.sentence_label) == (1, 0, 0)
    assert (c.abstract_label_only, c.abstract_rationalized) == (1, 0)
    assert rationale_scores([c])["sentence_label"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_a_quote_across_two_sentences_selects_both():
    c = counts(("supporting", "101", "by 20%. The effect held"))
    assert (c.sentence_retrieved, c.sentence_selection, c.abstract_rationalized) == (2, 2, 1)
    picked = doc_predictions([Cited("supporting", "101", "by 20%. The effect held")], CORPUS)
    assert picked["101"].sentences == [1, 2] and picked["101"].label is S


def test_quote_of_a_non_rationale_sentence_costs_precision():
    c = counts(("supporting", "101", DOC[0]), ("supporting", "101", DOC[3]))  # rationale {0} + funding
    # 2 retrieved, 1 correct (sentence 0 completes rationale {0}); 3 relevant
    assert (c.sentence_retrieved, c.sentence_selection, c.sentence_label) == (2, 1, 1)
    s = rationale_scores([c])["sentence_label"]
    assert s == pytest.approx({"precision": 0.5, "recall": 1 / 3, "f1": 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)})


def test_wrong_pmid_is_a_retrieved_document_that_is_never_evidence():
    c = counts(("supporting", "202", OTHER[1]), ("supporting", "999", "anything at all"))
    # two documents cited (202 in the corpus, 999 outside it), neither is gold: 2 abstracts, 2 sentences, 0 right
    assert (c.abstract_retrieved, c.abstract_label_only, c.sentence_retrieved, c.sentence_selection) == (2, 0, 2, 0)
    assert rationale_scores([c])["abstract_label_only"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_right_sentence_under_the_wrong_side_counts_for_selection_not_label():
    c = counts(("refuting", "101", DOC[0]))
    assert (c.sentence_selection, c.sentence_label) == (1, 0)
    assert (c.abstract_label_only, c.abstract_rationalized) == (0, 0)
    s = rationale_scores([c])
    assert s["sentence_selection"]["f1"] == pytest.approx(2 * 1 / (1 + 3)) and s["sentence_label"]["f1"] == 0.0


def test_an_invented_quote_selects_a_wrong_sentence():
    c = counts(("supporting", "101", "Vitamin D cured every patient."), ("supporting", "101", DOC[0]))
    # the invented quote is one more retrieved sentence that no rationale holds
    assert (c.sentence_retrieved, c.sentence_selection) == (2, 1)


def test_mixed_sides_on_one_document_is_a_tie_with_no_label():
    c = counts(("supporting", "101", DOC[0]), ("refuting", "101", DOC[1]))
    assert (c.abstract_label_only, c.sentence_label) == (0, 0) and c.sentence_selection == 1
    c = counts(("supporting", "101", DOC[0]), ("supporting", "101", DOC[3]), ("refuting", "101", DOC[1]))
    assert c.abstract_label_only == 1  # two supporting items outvote one refuting


def test_abstract_rationalized_uses_the_first_three_selected_sentences():
    c = counts(("supporting", "101", DOC[3]), ("supporting", "202", OTHER[0]),
               ("supporting", "101", "Funding came"), ("supporting", "101", DOC[1]), ("supporting", "101", DOC[2]),
               ("supporting", "101", "Mice were"))  # 101: [3, 1, 2] then the invented "?5"
    assert c.abstract_rationalized == 1  # {1, 2} inside the first three
    c = counts(("supporting", "101", DOC[3]), ("supporting", "101", "made up one"), ("supporting", "101", "made up two"),
               ("supporting", "101", DOC[0]))
    assert c.abstract_rationalized == 0 and c.sentence_selection == 1  # {0} came fourth: sentence-level only


def test_a_live_pubmed_id_is_matched_to_the_corpus_by_title():
    ledger = {"38000001": Article(pmid="38000001", title="VITAMIN D and Fractures ", abstract=" ".join(DOC))}
    c = counts(("supporting", "38000001", DOC[0]), ledger=ledger)
    assert (c.abstract_label_only, c.sentence_label) == (1, 1)
    assert counts(("supporting", "38000001", DOC[0])).abstract_label_only == 0  # no title: outside the corpus


def test_nei_claim_scores_what_is_cited_as_false_positives_and_sums_over_claims():
    nei = rationale_counts([], [Cited("supporting", "101", DOC[0])], CORPUS)
    assert (nei.abstract_relevant, nei.abstract_retrieved, nei.sentence_relevant, nei.sentence_retrieved) == (0, 1, 0, 1)
    good = counts(("supporting", "101", DOC[0]))
    s = rationale_scores([good, nei])
    # summed: sentence 1 correct of 2 retrieved, 3 relevant
    assert s["sentence_label"] == pytest.approx({"precision": 0.5, "recall": 1 / 3, "f1": 2 * 1 / (2 + 3)})


def test_corpus_from_jsonl_reads_prepared_and_raw_records(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"id": "1", "title": "T", "abstract": ["A one.", "B two."]}\n'
                 '{"doc_id": 2, "title": "U", "abstract": ["C three."]}\n\n')
    corpus = CorpusSentences.from_jsonl(f)
    assert corpus.select("1", "b TWO") == [1] and corpus.select("2", "C three.") == [0]
    assert corpus.select("1", "not there") == []


@pytest.mark.parametrize("gold, named", [
    (GoldEvidence(doc_id="101", sentences=[999], label=S), "claim scifact:7: gold sentence 999 of doc 101, which has 4"),
    (GoldEvidence(doc_id="101", sentences=[-1], label=S), "claim scifact:7: gold sentence -1 of doc 101, which has 4"),
    (GoldEvidence(doc_id="999", sentences=[0], label=S), "claim scifact:7: gold paper 999 is not in the corpus"),
])
def test_gold_that_cannot_be_placed_is_refused_not_scored(gold, named):
    from biocheck.io import InputError

    with pytest.raises(InputError) as e:
        rationale_counts([gold], [Cited("supporting", "101", DOC[1])], CORPUS, where="claim scifact:7")
    assert str(e.value).startswith(named) and "biocheck data validate" in str(e.value) and "\n" not in str(e.value)
