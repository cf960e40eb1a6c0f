"""The training environment's tool step: budget, texts and ledger, pinned with a scripted search tool.

(tests/train/test_env_parity.py renders whole episodes against the LangGraph agent; here every decision is checked
one call at a time, with the exact text the model reads.)
"""

from __future__ import annotations

import pytest

from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, format_results
from biocheck.evidence.search import ToolOutput, article_dict
from biocheck.evidence.types import Article
from biocheck.train.env import SearchEnv, env_class, env_factory, make_env

A1 = Article(pmid="1", title="Vitamin D and fractures", abstract="Vitamin D reduced fractures. " * 20,
             source="corpus:test")
A2 = Article(pmid="2", title="Aspirin and bleeding", abstract="Aspirin raised bleeding.", source="corpus:test")
A1_EDITED = A1.model_copy(update={"title": "Vitamin D and fractures (erratum)"})


def hit(query: str, *articles: Article, error: str | None = None) -> ToolOutput:
    return ToolOutput(query=query, results=[article_dict(a) for a in articles], articles=list(articles), error=error)


class ScriptedTool:
    """Answers each query from a table (no papers when unknown) and records every query it ran."""

    def __init__(self, table: dict[str, ToolOutput]):
        self.table, self.ran = table, []

    def run(self, query: str) -> ToolOutput:
        self.ran.append(query)
        return self.table.get(query) or hit(query)


TABLE = {"vitamin D AND fracture*": hit("vitamin D AND fracture*", A1, A2),
         "vitamin D[ti]": hit("vitamin D[ti]", A1_EDITED),
         "broken (": hit("broken (", error="unbalanced parentheses")}


def make(budget: int, chars: int | None = 60) -> tuple[SearchEnv, ScriptedTool, Prompts]:
    tool, prompts = ScriptedTool(TABLE), Prompts(max_searches=budget)
    return make_env(tool, prompts, budget, abstract_chars=chars), tool, prompts


def test_budget_the_spending_search_carries_the_intervention_and_later_calls_are_refused():
    env, tool, prompts = make(budget=2)
    first = env.search_pubmed("vitamin D AND fracture*")
    assert first == format_results(TABLE["vitamin D AND fracture*"], 60)  # no reminder before the budget is spent
    second = env.search_pubmed("coffee")
    assert second == format_results(hit("coffee"), 60) + "\n\n" + prompts.intervention()
    third = env.search_pubmed("aspirin")
    assert third == prompts.refusal() + " " + prompts.intervention()
    assert tool.ran == ["vitamin D AND fracture*", "coffee"]  # the refused call never reaches the tool
    assert env.budget.query_texts() == ["vitamin D AND fracture*", "coffee"] and env.budget.searches == 2
    assert env.search_pubmed("aspirin") == third  # every later call: the same refusal
    assert env.budget.refused == 2 and env.budget.errors == []


@pytest.mark.parametrize("args", [{}, {"query": None}, {"query": 5}, {"q": "vitamin D"}])
def test_a_call_without_a_string_query_spends_a_search_but_runs_nothing(args):
    env, tool, prompts = make(budget=2)
    assert env.search_pubmed(**args) == MISSING_QUERY
    b = env.budget
    assert b.searches == 1 and b.queries == [] and tool.ran == [] and b.errors == [MISSING_QUERY]
    # it spent one of the two searches: the next one is the last, and says so
    assert env.search_pubmed("coffee").endswith("\n\n" + prompts.intervention())
    spent, _, one = make(budget=1)
    assert spent.search_pubmed() == MISSING_QUERY + "\n\n" + one.intervention()


def test_a_backend_error_is_a_spent_executed_search():
    env, tool, _ = make(budget=3)
    assert env.search_pubmed("broken (") == "Search error: unbalanced parentheses"
    b = env.budget
    assert b.query_texts() == ["broken ("] and b.errors == ["unbalanced parentheses"] and b.searches == 1
    assert b.queries[0].error == "unbalanced parentheses" and b.ledger == {}


def test_extra_arguments_are_ignored_and_the_query_runs():
    env, tool, _ = make(budget=3)
    assert env.search_pubmed(query="coffee", max_results=50) == format_results(hit("coffee"), 60)
    assert tool.ran == ["coffee"] and env.budget.errors == []


def test_ledger_keeps_every_paper_once_as_first_retrieved():
    env, _, _ = make(budget=3)
    env.search_pubmed("vitamin D AND fracture*")
    env.search_pubmed("vitamin D[ti]")  # pmid 1 again, another version of the record
    assert env.budget.ledger == {"1": A1, "2": A2}  # the first copy stays: the model was shown that one first


def test_abstract_chars_cut_the_text_the_model_reads():
    cut, _, _ = make(budget=3, chars=60)
    whole, _, _ = make(budget=3, chars=None)
    short = cut.search_pubmed("vitamin D AND fracture*")
    full = whole.search_pubmed("vitamin D AND fracture*")
    assert A1.abstract.strip() in full and A1.abstract.strip() not in short
    assert short == format_results(TABLE["vitamin D AND fracture*"], 60)
    assert full == format_results(TABLE["vitamin D AND fracture*"], None)


def test_reset_starts_a_new_episode_with_a_full_budget():
    env, tool, prompts = make(budget=1)
    env.search_pubmed("vitamin D AND fracture*")
    env.search_pubmed()
    assert env.reset(claim="c", label="REFUTED") is None  # nothing is added to the prompt
    b = env.budget
    assert (b.searches, b.refused, b.queries, b.ledger, b.errors, env.row) == (0, 0, [], {}, [],
                                                                               {"claim": "c", "label": "REFUTED"})
    assert env.search_pubmed("coffee") == format_results(hit("coffee"), 60) + "\n\n" + prompts.intervention()


def test_factory_gives_independent_environments():
    tool, prompts = ScriptedTool(TABLE), Prompts(max_searches=2)
    factory = env_factory(tool, prompts, 2, abstract_chars=60)
    a, b = factory(), factory()
    assert a is not b
    a.search_pubmed("vitamin D AND fracture*")
    assert (b.budget.searches, b.budget.queries, b.budget.ledger) == (0, [], {})
    assert a.budget is not b.budget and a.budget.searches == 1


@pytest.mark.parametrize("papers", [3, 5])
def test_the_tool_schema_is_the_agents(papers):
    from transformers.utils import get_json_schema

    prompts = Prompts(max_searches=2, papers_per_search=papers)
    env = make_env(ScriptedTool(TABLE), prompts, 2)
    assert get_json_schema(env.search_pubmed) == prompts.tool_schema()
    assert type(env) is env_class(papers) and isinstance(env, SearchEnv)


def test_trl_sees_exactly_one_tool_and_reset():
    import inspect

    env, _, _ = make(budget=1)
    # GRPOTrainer offers every public function of the class (but reset and get_reward) as a tool
    public = [n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction) if not n.startswith("_")]
    assert public == ["reset", "search_pubmed"]
