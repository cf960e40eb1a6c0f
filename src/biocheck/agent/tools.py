"""The agent's one tool: its description (the schema the model sees) and its text output.

`tool_function(papers)` is the single definition of the tool the model is offered, at inference and in
training: its JSON schema is derived from that function's signature and docstring, with the number of
papers a search returns filled in from the configured search tool (`search.max_results`).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from biocheck.pubmed.search import ToolOutput

TOOL_NAME = "search_pubmed"
MISSING_QUERY = f"Search error: {TOOL_NAME} needs a 'query' string argument."
_DESCRIPTION = """Search PubMed and return up to {papers} papers (PMID, title, abstract) in relevance order.

    Args:
        query: A PubMed Boolean query: AND, OR, NOT, parentheses, "quoted phrases", field tags such as [tiab] and [mh], and truncation with *.
    """
_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight", 9: "nine", 10: "ten"}


def papers_text(n: int) -> str:
    return _NUMBERS.get(n, str(n))


def unknown_tool(name: object) -> str:
    return f"Unknown tool {name!r}: the only tool is {TOOL_NAME}(query)."


@cache
def tool_function(papers: int):
    """`search_pubmed(query)` with a docstring that states how many papers one search returns."""

    def search_pubmed(query: str) -> str:
        raise NotImplementedError("schema only: the agent runs searches through agent.budget.SearchBudget")

    search_pubmed.__doc__ = _DESCRIPTION.format(papers=papers_text(papers))
    return search_pubmed


@cache
def _schema(papers: int) -> str:
    import json

    from transformers.utils import get_json_schema  # here: importing transformers costs 1-3 s per process

    return json.dumps(get_json_schema(tool_function(papers)))


def tool_schema(papers: int) -> dict[str, Any]:
    """The tool's JSON schema (a fresh copy: callers may not change the cached one)."""
    import json

    return json.loads(_schema(papers))


def format_results(out: ToolOutput, abstract_chars: int | None = None) -> str:
    """The text the model reads after a search: papers concatenated, or an error/empty notice."""
    if out.error:
        return f"Search error: {out.error}"
    if not out.results:
        return ("No papers found for this query. Try fewer concepts, broader terms, synonyms, or remove "
                "field tags.")
    blocks = []
    for r in out.results:
        abstract = r.get("abstract") or "(no abstract)"
        if abstract_chars and len(abstract) > abstract_chars:
            abstract = cut_abstract(abstract, abstract_chars)
        blocks.append(f"PMID: {r['pmid']}\nTitle: {r.get('title', '')}\nAbstract: {abstract}")
    return "\n\n".join(blocks)


def cut_abstract(abstract: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary (a word ending exactly at the limit is kept)."""
    head = abstract[:limit]
    if abstract[limit:limit + 1].isspace():
        return head.rstrip() + " ..."
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip() + " ..."
