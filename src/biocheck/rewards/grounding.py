"""Strict evidence grounding: does an evidence entry cite a retrieved paper, and is its quote in it?

The quote rule itself (normal forms, `find_quote`, the diagnostic `fuzzy_match`) is
`biocheck.agent.report.quotes`, shared with the renderer. `check_entry` applies it to one evidence entry
(PMID retrieved? quote found strictly / fuzzily?); only the strict rule decides `hallucinated`, and
`ehr` turns a report's entry checks into its Evidence Hallucination Rate. docs/rewards.md lists the rules."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from biocheck.agent.report.quotes import find_quote, fuzzy_match
from biocheck.agent.report.schema import EvidenceItem
from biocheck.evidence.types import Article

Side = Literal["supporting", "refuting"]


def is_grounded(item: EvidenceItem, ledger: Mapping[str, Article]) -> bool:
    """The item cites a retrieved paper and its quote occurs in that paper's title or abstract."""
    article = ledger.get(item.pmid)
    return article is not None and _in_article(item.quote, article, find_quote)


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


