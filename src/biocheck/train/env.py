"""The agent's tool loop as a TRL environment: one instance per rollout.

TRL's GRPOTrainer runs the multi-turn tool loop itself (`environment_factory`); this class gives it
exactly what the LangGraph agent gives the model: the same `search_pubmed` tool (name, signature,
docstring -> the same JSON schema), the same result text (`format_results`), the same budget with the
same intervention text appended to the result of the search that spends it, and the same refusal for
calls beyond it. It also keeps the per-rollout ledger and query log that the rewards read.
"""

from __future__ import annotations

import inspect
from typing import Any

from biocheck.agent import tools as agent_tools
from biocheck.agent.prompts import Prompts
from biocheck.pubmed.types import Article


class SearchEnv:
    """search_pubmed with a budget; `reset(**row)` starts a new episode for one dataset row."""

    def __init__(self, tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None) -> None:
        self._tool = tool
        self._prompts = prompts
        self._max = max_searches
        self._chars = abstract_chars
        self.reset()

    def reset(self, **row: Any) -> None:
        self.row = row
        self.searches = 0
        self.queries: list[str] = []
        self.ledger: dict[str, Article] = {}
        self.errors: list[str] = []
        return None  # nothing is added to the prompt: the dataset row already holds it

    def search_pubmed(self, query: str | None = None, **_: Any) -> str:
        # TRL calls this with the model's arguments as keywords: a call without a (string) query must
        # get the agent's error text, not a TypeError (its signature below is the tool's).
        if self.searches >= self._max:
            return self._prompts.refusal() + " " + self._prompts.intervention()
        if not isinstance(query, str):
            self.searches += 1
            self.errors.append(agent_tools.MISSING_QUERY)
            return self._budget_note(agent_tools.MISSING_QUERY)
        out = self._tool.run(query)
        self.searches += 1
        self.queries.append(query)
        for a in out.articles:
            self.ledger.setdefault(a.pmid, a)
        if out.error:
            self.errors.append(out.error)
        return self._budget_note(agent_tools.format_results(out, self._chars))

    def _budget_note(self, text: str) -> str:
        if self.searches == self._max:
            text += "\n\n" + self._prompts.intervention()
        return text


# The schema the model sees comes from the signature and docstring: the agent tool's, word for word.
SearchEnv.search_pubmed.__doc__ = agent_tools.search_pubmed.__doc__
SearchEnv.search_pubmed.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
     *inspect.signature(agent_tools.search_pubmed).parameters.values()],
    return_annotation=inspect.signature(agent_tools.search_pubmed).return_annotation)
SearchEnv.search_pubmed.__annotations__ = dict(agent_tools.search_pubmed.__annotations__)


def env_factory(tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None):
    """A zero-argument factory for `GRPOTrainer(environment_factory=...)`."""
    return lambda: SearchEnv(tool, prompts, max_searches, abstract_chars)
