"""The search budget's texts, exactly: in the LangGraph agent (agent/graph.py) and the training env (train/env.py).

Each test pins one decision: which call spends the budget, where the intervention goes, what a
refused call reads, and which calls count against the budget (every call while budget remains,
malformed ones included). The texts themselves come from agent/budget.py `SearchBudget`, which both
adapters drive; tests/agent/test_budget.py checks that they produce the same.
"""

from __future__ import annotations

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, format_results, unknown_tool
from biocheck.evidence.search import ToolOutput
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.llm.scripted import ScriptedChat
from biocheck.train.env import SearchEnv, make_env
from tests.helpers.turns import REPORT, search


class StubTool:
    """One paper per query (its PMID is the call number); the query "bad" fails like a syntax error."""

    max_results = 2

    def __init__(self) -> None:
        self.calls: list[str] = []

    def run(self, query: str, n: int | None = None) -> ToolOutput:
        self.calls.append(query)
        if query == "bad":
            return ToolOutput(query=query, results=[], error="Unbalanced parentheses in the query.")
        a = Article(pmid=str(len(self.calls)), title=f"About {query}", abstract=f"{query} was studied.", source="stub")
        return ToolOutput(query=query, results=[{"pmid": a.pmid, "title": a.title, "abstract": a.abstract}],
                          articles=[a], backend="stub")


def text_of(query: str, call_no: int) -> str:
    """What the model reads for the `call_no`-th search (1-based) of `query` with the stub."""
    a = Article(pmid=str(call_no), title=f"About {query}", abstract=f"{query} was studied.", source="stub")
    return format_results(ToolOutput(query=query, results=[{"pmid": a.pmid, "title": a.title, "abstract": a.abstract}]))


def run(turns: list[dict], max_searches: int, max_refusals: int = 2):
    tool = StubTool()
    cfg = AgentConfig(llm="scripted:<inline>", max_searches=max_searches, max_refusals=max_refusals)
    ep = Agent(ScriptedChat(turns), tool, cfg).run("A claim.")
    return ep, tool, [m["content"] for m in ep.messages if m["role"] == "tool"]


def texts(budget: int) -> tuple[str, str]:
    p = Prompts(max_searches=budget, papers_per_search=StubTool.max_results)
    return p.intervention(), p.refusal() + " " + p.intervention()


def many(*queries: str) -> dict:
    return {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}} for q in queries]}


# -- the prompt texts themselves ---------------------------------------------------------------------


def test_budget_texts_name_the_budget():
    intervention, refused = texts(4)
    assert "all 4 searches" in intervention and "Write the final report" in intervention
    assert refused.startswith("Not run: the search budget (4 searches) is spent. ")
    assert refused.endswith(intervention)


# -- the agent graph ---------------------------------------------------------------------------------


def test_only_the_search_that_spends_the_budget_carries_the_intervention():
    ep, tool, msgs = run([search("a"), search("b"), {"content": REPORT}], max_searches=2)
    intervention, _ = texts(2)
    assert msgs == [text_of("a", 1), text_of("b", 2) + "\n\n" + intervention]
    assert ep.searches == 2 and tool.calls == ["a", "b"] and ep.report.conclusion is Label.SUPPORTED


def test_no_intervention_while_budget_is_left():
    ep, _, msgs = run([search("a"), {"content": REPORT}], max_searches=2)
    assert msgs == [text_of("a", 1)] and ep.searches == 1


def test_a_turn_that_crosses_the_budget_runs_up_to_it_and_refuses_the_rest():
    ep, tool, msgs = run([many("a", "b", "c", "d"), {"content": REPORT}], max_searches=2)
    intervention, refused = texts(2)
    assert tool.calls == ["a", "b"] and ep.searches == 2
    assert msgs == [text_of("a", 1), text_of("b", 2) + "\n\n" + intervention, refused, refused]


def test_a_refused_round_reads_refusal_then_intervention_and_the_intervention_is_appended_once():
    ep, tool, msgs = run([search("a"), search("b"), search("c"), {"content": REPORT}], max_searches=1)
    intervention, refused = texts(1)
    assert msgs == [text_of("a", 1) + "\n\n" + intervention, refused, refused]
    assert tool.calls == ["a"] and ep.stop_reason == "final_answer"


GOOGLE = {"tool_calls": [{"name": "google", "arguments": {"query": "x"}}]}


def test_an_unknown_tool_costs_a_search_and_is_not_run():
    ep, tool, msgs = run([GOOGLE, search("a"), {"content": REPORT}], max_searches=2)
    intervention, _ = texts(2)
    assert msgs == ["Unknown tool 'google': the only tool is search_pubmed(query).", text_of("a", 1) + "\n\n" + intervention]
    assert ep.searches == 2 and tool.calls == ["a"] and ep.tool_errors == [msgs[0]]
    assert [q.query for q in ep.queries] == ["a"]  # the query log holds searches that ran, not malformed calls


def test_an_unknown_tool_can_spend_the_budget_and_carries_the_intervention():
    ep, tool, msgs = run([GOOGLE, search("a"), {"content": REPORT}], max_searches=1)
    intervention, refused = texts(1)
    assert msgs == [unknown_tool("google") + "\n\n" + intervention, refused]
    assert ep.searches == 1 and tool.calls == [] and ep.tool_errors == [unknown_tool("google")]
    assert ep.report.conclusion is Label.SUPPORTED and ep.stop_reason == "final_answer"


def test_after_the_budget_an_unknown_tool_in_the_same_turn_is_refused_like_any_call():
    turn = {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": "a"}},
                           {"name": "google", "arguments": {"query": "x"}}]}
    ep, _, msgs = run([turn, {"content": REPORT}], max_searches=1)
    intervention, refused = texts(1)
    assert msgs == [text_of("a", 1) + "\n\n" + intervention, refused] and ep.tool_errors == []


def test_an_unknown_tool_in_a_later_round_is_refused_like_any_call():
    ep, _, msgs = run([search("a"), GOOGLE, {"content": REPORT}], max_searches=1)
    assert msgs[1] == texts(1)[1] and ep.tool_errors == []


def test_a_failed_search_costs_budget_and_carries_the_intervention():
    ep, tool, msgs = run([search("bad"), {"content": REPORT}], max_searches=1)
    intervention, _ = texts(1)
    assert msgs == ["Search error: Unbalanced parentheses in the query.\n\n" + intervention]
    assert ep.searches == 1 and ep.queries[0].error and ep.tool_errors == ["Unbalanced parentheses in the query."]


def test_a_call_without_a_query_costs_budget_and_is_not_run():
    turns = [{"tool_calls": [{"name": "search_pubmed", "arguments": {}}]}, search("a"), {"content": REPORT}]
    ep, tool, msgs = run(turns, max_searches=2)
    intervention, _ = texts(2)
    assert msgs == [MISSING_QUERY, text_of("a", 1) + "\n\n" + intervention]
    assert ep.searches == 2 and tool.calls == ["a"]


def test_a_zero_budget_refuses_the_first_call():
    ep, tool, msgs = run([search("a"), {"content": REPORT}], max_searches=0)
    _, refused = texts(0)
    assert msgs == [refused] and tool.calls == [] and ep.searches == 0
    assert ep.report.conclusion is Label.SUPPORTED and ep.stop_reason == "final_answer"


@pytest.mark.parametrize("max_refusals", [0, 1, 2])
def test_the_episode_ends_after_max_refusals_refused_rounds(max_refusals):
    ep, tool, msgs = run([search("a")] + [search("again")] * 5, max_searches=1, max_refusals=max_refusals)
    intervention, refused = texts(1)
    assert msgs == [text_of("a", 1) + "\n\n" + intervention] + [refused] * max_refusals
    assert ep.stop_reason == "budget_refusals_exhausted" and tool.calls == ["a"]
    assert ep.llm_calls == 1 + max_refusals + 1  # the search, each refused round, the call that ends it
    assert ep.final_text == "" and ep.report.conclusion is None


# -- the training environment -----------------------------------------------------------------------


def env(budget: int) -> tuple[SearchEnv, StubTool]:
    tool = StubTool()
    return make_env(tool, Prompts(max_searches=budget, papers_per_search=tool.max_results), budget), tool


def test_env_appends_the_intervention_to_the_spending_search_and_refuses_after():
    e, tool = env(2)
    intervention, refused = texts(2)
    assert e.search_pubmed("a") == text_of("a", 1)
    assert e.search_pubmed("b") == text_of("b", 2) + "\n\n" + intervention
    assert e.search_pubmed("c") == refused and e.search_pubmed(query="d") == refused
    b = e.budget
    assert tool.calls == ["a", "b"] and b.searches == 2 and b.query_texts() == ["a", "b"] and set(b.ledger) == {"1", "2"}
    assert b.refused == 2


def test_env_call_without_a_query_costs_budget_and_can_spend_it():
    e, tool = env(1)
    intervention, refused = texts(1)
    assert e.search_pubmed(q="x") == MISSING_QUERY + "\n\n" + intervention
    assert e.budget.errors == [MISSING_QUERY] and e.budget.searches == 1 and tool.calls == [] and e.budget.queries == []
    assert e.search_pubmed("a") == refused


def test_env_failed_search_costs_budget_and_is_recorded():
    e, _ = env(1)
    intervention, _ = texts(1)
    assert e.search_pubmed("bad") == "Search error: Unbalanced parentheses in the query.\n\n" + intervention
    b = e.budget
    assert b.errors == ["Unbalanced parentheses in the query."] and b.query_texts() == ["bad"] and b.ledger == {}


def test_env_zero_budget_refuses_the_first_call():
    e, tool = env(0)
    assert e.search_pubmed("a") == texts(0)[1] and tool.calls == [] and e.budget.searches == 0
