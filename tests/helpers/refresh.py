"""Shared by several test modules (moved from tests/test_evidence_refresh.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from biocheck.evidence.search import SearchConfig, search_tool
from tests.helpers.fake_eutils import FakeArticle, FakeEutils

KEY = "refresh-KEY-0123456789abcdef"


N = 5  # papers per search


QUERIES = ["aspirin", "vitamin d", "coffee mortality", "metformin", "statin"]


NEW = FakeArticle("39000001", "Aspirin, coffee and mortality: a new trial of aspirin.",
                  "Daily aspirin with coffee lowered mortality; aspirin was well tolerated.", year=2026,
                  mesh=["Aspirin", "Coffee", "Mortality"])


RETRACTED = "31000005"  # an aspirin editorial that PubMed no longer returns


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for name in ("NCBI_API_KEY", "NCBI_EMAIL", "NCBI_TOOL", "BIOCHECK_EUTILS_URL", "BIOCHECK_RATELIMIT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NCBI_API_KEY", KEY)  # 10 requests/s instead of 3: the tests wait less
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")


@pytest.fixture
def server(monkeypatch):
    with FakeEutils() as fake:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", fake.url)
        yield fake


def record(store: Path, queries: list[str]) -> dict[str, list[str]]:
    """Ask `queries` through the entrez backend, as the agent would (answers land in the store)."""
    tool = search_tool(SearchConfig(backend="entrez", store=store, max_results=N))
    try:
        return {q: [r["pmid"] for r in tool(q)] for q in queries}
    finally:
        tool.backend.store.close()


def publish_and_retract(server: FakeEutils) -> None:
    server.corpus[NEW.pmid] = NEW
    del server.corpus[RETRACTED]
