"""The search tool behind the agent's `search_pubmed` and the backend factory.

`SearchTool.run(query, n)` returns a `ToolOutput` whose `results` are `{pmid, title, abstract}` dicts
(+ year, journal, mesh when known) in the backend's relevance order, whatever the backend (the agent's
`SearchBudget` turns it into the text the model reads; `biocheck search` prints it):

  local   the local index (data/evidence/index) over the prepared corpus, PubMed query syntax
  entrez  live NCBI E-utilities, written through to the evidence store (a repeated query is free)
  replay  the evidence store only, never the network: a recorded query returns the recorded answer,
          anything else is answered by the local engine over the stored PubMed abstracts

A malformed query (or a search the backend refuses) never raises out of the tool: it becomes a
short error text the model can read and act on, so a rollout goes on. A backend that cannot answer
at all (`BackendError`: a damaged index, E-utilities down after every retry) is raised: an episode
whose searches all failed is a failure, not a report of "no evidence".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import annotated_types as at
from pydantic import BaseModel

from biocheck.bounds import Positive
from biocheck.evidence.types import MAX_RESULTS, Article, BackendError, SearchError, SearchResult

log = logging.getLogger(__name__)

BACKENDS = ("local", "entrez", "replay")
MODES = ("boolean", "bm25")
MAX_N = MAX_RESULTS  # papers per search at most: PubMed's esearch returns no more (retmax)
MAX_ATTEMPTS = 20  # entrez: more retries than this only hides an outage behind minutes of backoff


@dataclass
class SearchConfig:
    backend: str = "local"  # local | entrez | replay
    mode: str = "boolean"  # boolean | bm25 (the local engine: local and replay's fallback)
    max_results: Annotated[int, at.Ge(1), at.Le(MAX_N)] = 5  # papers per search (the agent's budget; the paper uses 5)
    index_dir: Path = Path("data/evidence/index")
    store: Path = Path("data/evidence/evidence.sqlite")
    timeout_s: Positive = 10.0  # entrez: per read (connect, each chunk of the reply)
    max_attempts: Annotated[int, at.Ge(1), at.Le(MAX_ATTEMPTS)] = 5  # entrez: bounded retries with backoff
    deadline_s: Positive = 60.0  # entrez: one whole search (esearch + efetch, every retry, wait and read)

    def __post_init__(self) -> None:
        self.index_dir, self.store = Path(self.index_dir), Path(self.store)
        if self.backend not in BACKENDS:
            raise ValueError(f"search.backend: {self.backend!r} is not one of {list(BACKENDS)}")
        if self.mode not in MODES:
            raise ValueError(f"search.mode: {self.mode!r} is not one of {list(MODES)}")


class ModeSearch:
    """A LocalIndex fixed to one ranking mode, so every backend has `search(query, n)`."""

    def __init__(self, index, mode: str = "boolean") -> None:
        self.index, self.mode = index, mode
        self.name = index.name

    def search(self, query: str, n: int = 5) -> SearchResult:
        return self.index.search(query, n=n, mode=self.mode)


def open_backend(cfg: SearchConfig):
    """The configured backend, ready to `search(query, n)`. Opening errors are raised here (not in the tool)."""
    from biocheck.evidence.cache import CachedSearch
    from biocheck.evidence.local import LocalIndex
    from biocheck.evidence.store import PUBMED, EvidenceStore

    if cfg.backend == "local":
        return ModeSearch(LocalIndex.open(cfg.index_dir), cfg.mode)  # IndexUnavailable says how to fix it
    store = EvidenceStore(cfg.store)  # a damaged store fails here, in one line (StoreError)
    if cfg.backend == "entrez":
        from biocheck.evidence.entrez import EntrezClient

        return CachedSearch(EntrezClient(timeout=cfg.timeout_s, max_attempts=cfg.max_attempts,
                                        deadline=cfg.deadline_s), store)
    # replay: recorded entrez answers first; other queries go to a local engine over the stored
    # PubMed abstracts (built in memory: the store does not change while replaying).
    index = LocalIndex.build(store.iter_articles(PUBMED))
    if len(index) == 0:
        log.warning("replay: the evidence store %s holds no PubMed articles; only recorded queries can be "
                    "answered (warm it with --search entrez, or ingest baseline files)", cfg.store)
    return CachedSearch(ModeSearch(index, cfg.mode), store, name="entrez", write=False)


class ToolOutput(BaseModel):
    """One tool call as the agent (and the episode trace) sees it."""

    query: str
    results: list[dict[str, Any]]  # the tool contract: {pmid, title, abstract[, year, journal, mesh]}
    error: str | None = None
    articles: list[Article] = []  # the same papers with provenance (source), for the episode ledger
    backend: str | None = None
    translation: str | None = None


def article_dict(a: Article) -> dict[str, Any]:
    """{pmid, title, abstract} plus year/journal/mesh when known: the tool's result shape."""
    d: dict[str, Any] = {"pmid": a.pmid, "title": a.title, "abstract": a.abstract}
    if a.year is not None:
        d["year"] = a.year
    if a.journal:
        d["journal"] = a.journal
    if a.mesh:
        d["mesh"] = list(a.mesh)
    return d


class SearchTool:
    """`search_pubmed(query, n)`: the same contract over every backend, errors as text."""

    name = "search_pubmed"

    def __init__(self, backend, max_results: int = 5) -> None:
        self.backend = backend
        self.max_results = max_results

    def run(self, query: str, n: int | None = None) -> ToolOutput:
        n = self.max_results if n is None else n
        if not isinstance(query, str) or not query.strip():
            return ToolOutput(query=str(query or ""), results=[], error="Empty query: write a PubMed query, "
                              'e.g. "vitamin D"[tiab] AND fracture*.')
        try:
            n = int(n)
        except (TypeError, ValueError):
            n = self.max_results
        n = max(1, min(n, self.max_results))
        try:
            result = self.backend.search(query, n)
        except BackendError:
            raise
        except SearchError as e:
            return ToolOutput(query=query, results=[], error=str(e))
        except Exception as e:
            log.exception("search_pubmed(%r) failed", query)
            return ToolOutput(query=query, results=[], error=f"Search failed ({type(e).__name__}); try again "
                              "or rephrase the query.")
        articles = result.articles[:n]
        return ToolOutput(query=query, results=[article_dict(a) for a in articles], articles=articles,
                          backend=result.backend, translation=result.translation)

    def __call__(self, query: str, n: int = 5) -> list[dict[str, Any]] | str:
        out = self.run(query, n)
        return out.error if out.error is not None else out.results


def search_tool(cfg: SearchConfig) -> SearchTool:
    return SearchTool(open_backend(cfg), max_results=cfg.max_results)

