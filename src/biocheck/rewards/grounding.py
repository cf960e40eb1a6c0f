"""Strict evidence grounding: is a quoted passage really in the cited paper's title or abstract?

The rewards and the HTML renderer share this one rule. A quote is grounded when its normal form is a
substring of the normal form of the paper's title or abstract. The normal form forgives only what a
model cannot see or reliably type: Unicode compatibility forms (NFKC: ligatures, full-width letters,
no-break spaces), the kind of quote mark or dash, runs of whitespace, letter case, and invisible
format characters (soft hyphen, zero-width space). Anything else, one changed word included, fails.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator, Mapping

from biocheck.agent.report import EvidenceItem
from biocheck.pubmed.types import Article

_QUOTES = frozenset("\"'`´“”„‟‘’‚‛«»‹›″′＂＇")
_DASHES = frozenset("\u2212\u2010\u2011\u2012\u2013\u2014\u2015\u2043\ufe58\ufe63\uff0d")


def normalize_text(s: str) -> str:
    """NFKC, every quote mark -> '"', every dash -> '-', whitespace collapsed and trimmed, casefolded."""
    return _normalize_map(s)[0]


def find_quote(quote: str, text: str) -> tuple[int, int] | None:
    """The span [start, end) of `quote` in the ORIGINAL `text`, matched on normal forms; None if absent.

    `text[start:end]` is what a renderer highlights: it may differ from the quote in case, quote marks,
    dashes, spacing or ligatures, never in letters. A blank quote is never found.
    """
    needle = normalize_text(quote or "")
    if not needle or not text:
        return None
    hay, starts, ends = _normalize_map(text)
    k = hay.find(needle)
    if k < 0:
        return None
    return starts[k], ends[k + len(needle) - 1]


def is_grounded(item: EvidenceItem, ledger: Mapping[str, Article]) -> bool:
    """The item cites a retrieved paper and its quote occurs in that paper's title or abstract."""
    article = ledger.get(item.pmid)
    if article is None:
        return False
    return find_quote(item.quote, article.title) is not None or find_quote(item.quote, article.abstract) is not None


def _clusters(s: str) -> Iterator[tuple[int, int]]:
    """[start, end) runs that normalise independently: a character and the marks that combine with it.

    NFKC of a whole string can differ from NFKC of its characters one by one ("e" + U+0301 -> "é",
    Hangul jamo -> syllables), so a run grows while the next character changes the run's normal form.
    ASCII never combines with what precedes it, which keeps the common case fast.
    """
    n, i = len(s), 0
    while i < n:
        j = i + 1
        while j < n and not s[j].isascii():
            run = s[i:j]
            if unicodedata.normalize("NFKC", run + s[j]) == unicodedata.normalize("NFKC", run) + unicodedata.normalize(
                "NFKC", s[j]
            ):
                break
            j += 1
        yield i, j
        i = j


def _fold(c: str) -> str:
    if c in _QUOTES or unicodedata.category(c) in ("Pi", "Pf"):
        return '"'
    if c in _DASHES or unicodedata.category(c) == "Pd":
        return "-"
    return c


def _normalize_map(s: str) -> tuple[str, list[int], list[int]]:
    """The normal form of `s`, and for each of its characters the span of `s` it came from."""
    out: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    space: tuple[int, int] | None = None  # whitespace seen since the last character written
    for i, j in _clusters(s):
        piece = s[i] if j == i + 1 and s[i].isascii() else unicodedata.normalize("NFKC", s[i:j])
        for c in piece.casefold():
            if c.isspace():
                if out and space is None:
                    space = (i, j)
                continue
            if unicodedata.category(c) == "Cf":  # soft hyphen, zero-width space: invisible to the model
                continue
            if space is not None:
                out.append(" ")
                starts.append(space[0])
                ends.append(space[1])
                space = None
            out.append(_fold(c))
            starts.append(i)
            ends.append(j)
    return "".join(out), starts, ends
