"""The agent graph itself (agent/graph.py), driven directly: the state it returns, message fields, timing.

tests/agent/test_budget_texts.py pins the texts the model reads through `Agent.run`; here the compiled graph
is invoked on a bare state (only messages) with the episode's SearchBudget in the run config, so every
default and every state field it keeps is checked, and what the budget recorded (query log with
backend/translation, ledger with its first-retrieval rule, counters) is read from the budget itself.
"""

from __future__ import annotations

import functools
import math
import time
from types import SimpleNamespace

import pytest

from biocheck.agent import episode as episode_mod
from biocheck.agent import graph as graph_mod
from biocheck.agent.budget import QueryRecord, SearchBudget
from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.graph import GraphConfig, build_graph, recursion_limit
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, format_results, unknown_tool
from biocheck.evidence.types import Article
from biocheck.llm.base import AssistantTurn, LLMError, ToolCall
from biocheck.llm.scripted import ScriptedChat
from tests.helpers.turns import A1, A1_EDITED, A2, A3, REPORT, TABLE, TableTool, calls

# nothing of the budget's (llm_times: when each model turn ran, for a trace's spans)
STATE_KEYS = {"messages", "refusals", "llm_calls", "llm_seconds", "llm_times", "stop_reason"}


def bare_state(claim: str = "A claim.") -> dict:
    """What a caller must give the graph at least: the opening messages, no counters."""
    return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": claim}]}


def run_graph(llm, tool, max_searches: int, max_refusals: int, abstract_chars: int | None = None,
              prompts: Prompts | None = None):
    """Invoke a compiled graph once, as Agent.run does: bare state, a fresh budget in the run config."""
    cfg = GraphConfig(max_searches=max_searches, max_refusals=max_refusals)
    prompts = prompts or Prompts(max_searches=max_searches, papers_per_search=tool.max_results)
    budget = SearchBudget(tool, prompts, max_searches, abstract_chars)
    state = build_graph(llm, cfg, prompts).invoke(bare_state(), {"recursion_limit": recursion_limit(cfg),
                                                                 "configurable": {"budget": budget}})
    return state, budget, prompts


def scripted(turns, tool, max_searches: int, max_refusals: int, abstract_chars: int | None = None):
    return run_graph(ScriptedChat(turns), tool, max_searches, max_refusals, abstract_chars)


def test_bare_state_through_budget_refusals_and_stop():
    tool = TableTool(TABLE)
    turns = [calls("vit", "vit2"), calls("more"), calls("again"), calls("again")]
    state, budget, prompts = scripted(turns, tool, max_searches=3, max_refusals=1)
    refused = prompts.refusal() + " " + prompts.intervention()
    assert tool.ran == ["vit", "vit2", "more"]
    assert set(state) == STATE_KEYS  # searches, ledger and query log live in the budget, not the graph state
    assert (budget.searches, budget.refused, state["refusals"], state["llm_calls"]) == (3, 1, 1, 4)
    assert state["stop_reason"] == "budget_refusals_exhausted"
    assert budget.queries == [
        QueryRecord(query="vit", pmids=["1", "2"], n_results=2, backend="table", translation="vit[All Fields]"),
        QueryRecord(query="vit2", pmids=["1"], n_results=1, backend="table", translation="vit2[All Fields]"),
        QueryRecord(query="more", pmids=["1", "3"], n_results=2, backend="table", translation="more[All Fields]")]
    # pmid 1 was retrieved by all three queries: the first retrieval (original title) is kept
    assert budget.ledger == {"1": A1, "2": A2, "3": A3} and budget.ledger["1"] != A1_EDITED
    msgs = state["messages"]
    roles = [m["role"] for m in msgs]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool",
                     "assistant"]
    # the result of "more", the third search, carries the intervention; the earlier ones do not
    assert msgs[3]["content"] == format_results(tool.run("vit")) and msgs[4]["content"] == format_results(tool.run("vit2"))
    assert msgs[6]["content"] == format_results(tool.run("more")) + "\n\n" + prompts.intervention()
    assert msgs[8]["content"] == refused and budget.errors == []
    ids = [(m["tool_call_id"], m["name"]) for m in msgs if m["role"] == "tool"]
    assert ids == [("call_0_0", "search_pubmed"), ("call_0_1", "search_pubmed"), ("call_1_0", "search_pubmed"),
                   ("call_2_0", "search_pubmed")]


def test_budget_spent_in_the_middle_of_a_turn_marks_that_call():
    state, budget, prompts = scripted([calls("vit", "vit2", "more"), {"content": REPORT}], TableTool(TABLE),
                                      max_searches=2, max_refusals=0)
    msgs = state["messages"]
    assert prompts.intervention() not in msgs[3]["content"]
    assert msgs[4]["content"].endswith("\n\n" + prompts.intervention())
    assert msgs[5]["content"] == prompts.refusal() + " " + prompts.intervention()
    assert state["stop_reason"] == "final_answer" and state["llm_calls"] == 2 and "refusals" not in state
    assert (budget.searches, budget.refused, budget.query_texts()) == (2, 1, ["vit", "vit2"])


def test_the_query_log_and_the_ledger_span_the_whole_episode():
    state, budget, _ = scripted([calls("vit", "more"), calls("vit2", "new"), {"content": REPORT}], TableTool(TABLE),
                                max_searches=5, max_refusals=0)
    assert budget.query_texts() == ["vit", "more", "vit2", "new"]
    assert list(budget.ledger) == ["1", "2", "3", "4"]  # in order of first retrieval
    assert budget.ledger["1"].title == A1.title and not budget.exhausted
    assert not any(m["content"].endswith(Prompts().intervention()) for m in state["messages"] if m["role"] == "tool")


def test_the_graph_drawing_shows_only_the_real_routes():
    g = build_graph(ScriptedChat([]), GraphConfig(max_searches=1, max_refusals=1), Prompts(max_searches=1))
    edges = {(e.source, e.target) for e in g.get_graph().edges}
    assert edges == {("__start__", "llm"), ("llm", "tools"), ("llm", "intervention"), ("llm", "final"),
                     ("llm", "refusals_exhausted"), ("llm", "__end__"), ("tools", "llm"), ("intervention", "llm"),
                     ("final", "__end__"), ("refusals_exhausted", "__end__")}


def test_no_search_leaves_no_budget_marks():
    state, budget, _ = scripted([{"content": REPORT}], TableTool(TABLE), max_searches=2, max_refusals=1)
    assert state["stop_reason"] == "final_answer" and state["llm_calls"] == 1 and "refusals" not in state
    assert (budget.searches, budget.refused, budget.queries, budget.ledger, budget.errors) == (0, 0, [], {}, [])


def test_abstract_chars_reach_the_tool_text():
    long = Article(pmid="9", title="T", abstract="word " * 50, source="t")
    tool = TableTool({"long": [long]})
    state, _, _ = scripted([calls("long"), {"content": REPORT}], tool, max_searches=3, max_refusals=0,
                           abstract_chars=20)
    assert state["messages"][3]["content"] == "PMID: 9\nTitle: T\nAbstract: word word word word ..."
    # through the Agent: AgentConfig.abstract_chars reaches the budget it builds for each run
    ep = Agent(ScriptedChat([calls("long"), {"content": REPORT}]), tool,
               AgentConfig(llm="x", max_searches=3, abstract_chars=20)).run("A claim.")
    assert ep.messages[3]["content"] == "PMID: 9\nTitle: T\nAbstract: word word word word ..."


def test_each_run_gets_a_fresh_budget():
    agent = Agent(ScriptedChat([calls("vit"), {"content": REPORT}]), TableTool(TABLE),
                  AgentConfig(llm="x", max_searches=1))
    first, second = agent.run("A claim."), agent.run("A claim.")
    assert first.searches == second.searches == 1 and second.queries == first.queries
    assert second.messages[3]["content"].endswith(agent.prompts.intervention())  # not a refusal: budget is new


class TurnLLM:
    """A backend that answers with prepared AssistantTurns (raw text included) or prepared messages."""

    spec = "fake:turns"

    def __init__(self, turns) -> None:
        self.turns, self.seen_tools = list(turns), []

    def chat(self, messages, tools):
        self.seen_tools.append(tools)
        return self.turns.pop(0) if self.turns else AssistantTurn(content="")

    def fingerprint(self) -> str:
        return "fake"


class Odd:
    """A turn whose message carries malformed tool calls (no id, no function): what a sloppy backend sends."""

    raw = None

    def __init__(self, tool_calls) -> None:
        self.tool_calls = tool_calls

    def to_message(self) -> dict:
        return {"role": "assistant", "content": "", "tool_calls": self.tool_calls}


def test_malformed_tool_calls_are_answered_not_crashed_on():
    tool = TableTool(TABLE)
    llm = TurnLLM([Odd([{"function": {"name": "search_pubmed", "arguments": {"query": "vit"}}}, {"id": "x"}]),
                   Odd([{"function": {"name": "search_pubmed"}}, {}]), AssistantTurn(content=REPORT)])
    state, budget, prompts = run_graph(llm, tool, max_searches=2, max_refusals=1)
    tools = [m for m in state["messages"] if m["role"] == "tool"]
    refused = prompts.refusal() + " " + prompts.intervention()
    assert tools[0] == {"role": "tool", "tool_call_id": "", "name": "search_pubmed",
                        "content": format_results(tool.run("vit"))}
    # a call without a function is an unknown tool; it costs a search, here the last one
    assert tools[1] == {"role": "tool", "tool_call_id": "x", "name": "",
                        "content": "Unknown tool None: the only tool is search_pubmed(query).\n\n"
                                   + prompts.intervention()}
    # after the budget: the intervention refuses both, whatever they lack
    assert tools[2:] == [{"role": "tool", "tool_call_id": "", "name": "search_pubmed", "content": refused},
                         {"role": "tool", "tool_call_id": "", "name": "", "content": refused}]
    assert llm.seen_tools == [[prompts.tool_schema()]] * 3 and state["stop_reason"] == "final_answer"
    assert (budget.searches, budget.refused, budget.errors) == (2, 2, [unknown_tool(None)])


def test_a_call_without_arguments_is_a_missing_query():
    llm = TurnLLM([Odd([{"id": "a", "function": {"name": "search_pubmed", "arguments": None}},
                        {"id": "b", "function": {"name": "search_pubmed", "arguments": "vit"}}])])
    tool = TableTool(TABLE)
    state, budget, _ = run_graph(llm, tool, max_searches=5, max_refusals=0)
    assert [m["content"] for m in state["messages"] if m["role"] == "tool"] == [MISSING_QUERY, MISSING_QUERY]
    assert budget.searches == 2 and budget.errors == [MISSING_QUERY, MISSING_QUERY] and tool.ran == []


def test_the_model_is_offered_the_prompts_tool_schema():
    llm = TurnLLM([AssistantTurn(content=REPORT)])
    run_graph(llm, TableTool(TABLE), max_searches=2, max_refusals=0, prompts=Prompts(2, papers_per_search=7))
    assert llm.seen_tools == [[Prompts(2, papers_per_search=7).tool_schema()]]
    assert "up to seven papers" in llm.seen_tools[0][0]["function"]["description"]


def test_raw_generation_is_kept_on_the_message_only_when_there_is_one():
    state, _, _ = run_graph(TurnLLM([AssistantTurn(content="thinking", raw="<think>")]), TableTool(TABLE), 5, 2)
    assert state["messages"][-1] == {"role": "assistant", "content": "thinking", "raw": "<think>"}
    state, _, _ = run_graph(TurnLLM([AssistantTurn(content=REPORT)]), TableTool(TABLE), 5, 2)
    assert state["messages"][-1] == {"role": "assistant", "content": REPORT}


def test_llm_error_counts_the_call_and_stops():
    class Dead(TurnLLM):
        def chat(self, messages, tools):
            raise LLMError("server down")

    state, budget, _ = run_graph(Dead([]), TableTool(TABLE), 5, 2)
    assert state["stop_reason"] == "llm_error: server down" and state["llm_calls"] == 1
    assert [m["role"] for m in state["messages"]] == ["system", "user"] and budget.searches == 0


def test_an_llm_error_later_in_the_episode_counts_every_call():
    class DiesSecond(TurnLLM):
        def chat(self, messages, tools):
            if not self.turns:
                raise LLMError("gone")
            return super().chat(messages, tools)

    llm = DiesSecond([AssistantTurn(tool_calls=[ToolCall("search_pubmed", {"query": "vit"}, "a")])])
    state, budget, _ = run_graph(llm, TableTool(TABLE), 5, 2)
    assert (state["stop_reason"], state["llm_calls"], budget.searches) == ("llm_error: gone", 2, 1)


# -- a runaway model: it never stops calling a tool that does not exist ------------------------------------


@pytest.mark.parametrize("max_searches, max_refusals, per_turn", [(1, 0, 1), (2, 3, 1), (3, 1, 2), (0, 1, 1),
                                                                  (5, 2, 3)])
def test_a_model_calling_only_an_unknown_tool_spends_the_budget_and_the_episode_ends(max_searches, max_refusals,
                                                                                     per_turn):
    llm = TurnLLM([AssistantTurn(tool_calls=[ToolCall("google", {}, f"c{i}_{j}") for j in range(per_turn)])
                   for i in range(200)])
    tool = TableTool(TABLE)
    # no GraphRecursionError: each unknown call costs a search, so the budget runs out and the refusals end it
    ep = Agent(llm, tool, AgentConfig(llm="fake", max_searches=max_searches, max_refusals=max_refusals)).run("A claim.")
    rounds = math.ceil(max_searches / per_turn) + max_refusals
    assert ep.stop_reason == "budget_refusals_exhausted" and ep.final_text == "" and tool.ran == []
    assert ep.llm_calls == 200 - len(llm.turns) == rounds + 1  # the rounds, then the turn that ends the episode
    assert ep.searches == max_searches and ep.tool_errors == [unknown_tool("google")] * max_searches
    prompts = Prompts(max_searches=max_searches, papers_per_search=TableTool.max_results)
    expected = [unknown_tool("google")] * max_searches
    if expected:
        expected[-1] += "\n\n" + prompts.intervention()  # the call that spends the budget asks for the report
    expected += [prompts.refusal() + " " + prompts.intervention()] * (rounds * per_turn - max_searches)
    assert [m["content"] for m in ep.messages if m["role"] == "tool"] == expected


# -- timing, with injected clocks (no wall-clock assertion) ------------------------------------------------


class Clock:
    """perf_counter stand-in: each reading advances by `step` from a large start."""

    def __init__(self, step: float, start: float = 1000.0) -> None:
        self.t, self.step = start, step

    def perf_counter(self) -> float:
        self.t += self.step
        return self.t


def test_timing_sums_llm_and_search_seconds(monkeypatch):
    graph_clock, episode_clock, search_clock = Clock(0.0123456), Clock(0.987654321), Clock(0.0234567)
    monkeypatch.setattr(graph_mod, "time", SimpleNamespace(perf_counter=graph_clock.perf_counter, time_ns=time.time_ns))
    monkeypatch.setattr(episode_mod, "time", SimpleNamespace(perf_counter=episode_clock.perf_counter,
                                                             time_ns=time.time_ns))
    # the budget the Agent builds for the run, with its clock injected
    monkeypatch.setattr(episode_mod, "SearchBudget", functools.partial(SearchBudget, clock=search_clock.perf_counter))
    tool = TableTool(TABLE)
    # 3 llm calls; searches: two in one turn, then one
    ep = Agent(ScriptedChat([calls("vit", "vit2"), calls("more"), {"content": REPORT}]), tool,
               AgentConfig(llm="scripted:<inline>", max_searches=5)).run("A claim.")
    assert ep.timing == {"total_s": round(episode_clock.step, 4), "llm_s": round(3 * graph_clock.step, 4),
                         "search_s": round(3 * search_clock.step, 4)}
    # and when each ran (a trace's spans): 3 turns, 3 searches, each after the one before, all within the episode
    [(began, ended)] = ep.clock["episode"]
    assert len(ep.clock["llm"]) == 3 and len(ep.clock["search"]) == 3
    turn1, turn2, turn3 = ep.clock["llm"]
    assert began <= turn1[0] <= turn1[1] <= ep.clock["search"][0][0] <= ep.clock["search"][1][1] <= turn2[0]
    assert turn2[1] <= ep.clock["search"][2][0] <= ep.clock["search"][2][1] <= turn3[0] <= turn3[1] <= ended


def test_timing_counts_a_failed_llm_call(monkeypatch):
    clock = Clock(0.0123456)
    monkeypatch.setattr(graph_mod, "time", SimpleNamespace(perf_counter=clock.perf_counter, time_ns=time.time_ns))

    class Dead(TurnLLM):
        def chat(self, messages, tools):
            raise LLMError("server down")

    ep = Agent(Dead([]), TableTool(TABLE), AgentConfig(llm="x")).run("A claim.")
    assert ep.timing["llm_s"] == round(clock.step, 4) and ep.timing["search_s"] == 0.0
    assert ep.llm_calls == 1 and ep.final_text == "" and len(ep.clock["llm"]) == 1


def test_token_usage_is_kept_on_the_message_and_never_sent_back_to_a_server():
    from biocheck.llm.openai_backend import _wire

    usage = {"prompt_tokens": 120, "completion_tokens": 30}
    llm = TurnLLM([AssistantTurn(content=REPORT, raw="<r>", usage=usage)])
    ep = Agent(llm, TableTool(TABLE), AgentConfig(llm="fake")).run("A claim.")
    assert ep.messages[-1]["usage"] == usage and ep.messages[-1]["raw"] == "<r>"
    assert _wire(ep.messages)[-1] == {"role": "assistant", "content": REPORT}  # trace keys stay in the trace
    quiet = Agent(TurnLLM([AssistantTurn(content=REPORT)]), TableTool(TABLE), AgentConfig(llm="fake")).run("A claim.")
    assert "usage" not in quiet.messages[-1]
