"""The evidence refresh scenario: a fake E-utilities corpus where papers are published and retracted between
runs, the queries recorded, and the environment it runs in (`refresh_env`)."""

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
def refresh_env(monkeypatch):
    """Autouse in the modules that import it: no NCBI settings of the developer, a key (10 requests/s), no tracking."""
    for name in ("NCBI_API_KEY", "NCBI_EMAIL", "NCBI_TOOL", "BIOCHECK_EUTILS_URL", "BIOCHECK_RATELIMIT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NCBI_API_KEY", KEY)  # 10 requests/s instead of 3: the tests wait less
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")


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
