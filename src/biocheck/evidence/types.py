"""Records that cross the evidence layer's boundary (search backends, store, agent tool)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from biocheck.errors import BioCheckError

MAX_RESULTS = 10_000  # papers per search at most, every backend: PubMed's esearch returns no more (retmax)


class Article(BaseModel):
    """One paper as the agent sees it.

    `pmid` is the PubMed id for PubMed-backed searches, or the corpus's own document id when the
    corpus is not PubMed (the SciFact corpus uses S2ORC ids).
    """

    pmid: str
    title: str = ""
    abstract: str = ""  # structured abstracts keep their section labels ("BACKGROUND: ...")
    year: int | None = None
    journal: str | None = None
    mesh: list[str] = Field(default_factory=list)
    source: str = "unknown"  # e.g. "entrez", "corpus:scifact", "baseline:pubmed25n0001.xml.gz"


class SearchError(BioCheckError):
    """A search that could not be answered (malformed query, backend down, ...).

    The agent's tool turns it into a short text for the model to read (except a BackendError).
    """


class BackendError(SearchError):
    """The backend itself could not answer (a damaged index, E-utilities down after every retry): not the
    query's fault, and not "no evidence". The search tool lets it through, so the episode fails (exit 1 in
    `biocheck check`, a failed claim in a batch or an evaluation) instead of ending in NOT ENOUGH INFORMATION.
    """


class SearchResult(BaseModel):
    """One answered query: what every backend returns and what the evidence store keeps."""

    query: str
    backend: str  # "entrez" | "local" | "replay" | ...
    articles: list[Article] = Field(default_factory=list)  # in the backend's relevance order
    translation: str | None = None  # esearch's QueryTranslation (entrez only)
    searched_at: str | None = None  # ISO-8601 UTC time the backend answered
    total: int | None = None  # hits the backend reported (esearch Count), when known
