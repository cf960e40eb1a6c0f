"""The agent's one tool: its signature/description (the schema the model sees) and its text output.

`search_pubmed` below is the single definition of the tool the model is offered, at inference and
in training: its JSON schema is derived from this signature and docstring.
"""

from __future__ import annotations

from typing import Any

from transformers.utils import get_json_schema

from biocheck.pubmed.search import ToolOutput


def search_pubmed(query: str) -> str:
    """Search PubMed and return up to five papers (PMID, title, abstract) in relevance order.

    Args:
        query: A PubMed Boolean query: AND, OR, NOT, parentheses, "quoted phrases", field tags such as [tiab] and [mh], and truncation with *.
    """
    raise NotImplementedError("schema only: the agent runs searches through biocheck.pubmed.search.SearchTool")


TOOL_NAME = "search_pubmed"
MISSING_QUERY = f"Search error: {TOOL_NAME} needs a 'query' string argument."
TOOL_SCHEMA: dict[str, Any] = get_json_schema(search_pubmed)


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
            abstract = abstract[:abstract_chars].rsplit(" ", 1)[0] + " ..."
        blocks.append(f"PMID: {r['pmid']}\nTitle: {r.get('title', '')}\nAbstract: {abstract}")
    return "\n\n".join(blocks)
