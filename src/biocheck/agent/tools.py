"""The agent's one tool: its description (the schema the model sees) and its text output.

`tool_function(papers)` is the single definition of the tool the model is offered, at inference and in
training: its JSON schema is derived from that function's signature and docstring, with the number of
papers a search returns filled in from the configured search tool (`search.max_results`).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from biocheck.evidence.search import ToolOutput
from biocheck.text import split_sentences

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
    """The text the model reads after a search: papers concatenated, or an error/empty notice. An abstract
    longer than `abstract_chars` is shown as its `excerpt` for the query."""
    if out.error:
        return f"Search error: {out.error}"
    if not out.results:
        return ("No papers found for this query. Try fewer concepts, broader terms, synonyms, or remove "
                "field tags.")
    blocks = []
    for r in out.results:
        abstract = r.get("abstract") or "(no abstract)"
        if abstract_chars and len(abstract) > abstract_chars:
            abstract = excerpt(abstract, abstract_chars, out.query)
        blocks.append(f"PMID: {r['pmid']}\nTitle: {r.get('title', '')}\nAbstract: {abstract}")
    return "\n\n".join(blocks)


def cut_abstract(abstract: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary (a word ending exactly at the limit is kept)."""
    head = abstract[:limit]
    if abstract[limit:limit + 1].isspace():
        return head.rstrip() + " ..."
    cut = head.rsplit(" ", 1)[0] if " " in head else head
    return cut.rstrip() + " ..."


_WORD = re.compile(r"[a-z0-9][a-z0-9-]*")
_QUERY_WORD = re.compile(r"[a-z0-9][a-z0-9-]*\*?")
_OPERATORS = frozenset({"and", "or", "not"})


def query_words(query: str) -> set[str]:
    """The words a Boolean query searches for: no operators, no field tags; `word*` keeps its star (a prefix)."""
    text = re.sub(r"\[[^\]]*\]", " ", (query or "").lower())
    return {w for w in _QUERY_WORD.findall(text) if w not in _OPERATORS and len(w.rstrip("*")) >= 3}


def _hits(sentence: str, words: set[str]) -> int:
    tokens = set(_WORD.findall(sentence.lower()))
    return sum(1 for w in words
               if (any(t.startswith(w[:-1]) for t in tokens) if w.endswith("*") else w in tokens))


def excerpt(abstract: str, limit: int, query: str = "") -> str:
    """At most about `limit` characters of `abstract` for the model to read, chosen for `query`.

    Whole sentences, those with the most query words first (ties: later first), until the budget is spent,
    shown in the abstract's order with " ... " where sentences were left out. Why not the first `limit`
    characters: a finding usually sits in the results and conclusions at the end, and a model can only
    quote what it is shown: with 400 characters, 113 of the 125 rationale sentences of the smol profile's
    SciFact train claims were never shown (docs/training.md). With no query word in the abstract (or one
    sentence longer than the budget) it falls back to the first `limit` characters (`cut_abstract`).
    """
    if len(abstract) <= limit:
        return abstract
    sentences, words = split_sentences(abstract), query_words(query)
    score = [_hits(s, words) for s in sentences]
    if len(sentences) < 2 or not any(score):
        return cut_abstract(abstract, limit)
    keep, used = [], 0
    for i in sorted(range(len(sentences)), key=lambda i: (-score[i], -i)):
        if used + len(sentences[i]) + 1 <= limit:
            keep.append(i)
            used += len(sentences[i]) + 1
    if not any(score[i] for i in keep):  # every matching sentence is longer than the budget
        return cut_abstract(abstract, limit)
    keep.sort()
    parts = ["..."] if keep[0] > 0 else []
    for j, i in enumerate(keep):
        if j and i != keep[j - 1] + 1:
            parts.append("...")
        parts.append(sentences[i])
    if keep[-1] < len(sentences) - 1:
        parts.append("...")
    return " ".join(parts)
