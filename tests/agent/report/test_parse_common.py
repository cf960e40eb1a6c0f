"""The parser's shared pieces: excerpts for problem messages, title and label words, quote marks, PMIDs."""

from __future__ import annotations

import pytest

from biocheck.agent.report.parse_common import (
    canon_pmid,
    closer_positions,
    closers,
    ends_with_closer,
    field_label_at_start,
    find_opener,
    has_closer,
    norm_words,
    section_kind,
    snip,
    split_pmid,
    unquote,
)


def test_snip_keeps_a_short_text_and_cuts_a_long_one_to_n_characters():
    assert snip("a  b\n c") == "a b c"
    assert snip("x" * 10, n=10) == "x" * 10  # exactly n: kept whole
    assert snip("x" * 11, n=10) == "x" * 9 + "…"
    assert len(snip("word " * 100)) == 60  # the default length


def test_snip_reads_only_the_first_4n_characters():
    assert snip(" " * 40 + "tail", n=10) == ""
    assert snip(" " * 39 + "tail", n=10) == "t"


def test_norm_words_reads_ampersand_and_slash_as_and():
    assert norm_words("Consensus & Context/Check!") == "consensus and context and check"


@pytest.mark.parametrize(
    "title,kind",
    [
        ("Supporting evidence (3 papers)", "supporting"),
        ("II. Summary", "summary"),
        ("B) Conclusion", "conclusion"),
        ("**Summary:**", "summary"),
        ("## Refuting evidence #", "refuting"),
        ("Summary X", None),
        ("Conclusion and outlook", None),
        ("- Supporting 1", None),
    ],
)
def test_section_kind(title, kind):
    assert section_kind(title) == kind


def test_find_opener_starts_at_the_given_index_and_says_minus_one_when_there_is_none():
    assert find_opener('"a" and "b"', 1) == 8
    assert find_opener("don't and patients' data") == -1  # apostrophes inside or after a word are not marks


def test_closers_are_looked_for_after_the_opener_only():
    assert closers('a" b "c" d', 5) == [7]  # the mark after "a" comes before the opener
    assert closers('" a"', 0) == [3]  # an opener that could close a quote does not close its own
    assert closer_positions('" a"', '"') == [0, 3]
    assert closer_positions('" a" "b"', '"', 1) == [3, 7]


def test_has_closer_and_ends_with_closer():
    assert has_closer("the end» here", "«") and not has_closer("the end here", "«")
    assert ends_with_closer("the end”.) ", "“")
    assert not ends_with_closer('the end" here', '"')
    assert not ends_with_closer("the end»", '"')


@pytest.mark.parametrize(
    "text,expected",
    [
        ('"ab"', "ab"),
        ("  “ ab ” ", "ab"),
        ("«ab»", "ab"),
        ('""', ""),
        ('"', '"'),
        ('"ab»', '"ab»'),  # the closing mark must fit the opening one
        ("ab", "ab"),
    ],
)
def test_unquote_strips_one_matching_pair(text, expected):
    assert unquote(text) == expected


def test_field_label_at_start_looks_the_label_up():
    known = {"context": "context", "quote": "quote"}
    assert field_label_at_start("**Context (why it matters):** c", known) == ("context", "c")
    assert field_label_at_start("Quote from the abstract: q", known) == ("quote", "q")
    assert field_label_at_start("Note: n", known) == (None, "Note: n")


def test_split_pmid_lists_every_id():
    assert split_pmid("1, 2 and PMID 3; rest") == ("1", ["2", "3"], "; rest")
    assert split_pmid("none") == (None, [], "none")


@pytest.mark.parametrize("value,pmid", [("PMID: 123", "123"), (" [PMID 123] ", "123"), ("n/a", ""), ("unknown", "")])
def test_canon_pmid(value, pmid):
    assert canon_pmid(value) == pmid
