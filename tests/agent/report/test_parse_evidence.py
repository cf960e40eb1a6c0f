"""Evidence sections, rule by rule (docs/report.md, "Evidence items" and "Quotes"): where an item starts,
when a quote is still open, what follows a closing mark, how free text is tidied, and empty markers."""

from __future__ import annotations

import pytest

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.parse_evidence import parse_evidence
from biocheck.agent.report.schema import EvidenceItem

S = "evidence item {} under Supporting evidence"


def item(pmid: str, quote: str, context: str = "") -> EvidenceItem:
    return EvidenceItem(pmid=pmid, quote=quote, context=context)


def read(body: str) -> tuple[list[EvidenceItem], list[str]]:
    """The items and problems of one Supporting evidence section holding `body`."""
    return parse_evidence(body.split("\n"), "Supporting evidence")


def test_parse_evidence_agrees_with_parse_report():
    body = '- PMID: 1\n  Quote: "A."\n  Context: a\n- PMID: 2\n  Quote: "B."'
    parsed = parse_report("## Supporting evidence\n" + body + "\n## Conclusion\nSUPPORTED")
    assert (parsed.report.supporting, parsed.problems[:-2]) == read(body)
    assert read(body) == ([item("1", "A.", "a"), item("2", "B.")], [S.format(2) + " has no context"])


# -- open and closed quotes decide where an item ends ---------------------------------------------------


@pytest.mark.parametrize(
    "body,quote",
    [
        ('PMID: 1\nQuote: "Alpha."\n- "Beta." (PMID 2)', "Alpha."),  # closed on its own line
        ('PMID: 1\nQuote: "Alpha,\n  more."\n- "Beta." (PMID 2)', "Alpha,\n  more."),  # closed on a later line
        ('PMID: 1\nQuote: "Alpha." Context: a\n- "Beta." (PMID 2)', "Alpha."),  # closed before a label
        ('PMID: 1\nQuote: "Alpha."**Context:** a\n- "Beta." (PMID 2)', "Alpha."),  # ... a bold one, no space
    ],
)
def test_a_closed_quote_lets_the_next_bullet_start_an_item(body, quote):
    items, _problems = read(body)
    assert [(i.pmid, i.quote) for i in items] == [("1", quote), ("2", "Beta.")]


def test_an_empty_quote_is_closed():
    assert read('- PMID: 1\n  Quote: ""\n- "Beta." (PMID 2)') == (
        [item("1", ""), item("2", "Beta.")],
        [S.format(1) + " has no quote", S.format(1) + " has no context", S.format(2) + " has no context"],
    )


@pytest.mark.parametrize(
    "body,expected",
    [
        ('- PMID 1: "Alpha,\n- beta." (RCT)', item("1", "Alpha,\n- beta.", "RCT")),  # opened in a PMID line
        ('- "Alpha,\n- beta." (PMID 1)\n  Context: c', item("1", "Alpha,\n- beta.", "c")),  # in unlabelled text
        ('"Alpha,\n- beta." (PMID 1)\nContext: c', item("1", "Alpha,\n- beta.", "c")),  # first on its line
    ],
)
def test_a_quote_left_open_keeps_a_bullet_line_inside_it(body, expected):
    assert read(body) == ([expected], [])


# -- what starts an item --------------------------------------------------------------------------------


def test_a_bulleted_label_after_an_unlabelled_quote_continues_the_item():
    assert read('- "Alpha." (PMID 1)\n  - Context: a') == ([item("1", "Alpha.", "a")], [])


def test_a_sub_heading_with_a_pmid_heads_the_item_that_follows():
    expected = ([item("1", "Alpha.", "a")], [S.format(1) + ": ignored 'Study 1'"])
    assert read('### Study 1 (PMID 1)\n- "Alpha." — a') == expected  # a bullet does not split a bare heading off
    assert read('### Study 1 (PMID 1)\n"Alpha." — a') == expected  # the line under it is its own field


def test_a_sub_heading_with_only_text_is_ignored_with_its_text():
    assert read("### Notes\nsome text") == ([], ["text under Supporting evidence ignored: 'Notes some text'"])


def test_an_item_with_only_a_context_label_is_kept():
    for body in ("- Context: a", "— Context: a"):  # labelled at the line start, or after a dash
        assert read(body) == ([item("", "", "a")], [S.format(1) + " has no PMID", S.format(1) + " has no quote"])


def test_a_pmid_label_without_an_id_leaves_the_quote_to_be_read():
    assert read('- PMID: "Alpha." — a') == ([item("", "Alpha.", "a")], [S.format(1) + " has no PMID"])


def test_a_bare_pubmed_number_before_a_colon_is_the_pmid():
    assert read('- 31234567: "Alpha." — a') == ([item("31234567", "Alpha.", "a")], [])
    # a short number is no PubMed id; without a PMID, text around the quote fits no field
    assert read('- 123: "Alpha." — a') == (
        [item("", "Alpha.")],
        [
            S.format(1) + " has no PMID",
            S.format(1) + " has no context",
            S.format(1) + ": ignored '123'",
            S.format(1) + ": ignored 'a'",
        ],
    )


def test_a_second_pmid_in_one_item_is_ignored_with_a_problem():
    assert read('- "A." (PMID 1) PMID: 2') == (
        [item("1", "A.")],
        [S.format(1) + " has no context", S.format(1) + ": ignored '2'"],
    )


def test_the_words_of_a_sub_heading_are_named_whole():
    assert read('### Xylitol trial (PMID: 1)\nQuote: "A."\nContext: a') == (
        [item("1", "A.", "a")],
        [S.format(1) + ": ignored 'Xylitol trial'"],
    )


# -- continuation lines ---------------------------------------------------------------------------------


def test_continuation_lines_keep_their_indentation_only_inside_a_quote_field():
    assert read("PMID: 1\nQuote: no marks\n   indented more\nContext: a") == (
        [item("1", "no marks\n   indented more", "a")],
        [],
    )
    assert read("PMID: 1\nAlpha beta\n    gamma delta\nContext: a") == ([item("1", "Alpha beta\ngamma delta", "a")], [])


@pytest.mark.parametrize(
    "body",
    [
        '- PMID: 1\n  Quote: "A." Context: a\n    more',
        "- PMID: 1\n  Quote: A. Context: a\n    more",
        '- PMID: 1\n  Quote: "A." — a\n    more',
        '- "A." (PMID 1) a\n  more',
    ],
)
def test_a_context_that_starts_after_the_quote_runs_over_the_next_lines(body):
    assert read(body) == ([item("1", "A.", "a\nmore")], [])


def test_text_after_a_context_label_inside_the_context_is_kept():
    assert read('- PMID: 1\n  Quote: "A" Context: "B" x\n  more') == ([item("1", "A", '"B" x\nmore')], [])


# -- what follows a closing quote mark ------------------------------------------------------------------


def test_a_field_label_after_an_earlier_closing_mark_ends_the_quote_there():
    assert read('- PMID: 1\n  Quote: "Alpha"**Context:** the "high" dose') == (
        [item("1", "Alpha", 'the "high" dose')],
        [],
    )


@pytest.mark.parametrize(
    "body",
    [
        '- PMID: 1\n  Quote: "Alpha"…',
        '- PMID: 1\n  Quote: "Alpha"… in older adults',
        '- "Alpha"… in older adults (PMID 1)',
    ],
)
def test_text_right_after_the_closing_mark_is_the_context(body):
    context = body.split("…")[1].split(" (")[0]
    assert read(body) == ([item("1", "Alpha", "…" + context)], [])


def test_a_second_quote_or_context_in_one_item_is_ignored_with_a_problem():
    assert read('- "A." (PMID 1) Quote: "B."') == (
        [item("1", "A.")],
        [S.format(1) + " has no context", S.format(1) + ": ignored '\"B.\"'"],
    )
    # labelled fields are read before text that follows a quote: the "Reason" line is the context
    assert read('- PMID: 1\n  Quote: "A." Context: a\n  Reason: b') == (
        [item("1", "A.", "b")],
        [S.format(1) + ": ignored 'a'"],
    )


@pytest.mark.parametrize(
    "body",
    [
        'PMID: 1\nQuote: "Alpha." **Context:** a',
        '- **PMID:** 1, **Quote:** "Alpha." **Context:** a',
        '- **PMID:** 1 | **Quote:** "Alpha." | **Context:** a',
        '- **PMID**: 1, **Quote**: "Alpha.", **Context**: a',
    ],
)
def test_bold_labels_on_one_line(body):
    assert read(body) == ([item("1", "Alpha.", "a")], [])


# -- tidying free text ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "tail,context",
    [
        (" (RCT) ,", "RCT"),
        (" (RCT) , ,", "RCT"),
        (" — small RCT;", "small RCT"),
        (" (a (b)))", "a (b)"),
        (" a(b)]", "a(b)"),
        (" a) ),)", "a"),
        (" — deficiency of factor X", "deficiency of factor X"),
        (" — see ref [1]", "see ref [1]"),
        (" — a trial (n=100)", "a trial (n=100)"),
    ],
)
def test_free_text_loses_its_separators_and_unbalanced_brackets(tail, context):
    assert read('- PMID 1: "Alpha."' + tail) == ([item("1", "Alpha.", context)], [])


# -- empty markers --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body", ["No refuting evidence was found:\n- searched for harms", "None\n- N/A", "No\n- data found"]
)
def test_an_empty_marker_drops_the_whole_section(body):
    assert read(body) == ([], [])


def test_a_text_that_reads_like_an_empty_marker_is_an_item_when_it_holds_a_pmid_or_a_quote():
    assert read("No effect was observed (PMID 3)") == (
        [item("3", "No effect was observed")],
        [S.format(1) + " has no context"],
    )
    assert read('"No effect was observed." — c') == (
        [item("", "No effect was observed.")],
        [S.format(1) + " has no PMID", S.format(1) + " has no context", S.format(1) + ": ignored 'c'"],
    )


def test_an_item_without_any_quote_mark_is_read():
    assert read("PMID: 1\nQuote: Alpha\nContext: a") == ([item("1", "Alpha", "a")], [])
