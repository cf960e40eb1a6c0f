"""Scripted model turns: a grounded report, a search call, and a table-backed search tool whose answers the
tests fix (`TABLE`, `TableTool`)."""

from __future__ import annotations

from biocheck.evidence.search import ToolOutput, article_dict
from biocheck.evidence.types import Article

REPORT = """## Supporting evidence
- PMID: 101
  Quote: "Vitamin D supplementation reduced hip fractures in older adults."
  Context: a trial in the claim's population
## Refuting evidence
None
## Summary
Support reasons: a randomised trial found fewer fractures.
Refutation reasons: none found.
Consensus and context check: one study, older adults.
Justification: direct evidence for the claim.
## Conclusion
SUPPORTED
"""


def search(q: str) -> dict:
    return {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}}]}


A1 = Article(pmid="1", title="Vitamin D and fractures", abstract="Vitamin D reduced fractures.", source="t")


A1_EDITED = A1.model_copy(update={"title": "Vitamin D and fractures (erratum)"})


A2 = Article(pmid="2", title="Aspirin and bleeding", abstract="Aspirin raised bleeding.", source="t")


A3 = Article(pmid="3", title="Coffee and sleep", abstract="Coffee shortened sleep.", source="t")


A4 = Article(pmid="4", title="Statins and muscle", abstract="Statins caused myalgia.", source="t")


class TableTool:
    """Answers each query from a table (no papers when unknown), like a backend with a query translation."""

    max_results = 3

    def __init__(self, table: dict[str, list[Article]]) -> None:
        self.table, self.ran = table, []

    def run(self, query: str, n: int | None = None) -> ToolOutput:
        self.ran.append(query)
        arts = self.table.get(query, [])
        return ToolOutput(query=query, results=[article_dict(a) for a in arts], articles=arts, backend="table",
                          translation=f"{query}[All Fields]")


TABLE = {"vit": [A1, A2], "vit2": [A1_EDITED], "more": [A1_EDITED, A3], "new": [A4]}


def calls(*queries: str) -> dict:
    return {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}} for q in queries]}
