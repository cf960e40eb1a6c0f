"""Strict grounding: normal forms, quote spans in the original text, and is_grounded over a ledger."""

from __future__ import annotations

import random

import pytest

from biocheck.agent.report.quotes import find_quote, normalize_text, overlapping, quoted_sentences
from biocheck.agent.report.schema import EvidenceItem
from biocheck.evidence.types import Article
from biocheck.rewards.grounding import is_grounded

ABSTRACT = (
    "BACKGROUND: Vitamin D is widely used.\nMETHODS: We randomised 2,000 adults ≥65 years.\n"
    "RESULTS: Supplementation reduced hip fractures by 20% (95% CI 0.70–0.91). "
    "The “high-dose” group had the largest eﬀect."
)


@pytest.mark.parametrize(
    "raw,normal",
    [
        ("  Hello\t\n  World  ", "hello world"),  # whitespace collapsed and trimmed, casefolded
        ("“curly” ‘single’ «guillemets» 'plain' `tick`", '"curly" "single" "guillemets" "plain" "tick"'),
        ("a–b—c−d‐e-f", "a-b-c-d-e-f"),  # en, em, minus, hyphen
        ("ﬁnal eﬀect", "final effect"),  # NFKC ligatures
        ("ＡＢＣ１２３", "abc123"),  # full-width
        ("a\u00a0b\u2009c", "a b c"),  # no-break and thin spaces
        ("co\u00adoperate zero\u200bwidth", "cooperate zerowidth"),  # invisible format characters
        ("Straße", "strasse"),
        ("Cafe\u0301", "café"),  # combining accent composes
    ],
)
def test_normalize_text(raw, normal):
    assert normalize_text(raw) == normal


def test_find_quote_exact_span():
    quote = "Supplementation reduced hip fractures by 20%"
    span = find_quote(quote, ABSTRACT)
    assert span is not None
    assert ABSTRACT[span[0] : span[1]] == quote


def test_find_quote_maps_back_through_normalisation():
    # straight quotes for curly, a hyphen for the en dash, "ff" for the ligature, other case and spacing
    quote = 'ci 0.70-0.91).   the "HIGH-DOSE" group had the largest effect'
    start, end = find_quote(quote, ABSTRACT)
    assert ABSTRACT[start:end] == "CI 0.70–0.91). The “high-dose” group had the largest eﬀect"


def test_find_quote_over_a_line_break_and_collapsed_spaces():
    text = "first   line\n\n   second line"
    start, end = find_quote("line second", text)
    assert text[start:end] == "line\n\n   second"


def test_find_quote_ligature_in_the_quote_and_combining_marks():
    assert find_quote("ﬁnal", "the final word") == (4, 9)
    text = "a cafe\u0301 nearby"
    start, end = find_quote("café", text)
    assert text[start:end] == "cafe\u0301"  # the combining mark is inside the span
    assert find_quote("cafe", text) is None  # é is not e


@pytest.mark.parametrize("quote", ["", "   ", "\u200b", "\n\t"])
def test_blank_quote_is_never_found(quote):
    assert find_quote(quote, ABSTRACT) is None


@pytest.mark.parametrize(
    "quote",
    [
        "Supplementation reduced hip fractures by 25%",  # one changed number
        "Supplementation lowered hip fractures",  # a paraphrase
        "Vitamin D is widely used and safe.",  # an addition
        "reduced  hip  fractures  by  20%  in  women",
    ],
)
def test_anything_but_normalisation_fails(quote):
    assert find_quote(quote, ABSTRACT) is None


def test_find_quote_at_the_edges_and_on_empty_text():
    assert find_quote("background", ABSTRACT) == (0, 10)
    assert ABSTRACT[slice(*find_quote("largest eﬀect.", ABSTRACT))].endswith("eﬀect.")
    assert find_quote("x", "") is None


_VARIANTS = {" ": ["  ", "\n", "\u00a0", "\t "], '"': ["“", "”", "«"], "-": ["–", "—", "−"], "fi": ["ﬁ"]}


def test_random_spans_round_trip_through_normalised_text():
    """For random texts with normalisation-changing substitutions, the span's normal form is the quote's."""
    rng = random.Random(3)
    words = ["fish", "define", '"a"', "x-y", "Élan", "β", "ﬁne", "CO2", "e\u0301t\u00e9"]
    for _ in range(300):
        plain = " ".join(rng.choice(words) for _ in range(rng.randrange(3, 15)))
        text = "".join(rng.choice(_VARIANTS.get(c, [c])) if rng.random() < 0.5 else c for c in plain)
        quote_words = plain.split(" ")
        a = rng.randrange(len(quote_words))
        b = rng.randrange(a + 1, len(quote_words) + 1)
        quote = " ".join(quote_words[a:b]).upper()
        span = find_quote(quote, text)
        assert span is not None, (quote, text)
        assert normalize_text(text[span[0] : span[1]]) == normalize_text(quote)
        assert text[span[0] : span[1]] == text[span[0] : span[1]].strip()  # no stray whitespace to highlight


LEDGER = {
    "111": Article(pmid="111", title="Aspirin and heart attacks: a trial", abstract=ABSTRACT, source="entrez"),
    "222": Article(pmid="222", title="Other", abstract="Nothing about fractures here.", source="corpus:scifact"),
}


def test_is_grounded_in_the_abstract_or_the_title():
    assert is_grounded(EvidenceItem(pmid="111", quote="reduced hip fractures by 20%"), LEDGER)
    assert is_grounded(EvidenceItem(pmid="111", quote="ASPIRIN AND HEART ATTACKS"), LEDGER)


def test_is_grounded_fails_for_unretrieved_wrong_paper_or_blank_quote():
    assert not is_grounded(EvidenceItem(pmid="999", quote="reduced hip fractures by 20%"), LEDGER)
    assert not is_grounded(EvidenceItem(pmid="222", quote="reduced hip fractures by 20%"), LEDGER)  # quote from 111
    assert not is_grounded(EvidenceItem(pmid="111", quote=""), LEDGER)
    assert not is_grounded(EvidenceItem(pmid="", quote="reduced hip fractures"), LEDGER)


def test_quote_spanning_title_and_abstract_is_not_grounded():
    # strict: a quote must lie inside one field, not across the title/abstract boundary
    assert not is_grounded(EvidenceItem(pmid="111", quote="a trial BACKGROUND: Vitamin D"), LEDGER)


# The dot above: PubMed shows a rate as "V̇O2max" (V + U+0307, from MathML); models type "VO2max".
DOTTED, PLAIN = "V\u0307O2max", "VO2max"


@pytest.mark.parametrize(("quote", "text"), [(DOTTED, PLAIN), (PLAIN, DOTTED), (DOTTED, DOTTED), (PLAIN, PLAIN)])
def test_the_dot_above_is_forgiven_in_both_directions(quote, text):
    abstract = f"Maximal oxygen uptake ( {text} ) was 67.6 ml/kg/min."
    start, end = find_quote(f"uptake ( {quote} ) was", abstract)
    assert abstract[start:end] == f"uptake ( {text} ) was"  # the highlight keeps the abstract's own form
    article = Article(pmid="333", title="Runners", abstract=abstract, source="entrez")
    assert is_grounded(EvidenceItem(pmid="333", quote=f"{quote} ) was 67.6"), {"333": article})


def test_the_dot_above_is_dropped_from_precomposed_letters_too():
    assert normalize_text("ṁ Ż İ") == normalize_text("m\u0307 Z\u0307 I") == "m z i"
    assert find_quote("mass flow m", "mass flow ṁ of air") == (0, 11)
    assert find_quote("VO2max", "V\u0307O\u0307 2max") is None  # only the dot is forgiven, not the space


def test_other_combining_marks_still_count():
    assert find_quote("VO2max", "V\u0302O2max") is None  # a circumflex is not a dot
    assert find_quote("cafe", "cafe\u0301") is None


def test_a_quote_from_parsed_mathml_is_grounded():
    from biocheck.evidence.article_xml import parse_efetch
    from tests.helpers.fake_eutils import CORPUS as PUBMED
    from tests.helpers.fake_eutils import pubmed_xml

    (article,) = parse_efetch(pubmed_xml([a for a in PUBMED if a.pmid == "31000009"]))
    assert DOTTED in article.abstract
    for quote in (f"uptake ( {DOTTED} ) was measured", f"uptake ( {PLAIN} ) was measured"):
        assert is_grounded(EvidenceItem(pmid="31000009", quote=quote), {"31000009": article})
    assert not is_grounded(EvidenceItem(pmid="31000009", quote="uptake ( V . O 2 m a x )"), {"31000009": article})


def test_quoted_sentences_are_the_sentences_a_quote_overlaps():
    sentences = ["Alpha rises.", "Beta falls sharply.", "Gamma is unchanged."]
    assert quoted_sentences("Beta falls sharply.", sentences) == [1]  # an exact sentence
    assert quoted_sentences("falls", sentences) == [1]  # a fragment is its sentence
    assert quoted_sentences("sharply. Gamma", sentences) == [1, 2]  # a passage across two
    assert quoted_sentences("Delta", sentences) == []  # not there
    # half-open spans: touching a boundary is not overlapping it
    assert overlapping((5, 10), [(0, 5), (5, 8), (10, 12)]) == [1]
    assert overlapping((0, 1), []) == []
