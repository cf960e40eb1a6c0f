"""The fuzzy (diagnostic) grounding rule of docs/rewards.md, checked against a direct reading of it."""

from __future__ import annotations

import random
from collections import Counter

from biocheck.agent.report.quotes import FUZZY_THRESHOLD, find_quote, fuzzy_match, tokens

VOCAB = ["alpha", "beta", "gamma", "delta"]  # few words: windows share and repeat tokens often


def windows_rule(quote: list[str], text: list[str], threshold: float) -> bool:
    """Some window of n = len(quote) consecutive text tokens holds >= threshold * n of the quote's tokens
    (multiset overlap); no match for an empty quote or one longer than the text."""
    n = len(quote)
    if n == 0 or n > len(text):
        return False
    need = Counter(quote)
    return any(sum((need & Counter(text[i:i + n])).values()) >= threshold * n for i in range(len(text) - n + 1))


def test_fuzzy_match_is_the_sliding_window_rule():
    rng = random.Random(7)
    outcomes = Counter()
    for _ in range(3000):
        quote = [rng.choice(VOCAB) for _ in range(rng.randrange(1, 13))]
        text = [rng.choice(VOCAB) for _ in range(rng.randrange(0, 30))]
        threshold = rng.choice([0.5, 0.75, FUZZY_THRESHOLD, 1.0])
        want = windows_rule(quote, text, threshold)
        assert fuzzy_match(" ".join(quote), " ".join(text), threshold) is want, (quote, text, threshold)
        outcomes[want] += 1
    assert min(outcomes.values()) > 300  # both answers are well represented


def test_a_quote_as_long_as_the_text_with_one_word_changed():
    text = "one two three four five six seven eight nine ten"
    quote = text.replace("five", "FIVEISH")
    assert len(tokens(quote)) == len(tokens(text)) == 10
    assert fuzzy_match(quote, text)  # 9 of 10 words: the whole text is the one window
    assert not fuzzy_match(quote + " eleven", text)  # longer than the text: never


def test_a_strict_match_inside_words_is_also_a_fuzzy_match():
    # the normal form of the quote is in the text, but its first and last tokens are pieces of words
    assert fuzzy_match("ractures in old", "Hip fractures in older adults.")


def test_tokens_of_nothing_are_none():
    assert tokens("") == [] and tokens(None) == []
    assert tokens("Hip  FRACTURES, in-older") == ["hip", "fractures", "in", "older"]


def test_every_quote_mark_and_dash_by_its_unicode_category():
    # marks outside the usual lists still fold: U+2E02/U+2E03 are initial/final quotes, U+2E3A is a dash
    assert find_quote("\u2e02word\u2e03", 'say "word" now') == (4, 10)
    assert find_quote("a\u2e3ab", "x a-b") == (2, 5)


def test_the_first_occurrence_is_found_and_a_missing_quote_never_is():
    assert find_quote("hip fracture", "Hip fracture or hip fracture") == (0, 12)
    assert find_quote(None, "xxxx and more") is None and find_quote("", "xxxx") is None
