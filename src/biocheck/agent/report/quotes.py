"""Quote matching: where does a quoted passage occur in a paper's title or abstract?

The renderer (highlighting) and the rewards (grounding, R_hallucination) share this one rule, so it
lives with the report and neither imports the other. A quote is found when its normal form is a
substring of the normal form of the text. The normal form forgives only what a model cannot see or
reliably type: Unicode compatibility forms (NFKC: ligatures, full-width letters, no-break spaces),
the kind of quote mark or dash, runs of whitespace, letter case, invisible format characters (soft
hyphen, zero-width space), and the dot above (U+0307, also inside a precomposed letter: "ṁ" = "m"):
PubMed renders MathML's over-dot of rates as "V̇O2max", which models write "VO2max". Anything else,
one changed word included, fails. `fuzzy_match` is a lenient token-level match for diagnostics only.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence

_QUOTES = frozenset("\"'`´“”„‟‘’‚‛«»‹›″′＂＇")
_DASHES = frozenset("\u2212\u2010\u2011\u2012\u2013\u2014\u2015\u2043\ufe58\ufe63\uff0d")
_TOKEN = re.compile(r"\w+")
_DOT_ABOVE = "\u0307"  # V̇O2 (a rate); the one diacritic the normal form drops
FUZZY_THRESHOLD = 0.9  # share of the quote's tokens that one window of the text must contain


def normalize_text(s: str) -> str:
    """NFKC, every quote mark -> '"', every dash -> '-', whitespace collapsed and trimmed, casefolded,
    the dot above dropped."""
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


def overlapping(span: tuple[int, int], spans: Sequence[tuple[int, int]]) -> list[int]:
    """Indices of the (start, end) `spans` that `span` overlaps: the sentences a quote found at `span` lies in."""
    start, end = span
    return [i for i, (a, b) in enumerate(spans) if a < end and b > start]


def quoted_sentences(quote: str, sentences: Sequence[str]) -> list[int]:
    """Indices of the sentences (an abstract joined by one space, as the index shows it) that the quote's span
    overlaps: an exact sentence, a part of one, or a passage across two; [] when the quote is not there."""
    sentences = [s.strip() for s in sentences]
    span = find_quote(quote, " ".join(sentences))
    if span is None:
        return []
    spans, pos = [], 0
    for s in sentences:
        spans.append((pos, pos + len(s)))
        pos += len(s) + 1
    return overlapping(span, spans)


def tokens(s: str) -> list[str]:
    """The word tokens (`\\w+` runs) of the normal form: what the fuzzy rule compares."""
    return _TOKEN.findall(normalize_text(s or ""))


def fuzzy_match(quote: str, text: str, threshold: float = FUZZY_THRESHOLD) -> bool:
    """Lenient match, for diagnostics only: strict match, or a run of the text's tokens as long as the quote
    that contains at least `threshold` of the quote's tokens (multiset overlap / quote length).

    With n quote tokens, every window of n consecutive text tokens is compared; so one changed, dropped or
    added word in a quote of 10+ words still matches, a reordered or paraphrased sentence does not. A quote
    with no word tokens never matches fuzzily.
    """
    if find_quote(quote, text) is not None:
        return True
    q = tokens(quote)
    t = tokens(text)
    n = len(q)
    if n == 0 or n > len(t):
        return False
    need = Counter(q)
    window = Counter(t[:n])
    overlap = sum(min(c, window[w]) for w, c in need.items())
    best = overlap
    for i in range(n, len(t)):  # slide: one token in, one out; keep the overlap up to date
        add, drop = t[i], t[i - n]
        if add != drop:
            if window[add] < need.get(add, 0):
                overlap += 1
            window[add] += 1
            window[drop] -= 1
            if window[drop] < need.get(drop, 0):
                overlap -= 1
        best = max(best, overlap)
        if best >= threshold * n:
            return True
    return best >= threshold * n


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


def _undot(piece: str) -> str:
    """`piece` without the combining dot above, also where it is part of a precomposed letter (ṁ, ż, İ)."""
    decomposed = unicodedata.normalize("NFD", piece)
    if _DOT_ABOVE not in decomposed:
        return piece
    return unicodedata.normalize("NFC", decomposed.replace(_DOT_ABOVE, ""))


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
        if j == i + 1 and s[i].isascii():
            piece = s[i].casefold()
        else:
            piece = _undot(unicodedata.normalize("NFKC", s[i:j]).casefold())
        for c in piece:
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
