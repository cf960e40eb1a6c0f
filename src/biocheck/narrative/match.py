"""Which extracted claim is which gold claim, and the extraction's precision and recall.

The rule: two claims match when the F1 of their content-word sets is at least `MATCH_THRESHOLD`. Content words
are the text's lower-cased runs of letters and digits (`\\w+`), less `STOPWORDS` (function words; "no" and
"not" are kept, they change a claim), each without a final "s" in words of 4 letters or more (not from "ss",
"us", "is": class, virus, sepsis), so "statins reduce" and "statin reduces" are the same words. With A and B the
two sets, F1 = 2|A ∩ B| / (|A| + |B|): 1 for the same words in any order, 0 for none shared. A rewording that
keeps the claim's terms ("Metformin lowers glucose." for "In diabetes, metformin lowers blood glucose.", 0.75)
stays above the threshold; another claim on the same topic ("Metformin reduces body weight in type 2
diabetes." for "Metformin lowers blood glucose in type 2 diabetes.", 0.571) falls below it. The threshold is
checked on hand-labelled pairs (tests/narrative/test_match.py): a surface rule, it misses a paraphrase in wholly
other words ("the elderly" for "older adults") and can match two claims of one sentence that share most words.

Matching is one-to-one and greedy: the pair with the best score first (ties: the earlier extracted claim, then
the earlier gold claim), then the best of the rest, and so on; a claim matched once is not matched again.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

# On the hand-labelled pairs, the same claims scored 0.615 and up, different ones 0.571 and below
MATCH_THRESHOLD = 0.6
_STOPWORD_TEXT = """
a an the of in on at to for from by with without and or but as is are was were be been being that this these those
it its they them their there than then which who whom whose what when where while into onto about over under
between among per via can may might will would should could do does did has have had also such
"""
STOPWORDS: frozenset[str] = frozenset(_STOPWORD_TEXT.split())
_WORD = re.compile(r"\w+")


def _singular(word: str) -> str:
    # "statins"/"statin", "reduces"/"reduce": a final s goes, but not from "ss", "us", "is" (class, virus, sepsis)
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) else word


def content_words(text: str) -> frozenset[str]:
    return frozenset(_singular(w) for w in _WORD.findall(text.lower()) if w not in STOPWORDS)


def similarity(a: str, b: str) -> float:
    """F1 of the two texts' content-word sets (0 when either has none)."""
    wa, wb = content_words(a), content_words(b)
    if not wa or not wb:
        return 0.0
    return 2 * len(wa & wb) / (len(wa) + len(wb))


@dataclass(frozen=True)
class Match:
    extracted: int  # index into the extracted claims
    gold: int  # index into the gold claims
    score: float


@dataclass(frozen=True)
class ExtractionScores:
    """Counts first (pooled over passages, they give intervals); precision or recall is None when undefined:
    precision with no claim extracted, recall with no gold claim."""

    n_extracted: int
    n_gold: int
    matches: tuple[Match, ...]

    @property
    def n_matched(self) -> int:
        return len(self.matches)

    @property
    def precision(self) -> float | None:
        return self.n_matched / self.n_extracted if self.n_extracted else None

    @property
    def recall(self) -> float | None:
        return self.n_matched / self.n_gold if self.n_gold else None


def match_claims(extracted: Sequence[str], gold: Sequence[str],
                 threshold: float = MATCH_THRESHOLD) -> tuple[Match, ...]:
    """One-to-one greedy matching by best score, pairs scoring at least `threshold` (module docstring)."""
    pairs = [Match(i, j, s) for i, e in enumerate(extracted) for j, g in enumerate(gold)
             if (s := similarity(e, g)) >= threshold]
    used_e: set[int] = set()
    used_g: set[int] = set()
    out = []
    for m in sorted(pairs, key=lambda m: (-m.score, m.extracted, m.gold)):
        if m.extracted not in used_e and m.gold not in used_g:
            used_e.add(m.extracted)
            used_g.add(m.gold)
            out.append(m)
    return tuple(sorted(out, key=lambda m: m.extracted))


def extraction_scores(extracted: Sequence[str], gold: Sequence[str]) -> ExtractionScores:
    """Precision (matched / extracted) and recall (matched / gold) of one passage's extraction."""
    return ExtractionScores(len(extracted), len(gold), match_claims(extracted, gold))
