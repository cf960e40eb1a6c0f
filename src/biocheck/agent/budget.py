"""The agent's tool step, written once: one `SearchBudget` per episode.

It owns everything that happens when the model calls a tool: the search budget, the texts the model
reads back (search results, a missing query, an unknown tool, a refused call, the intervention that
asks for the report), the ledger of retrieved papers and the query log. The LangGraph tools node
(agent/graph.py), the TRL environment (train/env.py) and the evaluation baselines are thin adapters
that hand it the model's calls; none of them decides anything about the budget or spells out a text.

Rules (docs/agent.md):
- every call while budget remains costs one search, malformed ones too (no query string, another
  tool's name): a model that only ever calls a tool that does not exist still reaches the report;
- the call that spends the last search gets the intervention appended to its result;
- a call after that is not run; it reads the refusal followed by the intervention.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, TOOL_NAME, format_results, unknown_tool
from biocheck.evidence.types import Article


class QueryRecord(BaseModel):
    """One search that ran: the query, what it found, and how (kept in traces; R_search reads the queries)."""

    query: str
    pmids: list[str] = Field(default_factory=list)
    n_results: int = 0
    error: str | None = None
    backend: str | None = None
    translation: str | None = None


def check_budget(prompts: Prompts, max_searches: int) -> None:
    """The texts must state the budget that is enforced (an agent, a budget and the TRL environment check it)."""
    if prompts.max_searches != max_searches:
        raise ValueError(f"the prompts state {prompts.max_searches} searches, the budget is {max_searches}")


# Told of each call that costs a search, as it ends: (its number, the budget, the search's record, or None for a
# malformed call). A status line for a person (`check` on stderr); it never changes what the model reads.
OnSearch = Callable[[int, int, QueryRecord | None], None]


class SearchBudget:
    """One episode's searches: `call(name, args)` -> the text the model reads back."""

    def __init__(self, tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, on_search: OnSearch | None = None) -> None:
        check_budget(prompts, max_searches)
        self.tool, self.prompts = tool, prompts
        self.max_searches, self.abstract_chars = max_searches, abstract_chars
        self._clock = clock
        self._on_search = on_search
        self.searches = 0  # calls that cost a search (malformed ones included)
        self.refused = 0  # calls refused after the budget was spent
        self.queries: list[QueryRecord] = []  # searches that ran, in order
        self.ledger: dict[str, Article] = {}  # every paper retrieved, by PMID (first retrieval wins)
        self.errors: list[str] = []  # search errors (the backend's text) and malformed-call texts
        self.search_seconds = 0.0
        # wall-clock start and end (ns since the epoch) of each search in `queries`: a trace's spans (agent/tracing.py)
        self.search_times: list[tuple[int, int]] = []

    @property
    def exhausted(self) -> bool:
        return self.searches >= self.max_searches

    def call(self, name: object, args: object) -> str:
        """Handle one tool call of the model; return the tool message's text."""
        if self.exhausted:
            self.refused += 1
            return self.refusal()
        self.searches += 1
        query = args.get("query") if isinstance(args, dict) else None
        record = None
        if name != TOOL_NAME:
            text = unknown_tool(name)
            self.errors.append(text)
        elif not isinstance(query, str):
            text = MISSING_QUERY
            self.errors.append(text)
        else:
            text = self._search(query)
            record = self.queries[-1]
        if self._on_search is not None:
            self._on_search(self.searches, self.max_searches, record)
        if self.exhausted:
            text += "\n\n" + self.prompts.intervention()
        return text

    def refusal(self) -> str:
        """What a call after the budget reads: it was not run, and the report is due."""
        return self.prompts.refusal() + " " + self.prompts.intervention()

    def query_texts(self) -> list[str]:
        return [q.query for q in self.queries]

    def _search(self, query: str) -> str:
        t0, began = self._clock(), time.time_ns()
        out = self.tool.run(query)
        self.search_seconds += self._clock() - t0
        self.search_times.append((began, time.time_ns()))
        self.queries.append(QueryRecord(query=query, pmids=[r["pmid"] for r in out.results], error=out.error,
                                        n_results=len(out.results), backend=out.backend,
                                        translation=out.translation))
        for a in out.articles:
            self.ledger.setdefault(a.pmid, a)
        if out.error:
            self.errors.append(out.error)
        return format_results(out, self.abstract_chars)
