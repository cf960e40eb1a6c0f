"""PubMed query parser: structure of the AST and the errors a malformed query produces."""

from __future__ import annotations

import pytest

from biocheck.evidence.query import MAX_DEPTH, MAX_TERMS, And, Not, Or, Term, parse, terms, to_string
from biocheck.evidence.types import SearchError


def t(text: str, field: str = "all", phrase: bool = False) -> Term:
    return Term(text, field, phrase)  # type: ignore[arg-type]


def test_single_word_defaults_to_all_fields() -> None:
    assert parse("aspirin") == t("aspirin")


def test_operators_apply_left_to_right_without_precedence() -> None:
    # PubMed: "a OR b AND c" means "(a OR b) AND c", unlike SQL/Lucene where AND binds tighter.
    assert parse("a OR b AND c") == And((Or((t("a"), t("b"))), t("c")))
    assert parse("a AND b OR c") == Or((And((t("a"), t("b"))), t("c")))
    assert parse("a OR b NOT c") == Not(Or((t("a"), t("b"))), t("c"))


def test_not_is_binary_and_chains_left() -> None:
    assert parse("a NOT b NOT c") == Not(Not(t("a"), t("b")), t("c"))


def test_parentheses_override_left_to_right() -> None:
    assert parse("a OR (b AND c)") == Or((t("a"), And((t("b"), t("c")))))
    assert parse("((a))") == t("a")


def test_implicit_and_between_adjacent_terms() -> None:
    assert parse("a b c") == And((t("a"), t("b"), t("c")))
    assert parse('a "b c"') == And((t("a"), t("b c", phrase=True)))
    assert parse("(a OR b) c") == And((Or((t("a"), t("b"))), t("c")))


def test_same_operator_chains_flatten() -> None:
    assert parse("a OR b OR c") == Or((t("a"), t("b"), t("c")))


def test_operators_only_in_upper_case() -> None:
    # Lower-case "and"/"or" are plain words (stopwords: the backend ignores them).
    assert parse("a and b") == And((t("a"), t("and"), t("b")))
    assert parse("a Or b") == And((t("a"), t("Or"), t("b")))


def test_quoted_phrase_and_smart_quotes() -> None:
    assert parse('"heart attack"') == t("heart attack", phrase=True)
    assert parse("\u201cheart attack\u201d") == t("heart attack", phrase=True)
    # Operators inside quotes are words of the phrase.
    assert parse('"a AND b"') == t("a AND b", phrase=True)


@pytest.mark.parametrize(
    ("tag", "field"),
    [
        ("tiab", "tiab"),
        ("TIAB", "tiab"),
        ("Title/Abstract", "tiab"),
        ("ti", "ti"),
        ("title", "ti"),
        ("ab", "ab"),
        ("abstract", "ab"),
        ("mh", "mh"),
        ("mesh", "mh"),
        ("MeSH Terms", "mh"),
        ("majr", "mh"),
        ("all", "all"),
        ("All Fields", "all"),
    ],
)
def test_field_tags(tag: str, field: str) -> None:
    assert parse(f"aspirin[{tag}]") == t("aspirin", field)
    assert parse(f'"heart attack" [{tag}]') == t("heart attack", field, phrase=True)


def test_tag_binds_to_the_word_right_before_it() -> None:
    assert parse("heart attack[ti]") == And((t("heart"), t("attack", "ti")))


def test_wildcards_are_kept_in_the_term() -> None:
    term = parse("vaccin*[tiab]")
    assert term == t("vaccin*", "tiab")
    assert isinstance(term, Term) and term.wildcard
    assert parse('"colo* cancer*"') == t("colo* cancer*", phrase=True)


def test_to_string_makes_grouping_explicit() -> None:
    assert to_string(parse("a OR b AND c")) == "(a[all] OR b[all]) AND c[all]"
    assert to_string(parse('"x y"[ti] NOT z[mh]')) == '"x y"[ti] NOT z[mh]'


def test_terms_positive_only_skips_negated_side() -> None:
    node = parse("a AND (b NOT c) NOT d")
    assert [leaf.text for leaf in terms(node)] == ["a", "b", "c", "d"]
    assert [leaf.text for leaf in terms(node, positive_only=True)] == ["a", "b"]


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "Empty query"),
        ("   ", "Empty query"),
        ("(aspirin", "Unbalanced parenthesis"),
        ("aspirin)", "Unbalanced parenthesis"),
        ("(a OR b))", "Unbalanced parenthesis"),
        ("aspirin AND", "has nothing after it"),
        ("(aspirin OR) heart", "has nothing after it"),
        ("AND aspirin", "cannot start the query"),
        ("NOT aspirin", "NOT is binary"),
        ("(NOT aspirin)", "cannot follow '('"),
        ("aspirin AND OR heart", "directly follows AND"),
        ('"heart attack', "Unbalanced quote"),
        ('aspirin ""', "Empty quoted phrase"),
        ("aspirin[au]", "Unknown field tag [au]; supported: [tiab]"),
        ("aspirin[tiab", "Unclosed field tag"),
        ("aspirin]", "Unexpected ']'"),
        ("()", "Empty parentheses"),
        ("[tiab]", "must follow a word or phrase"),
        ("(a OR b)[tiab]", "tag each term"),
        ("vac*", "at least 4 characters"),
        ("*", "at least 4 characters"),
        ('"heart att*"', "at least 4 characters"),
    ],
)
def test_malformed_queries_raise_search_error(query: str, message: str) -> None:
    with pytest.raises(SearchError) as caught:
        parse(query)
    assert message in str(caught.value)
    if query.strip():
        assert query in str(caught.value)  # the model sees which query it was


def test_limits_raise_search_error_not_recursion_error() -> None:
    deep = "(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(SearchError, match="nested deeper"):
        parse(deep)
    with pytest.raises(SearchError, match="Too many terms"):
        parse(" OR ".join(f"w{i}" for i in range(MAX_TERMS + 1)))
    with pytest.raises(SearchError, match="too long"):
        parse("a" * 5000)
    # Just inside the limits still parses.
    assert parse("(" * MAX_DEPTH + "a" + ")" * MAX_DEPTH) == t("a")


@pytest.mark.parametrize(
    "query",
    [
        "'; DROP TABLE x; --",
        "title:aspirin",
        "aspirin^10",
        "a NEAR/3 b",
        "NEAR(a b)",
        "\u03b1-syn \u2603 \x00",
    ],
)
def test_special_characters_are_plain_words(query: str) -> None:
    # None of these mean anything in PubMed syntax: they parse into ordinary terms.
    node = parse(query)
    assert all(not leaf.phrase and leaf.field == "all" for leaf in terms(node))
