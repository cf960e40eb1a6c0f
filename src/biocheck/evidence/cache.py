"""Write-through caching of a search backend in the evidence store.

`CachedSearch(backend, store)` answers a query already in the store from the store (no
network) and otherwise asks the backend and records its answer. The same class is the seam for
the offline "replay" backend: look up the answers recorded under "entrez", and send unknown
queries to a local engine over the stored abstracts without writing anything::

    index = LocalIndex.build(store.iter_articles("pubmed"), path=index_dir)   # local engine
    replay = CachedSearch(index, store, name="entrez", write=False)

Recorded answers come back with backend="entrez"; unknown queries with the local engine's own
backend name, and nothing is written.
"""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

from biocheck.evidence.store import EvidenceStore
from biocheck.evidence.types import SearchResult

logger = logging.getLogger(__name__)


@runtime_checkable
class SearchBackend(Protocol):
    """Anything that answers `search(query, n)` with a SearchResult."""

    def search(self, query: str, n: int = 5) -> SearchResult: ...


class CachedSearch:
    """Store-first search: recorded answers are replayed, new ones are recorded."""

    def __init__(self, backend: SearchBackend, store: EvidenceStore, name: str | None = None, write: bool = True) -> None:
        self.backend = backend
        self.store = store
        # The store key for answers; defaults to the backend's own name ("entrez" for EntrezClient).
        self.name = name or getattr(backend, "name", None) or type(backend).__name__.lower()
        self.write = write
        self.hits = 0
        self.misses = 0

    def search(self, query: str, n: int = 5) -> SearchResult:
        cached = self.store.get(query, self.name)
        if cached is not None and _enough(cached, n):
            self.hits += 1
            return cached.model_copy(update={"articles": cached.articles[:n]})
        self.misses += 1
        result = self.backend.search(query, n)
        if self.write:
            # Stored under our name so the next lookup finds it; a cached answer that was too
            # short for this n is replaced by the longer one.
            self.store.put(result.model_copy(update={"backend": self.name}), replace=cached is not None)
        return result


def _enough(cached: SearchResult, n: int) -> bool:
    """A stored answer serves n results if it has n, or if it already holds every hit there is."""
    have = len(cached.articles)
    return have >= n or (cached.total is not None and have >= cached.total)
