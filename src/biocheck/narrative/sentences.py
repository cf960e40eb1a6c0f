"""The sentence rule: a passage's sentences with their spans, and which of them hold no claim to check.

It is the fallback extractor (a model that cannot follow the extraction format) and the "one claim per sentence"
baseline, so it is deterministic and needs no model.

Sentences: the project's one splitter (`biocheck.text.sentence_spans`: after . ! ? and white space, before a
capital, a digit, a bracket or a quote; so "1.5", "vs. placebo" and "e.g. from" never split), then a piece is
joined back to the one before when that one ends in an abbreviation of `ABBREVIATIONS` ("Smith et al. Found"
is one sentence). Each span is trimmed of white space, so `passage[start:end]` is the sentence's text.

Check-worthiness, first rule that applies: a sentence ending in "?" is a question; one with a marker of
`OPINION_MARKERS` an opinion; one of `ANECDOTE_MARKERS` an anecdote (markers are matched as whole words, any
case); fewer than `MIN_CLAIM_WORDS` words is not a claim. Everything else is a claim.
"""

from __future__ import annotations

import re

from biocheck.narrative.schema import SkipReason, Span
from biocheck.text import sentence_spans

# Abbreviations that end in a full stop inside a sentence (any case; matched at the end of a piece). Not "etc."
# or "no.": they often end a sentence ("The answer was no."), and joining two sentences costs more than a cut.
ABBREVIATIONS: tuple[str, ...] = ("e.g.", "i.e.", "et al.", "vs.", "cf.", "approx.", "fig.", "figs.", "ref.",
                                  "dr.", "prof.", "vol.", "ca.", "resp.", "incl.")
# First-person markers of what a reader cannot check against the literature (whole words, any case).
OPINION_MARKERS: tuple[str, ...] = ("i think", "i believe", "i feel", "in my opinion", "in my view",
                                    "personally", "imho", "i guess", "i doubt", "i am convinced",
                                    "i'm convinced", "i suspect")
ANECDOTE_MARKERS: tuple[str, ...] = ("my friend", "my mother", "my father", "my mom", "my dad", "my wife",
                                     "my husband", "my doctor", "my sister", "my brother", "my son", "my daughter",
                                     "i tried", "i took", "i started", "i stopped", "i have been", "i've been",
                                     "in my experience", "worked for me")
MIN_CLAIM_WORDS = 3  # "Yes, indeed." or "See below." states nothing to check; "Smoking causes cancer." does

_ABBREVIATION_END = re.compile(r"(?:^|[\s(\[])(?:" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")$",
                               re.IGNORECASE)


def _markers(words: tuple[str, ...]) -> re.Pattern[str]:
    # whole words: "my friendly" is no "my friend"; an apostrophe may be typed straight or curly
    alternatives = (re.escape(w).replace("'", "['’]") for w in words)
    return re.compile(r"\b(?:" + "|".join(alternatives) + r")\b", re.IGNORECASE)


_OPINION = _markers(OPINION_MARKERS)
_ANECDOTE = _markers(ANECDOTE_MARKERS)


def sentences(passage: str) -> list[Span]:
    """The passage's sentences as trimmed spans, in order (none for a passage of white space)."""
    merged: list[list[int]] = []
    for a, b in sentence_spans(passage):
        if merged and _ABBREVIATION_END.search(passage[merged[-1][0]:merged[-1][1]]):
            merged[-1][1] = b
        else:
            merged.append([a, b])
    spans = []
    for a, b in merged:
        piece = passage[a:b]
        if piece.strip():
            start = a + len(piece) - len(piece.lstrip())
            spans.append(Span(start, b - (len(piece) - len(piece.rstrip()))))
    return spans


def skip_reason(sentence: str) -> SkipReason | None:
    """Why `sentence` holds no claim to check, or None when it does (the rule in the module's docstring)."""
    text = sentence.strip()
    if text.endswith("?"):
        return "question"
    if _OPINION.search(text):
        return "opinion"
    if _ANECDOTE.search(text):
        return "anecdote"
    if len(text.split()) < MIN_CLAIM_WORDS:
        return "not a claim"
    return None
