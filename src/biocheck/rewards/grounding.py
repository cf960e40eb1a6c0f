"""Strict evidence grounding: is a quoted passage really in the cited paper's title or abstract?

The rewards and the HTML renderer share this one rule. A quote is grounded when its normal form is a
substring of the normal form of the paper's title or abstract. The normal form forgives only what a
model cannot see or reliably type: Unicode compatibility forms (NFKC: ligatures, full-width letters,
no-break spaces), the kind of quote mark or dash, runs of whitespace, letter case, invisible
format characters (soft hyphen, zero-width space), and the dot above (U+0307, also inside a precomposed
letter: "ṁ" = "m"): PubMed renders MathML's over-dot of rates as "V̇O2max", which models write "VO2max".
Anything else, one changed word included, fails.

`check_entry` applies the rule to one evidence entry (PMID retrieved? quote found?) and also reports a
lenient token-level match (`fuzzy_match`) for diagnostics; only the strict rule decides `hallucinated`,
and `ehr` turns a report's entry checks into its Evidence Hallucination Rate. docs/rewards.md lists the rules.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from biocheck.agent.report import EvidenceItem
from biocheck.pubmed.types import Article

_QUOTES = frozenset("\"'`´“”„‟‘’‚‛«»‹›″′＂＇")
_DASHES = frozenset("\u2212\u2010\u2011\u2012\u2013\u2014\u2015\u2043\ufe58\ufe63\uff0d")
_TOKEN = re.compile(r"\w+")
_DOT_ABOVE = "\u0307"  # V̇O2 (a rate); the one diacritic the normal form drops
FUZZY_THRESHOLD = 0.9  # share of the quote's tokens that one window of the text must contain

Side = Literal["supporting", "refuting"]


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


def is_grounded(item: EvidenceItem, ledger: Mapping[str, Article]) -> bool:
    """The item cites a retrieved paper and its quote occurs in that paper's title or abstract."""
    article = ledger.get(item.pmid)
    return article is not None and _in_article(item.quote, article, find_quote)


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


@dataclass(frozen=True)
class EntryCheck:
    """One evidence entry against the episode's ledger."""

    side: Side
    pmid: str
    quote: str
    pmid_retrieved: bool  # (a) the PMID is in the ledger of papers retrieved in this episode
    quote_found_strict: bool  # (b) the quote is in that paper's title or abstract after normalisation
    quote_found_fuzzy: bool  # lenient token-level match (diagnostic; never decides anything)

    @property
    def hallucinated(self) -> bool:
        """Fails (a) or (b): the strict rule is the only one that counts."""
        return not (self.pmid_retrieved and self.quote_found_strict)


def check_entry(item: EvidenceItem, side: Side, ledger: Mapping[str, Article]) -> EntryCheck:
    """Check one evidence entry: is its PMID retrieved, is its quote in that paper (strict and fuzzy)?"""
    article = ledger.get(item.pmid)
    strict = article is not None and _in_article(item.quote, article, find_quote)
    fuzzy = strict or (article is not None and _in_article(item.quote, article, fuzzy_match))
    return EntryCheck(side=side, pmid=item.pmid, quote=item.quote, pmid_retrieved=article is not None,
                      quote_found_strict=strict, quote_found_fuzzy=fuzzy)


def ehr(entries: Iterable[EntryCheck]) -> float:
    """Evidence Hallucination Rate: hallucinated entries / cited entries; 0.0 when nothing is cited.

    A report that cites nothing has invented nothing; it earns no evidence reward either.
    """
    checks = list(entries)
    if not checks:
        return 0.0
    return sum(c.hallucinated for c in checks) / len(checks)


def _in_article(quote: str, article: Article, match) -> bool:
    # title and abstract separately: a quote may not run across the boundary between them
    return bool(match(quote, article.title)) or bool(match(quote, article.abstract))


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
