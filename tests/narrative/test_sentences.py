"""The sentence rule: sentences with exact spans (abbreviations, decimals) and each non-claim's reason."""

from __future__ import annotations

import pytest

from biocheck.narrative.sentences import MIN_CLAIM_WORDS, sentences, skip_reason


def texts(passage: str) -> list[str]:
    return [passage[s.start:s.end] for s in sentences(passage)]


def test_sentences_are_exact_trimmed_spans():
    passage = "  Aspirin lowers fever.\n\nIbuprofen reduces pain!   "
    spans = sentences(passage)
    assert [(s.start, s.end) for s in spans] == [(2, 23), (25, 48)]  # by hand: 2 spaces, 21 chars, 2 newlines, 23 chars
    assert texts(passage) == ["Aspirin lowers fever.", "Ibuprofen reduces pain!"]


@pytest.mark.parametrize("passage, expected", [
    # an abbreviation before a capital joins the pieces the base splitter cut
    ("Smith et al. Found that statins help. Trials agree.", ["Smith et al. Found that statins help.", "Trials agree."]),
    ("Some vitamins, e.g. Vitamin D, matter. Others do not.", ["Some vitamins, e.g. Vitamin D, matter.",
                                                               "Others do not."]),
    ("Drug A vs. Drug B showed no difference. Both were safe.", ["Drug A vs. Drug B showed no difference.",
                                                                 "Both were safe."]),
    # a decimal never splits, nor does a full stop before a lower-case word
    ("The dose was 1.5 mg per day. Effects were small.", ["The dose was 1.5 mg per day.", "Effects were small."]),
    ("It works, i.e. it lowers risk. Really?", ["It works, i.e. it lowers risk.", "Really?"]),
])
def test_abbreviations_and_decimals_do_not_end_a_sentence(passage, expected):
    assert texts(passage) == expected


def test_a_word_ending_like_an_abbreviation_still_ends_a_sentence():
    # "canvas." ends in "vs." but is no abbreviation: the match needs a word start before it
    assert texts("They painted on canvas. Paint dried fast.") == ["They painted on canvas.", "Paint dried fast."]


def test_white_space_only_has_no_sentences():
    assert sentences("   \n\t ") == []


@pytest.mark.parametrize("sentence, reason", [
    ("Does vitamin C prevent colds?", "question"),
    ("I think vitamin C prevents colds.", "opinion"),
    ("In my opinion, statins are overused.", "opinion"),
    ("PERSONALLY, I avoid sugar.", "opinion"),
    ("My friend took zinc and recovered in a day.", "anecdote"),
    ("I tried melatonin for a month.", "anecdote"),
    ("I’ve been taking fish oil for years.", "anecdote"),  # a curly apostrophe
    ("See below.", "not a claim"),
    ("Smoking causes cancer.", None),
    ("Metformin lowers blood glucose in type 2 diabetes.", None),
])
def test_skip_reasons(sentence, reason):
    assert skip_reason(sentence) == reason


def test_markers_are_whole_words():
    # "my friendly" is no "my friend", "think-tank" no "I think"
    assert skip_reason("Doctors call my friendly advice useless.") is None
    assert skip_reason("A think tank reported that taxes on sugar lower intake.") is None


def test_a_question_wins_over_an_opinion():
    assert skip_reason("Do I think this drug works?") == "question"


def test_the_length_rule_is_the_constant():
    short = " ".join(["word"] * (MIN_CLAIM_WORDS - 1)) + "."
    enough = " ".join(["word"] * MIN_CLAIM_WORDS) + "."
    assert skip_reason(short) == "not a claim"
    assert skip_reason(enough) is None


def test_etc_and_no_end_a_sentence():
    assert texts("We tested mice, rats, etc. The results held.") == ["We tested mice, rats, etc.", "The results held."]
    assert texts("The answer was no. Trials disagreed.") == ["The answer was no.", "Trials disagreed."]
