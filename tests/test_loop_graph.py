"""The agent graph itself (agent/graph.py), driven directly: the state it returns, message fields, timing.

tests/test_budget_texts.py pins the texts the model reads through `Agent.run`; here the compiled graph
is invoked on a bare state (only messages), so every default and every state field it keeps is checked:
the query log with backend/translation, the ledger's first-retrieval rule and query index, the index of
the message that spent the budget, the counters, and the seconds measured with an injected clock.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from langgraph.errors import GraphRecursionError

from biocheck.agent import episode as episode_mod
from biocheck.agent import graph as graph_mod
from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.graph import GraphConfig, Replace, build_graph, merge_messages, recursion_limit
from biocheck.agent.llm.base import AssistantTurn, LLMError, ToolCall
from biocheck.agent.llm.scripted import ScriptedChat
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, TOOL_SCHEMA, format_results
from biocheck.pubmed.search import ToolOutput, article_dict
from biocheck.pubmed.types import Article
from tests.test_agent import REPORT

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


def bare_state(claim: str = "A claim.") -> dict:
    """What a caller must give the graph at least: the opening messages, no counters."""
    return {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": claim}]}


def calls(*queries: str) -> dict:
    return {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}} for q in queries]}


def graph(turns, tool, max_searches: int, max_refusals: int, abstract_chars: int | None = None):
    cfg = GraphConfig(max_searches=max_searches, max_refusals=max_refusals, abstract_chars=abstract_chars)
    prompts = Prompts(max_searches=max_searches, papers_per_search=tool.max_results)
    return build_graph(ScriptedChat(turns), tool, cfg, prompts), prompts, cfg


def test_bare_state_through_budget_refusals_and_stop():
    tool = TableTool(TABLE)
    turns = [calls("vit", "vit2"), calls("more"), calls("again"), calls("again")]
    g, prompts, cfg = graph(turns, tool, max_searches=3, max_refusals=1)
    state = g.invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    refused = prompts.refusal() + " " + prompts.intervention()
    assert tool.ran == ["vit", "vit2", "more"]
    assert (state["searches"], state["refusals"], state["llm_calls"]) == (3, 1, 4)
    assert state["stop_reason"] == "budget_refusals_exhausted"
    assert state["queries"] == [
        {"query": "vit", "pmids": ["1", "2"], "error": None, "n_results": 2, "backend": "table",
         "translation": "vit[All Fields]"},
        {"query": "vit2", "pmids": ["1"], "error": None, "n_results": 1, "backend": "table",
         "translation": "vit2[All Fields]"},
        {"query": "more", "pmids": ["1", "3"], "error": None, "n_results": 2, "backend": "table",
         "translation": "more[All Fields]"}]
    # pmid 1 was retrieved by queries 0, 1 and 2: the first retrieval (query 0, original title) is kept
    assert state["ledger"] == {"1": {**A1.model_dump(), "query_index": 0}, "2": {**A2.model_dump(), "query_index": 0},
                               "3": {**A3.model_dump(), "query_index": 2}}
    msgs = state["messages"]
    roles = [m["role"] for m in msgs]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "assistant", "tool",
                     "assistant"]
    assert state["exhausted_at"] == 6  # the result of "more", the third search
    assert msgs[6]["content"] == format_results(tool.run("more")) + "\n\n" + prompts.intervention()
    assert msgs[8]["content"] == refused and state["tool_errors"] == []
    ids = [(m["tool_call_id"], m["name"]) for m in msgs if m["role"] == "tool"]
    assert ids == [("call_0_0", "search_pubmed"), ("call_0_1", "search_pubmed"), ("call_1_0", "search_pubmed"),
                   ("call_2_0", "search_pubmed")]


def test_budget_spent_in_the_middle_of_a_turn_marks_that_call():
    tool = TableTool(TABLE)
    g, prompts, cfg = graph([calls("vit", "vit2", "more"), {"content": REPORT}], tool, max_searches=2,
                            max_refusals=0)
    state = g.invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    msgs = state["messages"]
    assert state["exhausted_at"] == 4 and msgs[4]["content"].endswith("\n\n" + prompts.intervention())
    assert msgs[5]["content"] == prompts.refusal() + " " + prompts.intervention()
    assert state["stop_reason"] == "final_answer" and state["llm_calls"] == 2 and "refusals" not in state


def test_query_index_is_the_position_in_the_whole_query_log():
    g, _, cfg = graph([calls("vit", "more"), calls("vit2", "new"), {"content": REPORT}], TableTool(TABLE),
                      max_searches=5, max_refusals=0)
    state = g.invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    assert [q["query"] for q in state["queries"]] == ["vit", "more", "vit2", "new"]
    assert {pmid: a["query_index"] for pmid, a in state["ledger"].items()} == {"1": 0, "2": 0, "3": 1, "4": 3}
    assert state["ledger"]["1"]["title"] == A1.title and "exhausted_at" not in state


def test_the_graph_drawing_shows_only_the_real_routes():
    g, _, _ = graph([], TableTool(TABLE), max_searches=1, max_refusals=1)
    edges = {(e.source, e.target) for e in g.get_graph().edges}
    assert edges == {("__start__", "llm"), ("llm", "tools"), ("llm", "intervention"), ("llm", "final"),
                     ("llm", "refusals_exhausted"), ("llm", "__end__"), ("tools", "llm"), ("tools", "intervention"),
                     ("intervention", "llm"), ("final", "__end__"), ("refusals_exhausted", "__end__")}


def test_no_search_leaves_no_budget_marks():
    g, _, cfg = graph([{"content": REPORT}], TableTool(TABLE), max_searches=2, max_refusals=1)
    state = g.invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    assert state["stop_reason"] == "final_answer" and state["llm_calls"] == 1
    assert "exhausted_at" not in state and "searches" not in state


def test_abstract_chars_reach_the_tool_text():
    long = Article(pmid="9", title="T", abstract="word " * 50, source="t")
    tool = TableTool({"long": [long]})
    g, _, cfg = graph([calls("long"), {"content": REPORT}], tool, max_searches=3, max_refusals=0, abstract_chars=20)
    state = g.invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    assert state["messages"][3]["content"] == "PMID: 9\nTitle: T\nAbstract: word word word word ..."


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
    cfg = GraphConfig(max_searches=1, max_refusals=1)
    prompts = Prompts(max_searches=1, papers_per_search=3)
    state = build_graph(llm, tool, cfg, prompts).invoke(bare_state(), {"recursion_limit": recursion_limit(cfg)})
    tools = [m for m in state["messages"] if m["role"] == "tool"]
    refused = prompts.refusal() + " " + prompts.intervention()
    assert tools[0] == {"role": "tool", "tool_call_id": "", "name": "search_pubmed",
                        "content": format_results(tool.run("vit")) + "\n\n" + prompts.intervention()}
    assert tools[1] == {"role": "tool", "tool_call_id": "x", "name": "",
                        "content": "Unknown tool None: the only tool is search_pubmed(query)."}
    # after the budget: the intervention refuses both, whatever they lack
    assert tools[2:] == [{"role": "tool", "tool_call_id": "", "name": "search_pubmed", "content": refused},
                         {"role": "tool", "tool_call_id": "", "name": "", "content": refused}]
    assert llm.seen_tools == [[TOOL_SCHEMA]] * 3 and state["stop_reason"] == "final_answer"


def test_a_call_without_arguments_is_a_missing_query():
    llm = TurnLLM([Odd([{"id": "a", "function": {"name": "search_pubmed", "arguments": None}},
                        {"id": "b", "function": {"name": "search_pubmed", "arguments": "vit"}}])])
    cfg = GraphConfig(max_searches=5, max_refusals=0)
    state = build_graph(llm, TableTool(TABLE), cfg, Prompts()).invoke(bare_state(),
                                                                      {"recursion_limit": recursion_limit(cfg)})
    assert [m["content"] for m in state["messages"] if m["role"] == "tool"] == [MISSING_QUERY, MISSING_QUERY]
    assert state["searches"] == 2 and state["tool_errors"] == [MISSING_QUERY, MISSING_QUERY]


def test_raw_generation_is_kept_on_the_message_only_when_there_is_one():
    llm = TurnLLM([AssistantTurn(content="thinking", raw="<think>")])
    cfg = GraphConfig()
    state = build_graph(llm, TableTool(TABLE), cfg, Prompts()).invoke(bare_state(),
                                                                      {"recursion_limit": recursion_limit(cfg)})
    assert state["messages"][-1] == {"role": "assistant", "content": "thinking", "raw": "<think>"}
    plain = TurnLLM([AssistantTurn(content=REPORT)])
    state = build_graph(plain, TableTool(TABLE), cfg, Prompts()).invoke(bare_state(),
                                                                        {"recursion_limit": recursion_limit(cfg)})
    assert state["messages"][-1] == {"role": "assistant", "content": REPORT}


def test_llm_error_counts_the_call_and_stops():
    class Dead(TurnLLM):
        def chat(self, messages, tools):
            raise LLMError("server down")

    cfg = GraphConfig()
    state = build_graph(Dead([]), TableTool(TABLE), cfg, Prompts()).invoke(bare_state(),
                                                                           {"recursion_limit": recursion_limit(cfg)})
    assert state["stop_reason"] == "llm_error: server down" and state["llm_calls"] == 1
    assert [m["role"] for m in state["messages"]] == ["system", "user"]


def test_an_llm_error_later_in_the_episode_counts_every_call():
    class DiesSecond(TurnLLM):
        def chat(self, messages, tools):
            if not self.turns:
                raise LLMError("gone")
            return super().chat(messages, tools)

    cfg = GraphConfig()
    llm = DiesSecond([AssistantTurn(tool_calls=[ToolCall("search_pubmed", {"query": "vit"}, "a")])])
    state = build_graph(llm, TableTool(TABLE), cfg, Prompts()).invoke(bare_state(),
                                                                      {"recursion_limit": recursion_limit(cfg)})
    assert (state["stop_reason"], state["llm_calls"], state["searches"]) == ("llm_error: gone", 2, 1)


def test_merge_messages_replaces_by_index_and_appends_the_rest():
    left = [{"n": 0}, {"n": 1}]
    assert merge_messages(left, [Replace(0, {"n": "x"}), {"n": 2}]) == [{"n": "x"}, {"n": 1}, {"n": 2}]
    assert left == [{"n": 0}, {"n": 1}]  # the old state is not changed in place


# -- the hard stop: a model that never stops calling an unknown tool (it costs no budget) ----------------


@pytest.mark.parametrize("max_searches, max_refusals", [(1, 0), (2, 3)])
def test_a_runaway_model_is_stopped_by_the_recursion_limit(max_searches, max_refusals):
    llm = TurnLLM([AssistantTurn(tool_calls=[ToolCall("google", {}, f"c{i}")]) for i in range(200)])
    agent = Agent(llm, TableTool(TABLE), AgentConfig(llm="fake", max_searches=max_searches, max_refusals=max_refusals))
    with pytest.raises(GraphRecursionError):
        agent.run("A claim.")
    # every round is two graph steps (llm, tools); the limit is 4 steps per budgeted round plus 10
    steps = 4 * (max_searches + max_refusals) + 10
    assert recursion_limit(GraphConfig(max_searches=max_searches, max_refusals=max_refusals)) == steps
    assert 200 - len(llm.turns) == (steps + 1) // 2


# -- timing, with injected clocks (no wall-clock assertion) ------------------------------------------------


class Clock:
    """perf_counter stand-in: each reading advances by `step` from a large start."""

    def __init__(self, step: float, start: float = 1000.0) -> None:
        self.t, self.step = start, step

    def perf_counter(self) -> float:
        self.t += self.step
        return self.t


def test_timing_sums_llm_and_search_seconds(monkeypatch):
    graph_clock, episode_clock = Clock(0.0123456), Clock(0.987654321)
    monkeypatch.setattr(graph_mod, "time", SimpleNamespace(perf_counter=graph_clock.perf_counter))
    monkeypatch.setattr(episode_mod, "time", SimpleNamespace(perf_counter=episode_clock.perf_counter))
    tool = TableTool(TABLE)
    # 3 llm calls; searches: two in one turn, then one
    ep = Agent(ScriptedChat([calls("vit", "vit2"), calls("more"), {"content": REPORT}]), tool,
               AgentConfig(llm="scripted:<inline>", max_searches=5)).run("A claim.")
    step = graph_clock.step
    assert ep.timing == {"total_s": round(episode_clock.step, 4), "llm_s": round(3 * step, 4),
                         "search_s": round(3 * step, 4)}


def test_timing_counts_a_failed_llm_call(monkeypatch):
    clock = Clock(0.0123456)
    monkeypatch.setattr(graph_mod, "time", SimpleNamespace(perf_counter=clock.perf_counter))

    class Dead(TurnLLM):
        def chat(self, messages, tools):
            raise LLMError("server down")

    ep = Agent(Dead([]), TableTool(TABLE), AgentConfig(llm="x")).run("A claim.")
    assert ep.timing["llm_s"] == round(clock.step, 4) and ep.timing["search_s"] == 0.0
    assert ep.llm_calls == 1 and ep.final_text == ""
