"""The agent's tool step as a TRL environment: one instance per rollout, a thin adapter.

TRL's GRPOTrainer runs the multi-turn tool loop itself (`environment_factory`); this class hands each
`search_pubmed` call to a fresh `SearchBudget` per episode (agent/budget.py), the object the LangGraph
agent uses too: the same tool schema (from the same `Prompts`), result texts, budget, intervention and
refusal, ledger and query log. The rewards read `env.budget`. tests/train/test_env_parity.py drives both
adapters with the same calls and compares everything they produce.
"""

from __future__ import annotations

import inspect
from functools import cache
from typing import Any

from biocheck.agent.budget import SearchBudget
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import TOOL_NAME, tool_function


class SearchEnv:
    """search_pubmed with a budget; `reset(**row)` starts a new episode for one dataset row.

    TRL exposes every public method of the class as a tool, so `search_pubmed` is the only one.
    """

    def __init__(self, tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None) -> None:
        self._tool, self._prompts = tool, prompts
        self._max, self._chars = max_searches, abstract_chars
        self.reset()

    def reset(self, **row: Any) -> None:
        self.row = row
        self.budget = SearchBudget(self._tool, self._prompts, self._max, self._chars)
        return None  # nothing is added to the prompt: the dataset row already holds it

    def search_pubmed(self, query: str | None = None, **extra: Any) -> str:
        # TRL calls this with the model's arguments as keywords: a call without a (string) query must
        # get the agent's error text, not a TypeError (the signature the model sees is the tool's).
        args = dict(extra)
        if query is not None:
            args["query"] = query
        return self.budget.call(TOOL_NAME, args)


@cache
def env_class(papers: int) -> type[SearchEnv]:
    """SearchEnv whose `search_pubmed` has the agent tool's signature and description for `papers`."""
    spec = tool_function(papers)

    def search_pubmed(self, query: str | None = None, **extra: Any) -> str:
        return SearchEnv.search_pubmed(self, query, **extra)

    search_pubmed.__doc__ = spec.__doc__
    search_pubmed.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
         *inspect.signature(spec).parameters.values()],
        return_annotation=inspect.signature(spec).return_annotation)
    search_pubmed.__annotations__ = dict(spec.__annotations__)
    return type("SearchEnv", (SearchEnv,), {"search_pubmed": search_pubmed, "__doc__": SearchEnv.__doc__})


class ToolTable(dict):
    """TRL's per-rollout tool dict with every other name routed to the env's budget.

    TRL answers a call to an unknown tool itself ({"error": "Tool google not found."}) and never tells the
    environment, so in training such a call would cost no search and never bring the intervention, while
    the agent charges it and answers "Unknown tool ...". With this table the env's SearchBudget decides,
    exactly as in the agent (`BioCheckGRPOTrainer` installs it before each tool round).
    """

    def __init__(self, tools: dict[str, Any], env: SearchEnv) -> None:
        super().__init__(tools)
        self.env = env

    def __contains__(self, name: object) -> bool:
        return True

    def __missing__(self, name: str):
        return lambda **args: self.env.budget.call(name, args)


def make_env(tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None) -> SearchEnv:
    return env_class(prompts.papers_per_search)(tool, prompts, max_searches, abstract_chars)


def env_factory(tool, prompts: Prompts, max_searches: int, abstract_chars: int | None = None):
    """A zero-argument factory for `GRPOTrainer(environment_factory=...)`."""
    return lambda: make_env(tool, prompts, max_searches, abstract_chars)
