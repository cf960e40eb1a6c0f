"""The agent graph driven by scripted turns: budget, intervention, refusals, errors, traces."""

from __future__ import annotations

import json

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.prompts import Prompts
from biocheck.evidence.search import SearchConfig, SearchTool, search_tool
from biocheck.labels import Label
from biocheck.llm import LLMError
from biocheck.llm.scripted import ScriptedChat
from tests.helpers.turns import REPORT, search


class CountingTool(SearchTool):
    def __init__(self, inner: SearchTool):
        super().__init__(inner.backend, inner.max_results)
        self.calls: list[str] = []

    def run(self, query, n=None):
        self.calls.append(query)
        return super().run(query, n)


@pytest.fixture
def tool(evidence):
    cfg, _ = evidence
    return CountingTool(search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3)))


def agent(turns, tool, **cfg) -> Agent:
    return Agent(ScriptedChat(turns), tool, AgentConfig(llm="scripted:<inline>", **cfg), search_backend="local")


def roles(ep) -> list[str]:
    return [m["role"] + ("+calls" if m.get("tool_calls") else "") for m in ep.messages]


def test_two_searches_then_a_report(tool):
    ep = agent([search("vitamin D AND fracture*"), search("aspirin[ti]"), {"content": REPORT}], tool).run(
        "Vitamin D prevents fractures.", claim_id="c1", gold_label="SUPPORTED")
    assert roles(ep) == ["system", "user", "assistant+calls", "tool", "assistant+calls", "tool", "assistant"]
    assert ep.searches == 2 and tool.calls == ["vitamin D AND fracture*", "aspirin[ti]"]
    assert [q.pmids for q in ep.queries] == [["101"], ["103"]]
    assert set(ep.ledger) == {"101", "103"} and ep.ledger["101"].source == "corpus:scifact"
    assert "PMID: 101\nTitle: Vitamin D and fracture risk\nAbstract: Vitamin D supplementation" in ep.messages[3]["content"]
    assert ep.report.conclusion is Label.SUPPORTED and ep.report.supporting[0].pmid == "101"
    assert ep.parse_problems == [] and ep.stop_reason == "final_answer" and ep.final_text == REPORT
    assert ep.gold_label is Label.SUPPORTED and ep.prompt_hash == Prompts(max_searches=5, papers_per_search=3).hash() and ep.llm_fingerprint
    assert Prompts(max_searches=5, papers_per_search=3).intervention() not in json.dumps(ep.messages)


def test_budget_intervention_and_refusals_then_report(tool):
    turns = [search(f"vitamin OR aspirin OR coffee OR statin OR exercise {i}") for i in range(7)] + [{"content": REPORT}]
    ep = agent(turns, tool, max_searches=5, max_refusals=2).run("Vitamin D prevents fractures.")
    assert ep.searches == 5 and len(tool.calls) == 5  # only the budget is executed
    tool_msgs = [m for m in ep.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 7
    intervention = Prompts(max_searches=5, papers_per_search=3).intervention()
    assert tool_msgs[4]["content"].endswith(intervention) and intervention not in tool_msgs[3]["content"]
    assert all(m["content"].startswith("Not run: the search budget (5 searches) is spent.") for m in tool_msgs[5:])
    assert ep.report.conclusion is Label.SUPPORTED and ep.stop_reason == "final_answer"


def test_refusals_are_bounded(tool):
    ep = agent([search("coffee")] * 20, tool, max_searches=2, max_refusals=1).run("Coffee causes arrhythmia.")
    assert ep.searches == 2 and ep.llm_calls == 4 and ep.stop_reason == "budget_refusals_exhausted"
    assert ep.report.conclusion is None and ep.parse_problems  # no report was written


def test_parallel_calls_in_one_turn_share_the_budget(tool):
    many = {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}} for q in ("coffee", "aspirin", "statin")]}
    ep = agent([many, {"content": REPORT}], tool, max_searches=2).run("x claim here")
    assert ep.searches == 2 and tool.calls == ["coffee", "aspirin"]
    assert [m["content"].startswith("Not run") for m in ep.messages if m["role"] == "tool"] == [False, False, True]


def test_no_tool_call_at_all(tool):
    ep = agent([{"content": REPORT.replace("SUPPORTED\n", "NOT ENOUGH INFORMATION\n")}], tool).run("Some claim.")
    assert ep.searches == 0 and ep.ledger == {} and ep.report.conclusion is Label.NEI
    assert roles(ep) == ["system", "user", "assistant"]


def test_malformed_final_text_never_raises(tool):
    ep = agent([{"content": "I think maybe yes??? <<<>>> PMID"}], tool).run("Some claim.")
    assert ep.report.conclusion is None and ep.parse_problems and ep.stop_reason == "final_answer"


def test_bad_query_is_an_error_text_and_the_episode_goes_on(tool):
    ep = agent([search("vitamin AND (fracture"), search("vitamin"), {"content": REPORT}], tool).run("Vitamin D claim.")
    assert "Search error:" in ep.messages[3]["content"] and "parenthes" in ep.messages[3]["content"].lower()
    assert ep.queries[0].error and ep.tool_errors and ep.searches == 2 and ep.report.conclusion is Label.SUPPORTED


def test_empty_results_say_so(tool):
    ep = agent([search("zebrafish[ti]"), {"content": REPORT}], tool).run("Zebrafish claim.")
    assert ep.messages[3]["content"].startswith("No papers found")
    assert ep.queries[0].n_results == 0 and ep.ledger == {}


def test_unknown_tool_and_missing_query(tool):
    turns = [{"tool_calls": [{"name": "google", "arguments": {"q": "x"}}]},
             {"tool_calls": [{"name": "search_pubmed", "arguments": {"q": "x"}}]}, {"content": REPORT}]
    ep = agent(turns, tool).run("A claim.")
    assert "Unknown tool 'google'" in ep.messages[3]["content"]
    assert "needs a 'query'" in ep.messages[5]["content"] and tool.calls == []


def test_llm_failure_ends_the_episode_not_the_process(tool):
    class Dead(ScriptedChat):
        def chat(self, messages, tools):
            raise LLMError("server down")
    ep = Agent(Dead([]), tool, AgentConfig(llm="x")).run("A claim.")
    assert ep.stop_reason == "llm_error: server down" and ep.report.conclusion is None


def test_script_runs_out_gives_empty_content(tool):
    ep = agent([search("coffee")], tool).run("A claim.")
    assert ep.final_text == "" and ep.searches == 1 and ep.stop_reason == "final_answer"


def test_trace_round_trips_as_json(tool, tmp_path):
    from biocheck.agent.episode import Episode

    ep = agent([search("coffee"), {"content": REPORT}], tool).run("A claim.")
    again = Episode.model_validate_json(ep.model_dump_json())
    assert again == ep


# --- the real thing: the tiny model through the same graph ----------------------------------------

def test_tiny_model_episode_ends_within_budget(tiny_model, tool):
    from biocheck.llm import GenerationConfig, make_llm

    llm = make_llm(f"transformers:{tiny_model}", GenerationConfig(max_new_tokens=24, temperature=1.0, seed=3))
    ep = Agent(llm, tool, AgentConfig(llm=llm.spec, max_searches=2, max_refusals=1)).run("Coffee causes arrhythmia.")
    assert ep.stop_reason in ("final_answer", "budget_refusals_exhausted")
    assert ep.searches <= 2 and ep.llm_calls <= 2 + 1 + 1
    assert ep.llm.startswith("transformers:") and len(ep.llm_fingerprint) >= 12
    assert all(m.get("raw") is not None for m in ep.messages if m["role"] == "assistant")


def test_budget_spent_by_a_call_without_query_still_gets_the_intervention(tool):
    turns = [{"tool_calls": [{"name": "search_pubmed", "arguments": {"q": "x"}}]}, {"content": REPORT}]
    ep = agent(turns, tool, max_searches=1).run("A claim.")
    intervention = Prompts(max_searches=1, papers_per_search=3).intervention()
    assert ep.messages[3]["content"].endswith(intervention) and ep.report.conclusion is Label.SUPPORTED
