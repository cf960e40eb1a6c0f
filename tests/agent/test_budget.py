"""The agent's one tool step (agent/budget.py `SearchBudget`) and the two adapters that drive it.

First the budget on its own, one rule per test (with a scripted search tool and an injected clock);
then the parity test: the LangGraph tools node (through `Agent.run` and through `graph.tool_messages`)
and the TRL environment (`SearchEnv.search_pubmed`, called the way GRPOTrainer calls it) get the same
sequence of calls and must produce the same texts, ledger, query log, errors and counters. Last, the
tool's schema and the prompts: TRL's schema for the env method is the agent's, and the tool
description, the system prompt and the prompt hash all follow the configured numbers.
"""

from __future__ import annotations

import re

import pytest
from transformers.utils import get_json_schema

from biocheck.agent import prompts as prompts_mod
from biocheck.agent import tools as tools_mod
from biocheck.agent.budget import QueryRecord, SearchBudget
from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.graph import tool_messages
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, TOOL_NAME, format_results
from biocheck.evidence.search import ToolOutput
from biocheck.llm.base import AssistantTurn, ToolCall
from biocheck.train.env import env_factory, make_env
from tests.helpers.turns import A1, A2, A3, REPORT, TABLE, TableTool

BAD = "bad ("
UNBALANCED = "Unbalanced parentheses in the query."


class Tool(TableTool):
    """TableTool, plus one query that fails like a syntax error."""

    def run(self, query: str, n: int | None = None) -> ToolOutput:
        if query == BAD:
            self.ran.append(query)
            return ToolOutput(query=query, results=[], error=UNBALANCED)
        return super().run(query, n)


class Clock:
    """Reads out the given times in order; fails the test if read more often than that."""

    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        assert self.times, "the clock was read more often than expected"
        return self.times.pop(0)


def make(max_searches: int, abstract_chars: int | None = None, clock=None):
    tool = Tool(TABLE)
    prompts = Prompts(max_searches=max_searches, papers_per_search=tool.max_results)
    budget = SearchBudget(tool, prompts, max_searches, abstract_chars, **({"clock": clock} if clock else {}))
    return budget, tool, prompts


def refusal(prompts: Prompts) -> str:
    return prompts.refusal() + " " + prompts.intervention()


# -- SearchBudget on its own -------------------------------------------------------------------------------


def test_a_fresh_budget_is_empty():
    budget, _, _ = make(2)
    assert (budget.searches, budget.refused, budget.queries, budget.ledger, budget.errors, budget.search_seconds) == (
        0, 0, [], {}, [], 0.0)
    assert not budget.exhausted and make(0)[0].exhausted


def test_a_search_runs_and_the_model_reads_its_results():
    budget, tool, _ = make(3, abstract_chars=12)
    text = budget.call(TOOL_NAME, {"query": "vit"})
    assert text == format_results(tool.run("vit"), 12)
    assert text == ("PMID: 1\nTitle: Vitamin D and fractures\nAbstract: Vitamin D ...\n\n"
                    "PMID: 2\nTitle: Aspirin and bleeding\nAbstract: Aspirin ...")
    assert budget.queries == [QueryRecord(query="vit", pmids=["1", "2"], n_results=2, backend="table",
                                          translation="vit[All Fields]")]
    assert budget.ledger == {"1": A1, "2": A2} and budget.errors == [] and budget.searches == 1
    assert budget.query_texts() == ["vit"]


MALFORMED = [
    (TOOL_NAME, {}, MISSING_QUERY),
    (TOOL_NAME, None, MISSING_QUERY),
    (TOOL_NAME, "vit", MISSING_QUERY),  # arguments that are not an object
    (TOOL_NAME, ["vit"], MISSING_QUERY),
    (TOOL_NAME, {"query": 5}, MISSING_QUERY),
    (TOOL_NAME, {"query": None}, MISSING_QUERY),
    (TOOL_NAME, {"q": "vit"}, MISSING_QUERY),
    ("google", {"query": "vit"}, "Unknown tool 'google': the only tool is search_pubmed(query)."),
    ("google", {}, "Unknown tool 'google': the only tool is search_pubmed(query)."),  # the name is checked first
    (None, {"query": "vit"}, "Unknown tool None: the only tool is search_pubmed(query)."),
    (3, None, "Unknown tool 3: the only tool is search_pubmed(query)."),
]


@pytest.mark.parametrize("name, args, text", MALFORMED)
def test_a_malformed_call_costs_a_search_and_runs_nothing(name, args, text):
    budget, tool, _ = make(3, clock=Clock())  # the clock is not read: nothing was searched
    assert budget.call(name, args) == text
    assert (budget.searches, budget.errors, budget.queries, budget.ledger, tool.ran) == (1, [text], [], {}, [])
    assert budget.search_seconds == 0.0


@pytest.mark.parametrize("name, args, text", MALFORMED + [(TOOL_NAME, {"query": "nothing"}, None),
                                                          (TOOL_NAME, {"query": BAD}, "Search error: " + UNBALANCED)])
def test_any_call_can_spend_the_budget_and_then_carries_the_intervention(name, args, text):
    budget, _, prompts = make(1)
    expected = text or ("No papers found for this query. Try fewer concepts, broader terms, synonyms, or remove "
                        "field tags.")
    assert budget.call(name, args) == expected + "\n\n" + prompts.intervention()
    assert budget.exhausted and budget.searches == 1 and budget.refused == 0


def test_only_the_call_that_spends_the_budget_carries_the_intervention():
    budget, _, prompts = make(3)
    texts = [budget.call(TOOL_NAME, {"query": q}) for q in ("vit", "google", "new")]
    assert [t.endswith(prompts.intervention()) for t in texts] == [False, False, True]
    assert texts[2].count(prompts.intervention()) == 1 and "all 3 searches" in texts[2]


@pytest.mark.parametrize("name, args", [(TOOL_NAME, {"query": "new"}), (TOOL_NAME, {}), ("google", {"query": "x"})])
def test_after_the_budget_every_call_is_refused_and_nothing_is_recorded(name, args):
    budget, tool, prompts = make(1)
    budget.call(TOOL_NAME, {"query": "vit"})
    before = (budget.searches, list(budget.queries), dict(budget.ledger), list(budget.errors), list(tool.ran))
    assert budget.call(name, args) == budget.call(name, args) == refusal(prompts) == budget.refusal()
    assert refusal(prompts) == ("Not run: the search budget (1 searches) is spent. " + prompts.intervention())
    assert (budget.searches, budget.queries, budget.ledger, budget.errors, tool.ran) == before
    assert budget.refused == 2


def test_a_zero_budget_refuses_the_first_call():
    budget, tool, prompts = make(0)
    assert budget.call(TOOL_NAME, {"query": "vit"}) == refusal(prompts)
    assert (budget.searches, budget.refused, tool.ran) == (0, 1, [])


def test_a_failed_search_is_logged_and_its_error_kept():
    budget, tool, _ = make(3)
    assert budget.call(TOOL_NAME, {"query": BAD}) == "Search error: " + UNBALANCED
    assert budget.queries == [QueryRecord(query=BAD, error=UNBALANCED)]
    assert budget.errors == [UNBALANCED] and budget.ledger == {} and tool.ran == [BAD]


def test_extra_arguments_are_ignored_and_the_query_runs():
    budget, tool, _ = make(3)
    assert budget.call(TOOL_NAME, {"query": "new", "max_results": 50}) == format_results(Tool(TABLE).run("new"))
    assert tool.ran == ["new"] and budget.errors == []


def test_the_ledger_keeps_the_first_retrieval_of_each_paper_and_the_log_every_search():
    budget, _, _ = make(5)
    for q in ("vit", "vit2", "nothing", "more"):
        budget.call(TOOL_NAME, {"query": q})
    assert budget.ledger == {"1": A1, "2": A2, "3": A3}  # "vit2" and "more" brought pmid 1 again, edited
    assert list(budget.ledger) == ["1", "2", "3"] and budget.query_texts() == ["vit", "vit2", "nothing", "more"]
    assert [(q.pmids, q.n_results) for q in budget.queries] == [(["1", "2"], 2), (["1"], 1), ([], 0), (["1", "3"], 2)]


def test_search_seconds_sum_the_searches_only():
    # two searches: 10.0 -> 10.5 and 20.0 -> 21.25; the malformed call and the refusal read no clock
    budget, _, _ = make(3, clock=Clock(10.0, 10.5, 20.0, 21.25))
    budget.call(TOOL_NAME, {"query": "vit"})
    budget.call(TOOL_NAME, {})
    budget.call(TOOL_NAME, {"query": BAD})
    budget.call(TOOL_NAME, {"query": "new"})
    assert budget.search_seconds == pytest.approx(1.75) and budget.refused == 1


def test_the_texts_state_the_prompts_budget():
    budget, _, _ = make(2)
    budget.call(TOOL_NAME, {"query": "vit"})
    assert "all 2 searches" in budget.call(TOOL_NAME, {"query": "new"})
    assert budget.refusal().startswith("Not run: the search budget (2 searches) is spent. You have used all 2 searches.")


# -- parity: the LangGraph node and the TRL environment, same calls -> same everything ------------------------

CALLS = [
    (TOOL_NAME, {"query": "vit"}),
    (TOOL_NAME, {}),  # no query
    (TOOL_NAME, {"query": 5}),  # a query that is not a string
    (TOOL_NAME, {"query": None}),
    (TOOL_NAME, {"query": "vit2", "max_results": 50}),  # an extra argument; pmid 1 again, edited
    (TOOL_NAME, {"query": BAD}),  # the backend refuses it
    (TOOL_NAME, {"query": "nothing"}),
    (TOOL_NAME, {"query": "more"}),  # the 8th call: spends the budget
    (TOOL_NAME, {"query": "new"}),  # after the budget, in the same turn
    (TOOL_NAME, {}),  # after the budget, next turn
]
TURNS = [[0, 1], [2], [3, 4, 5], [6], [7, 8], [9]]  # calls grouped into assistant turns
BUDGET = 8


def turn(i: int, idx: list[int]) -> AssistantTurn:
    return AssistantTurn(tool_calls=[ToolCall(CALLS[k][0], dict(CALLS[k][1]), f"c{i}_{k}") for k in idx])


class Turns:
    """Answers with the prepared turns, then the report."""

    spec = "fake:parity"

    def __init__(self) -> None:
        self.turns = [turn(i, idx) for i, idx in enumerate(TURNS)] + [AssistantTurn(content=REPORT)]

    def chat(self, messages, tools):
        return self.turns.pop(0)

    def fingerprint(self) -> str:
        return "parity"


def outcome(budget: SearchBudget, texts: list[str]) -> dict:
    return {"texts": texts, "ledger": budget.ledger, "queries": budget.queries, "errors": budget.errors,
            "searches": budget.searches, "refused": budget.refused}


def through_agent(chars):
    seen = {}

    class Keep(Agent):  # keeps the run's budget to read its refusal count
        def new_budget(self):
            seen["budget"] = super().new_budget()
            return seen["budget"]

    ep = Keep(Turns(), Tool(TABLE), AgentConfig(llm="x", max_searches=BUDGET, max_refusals=2,
                                                abstract_chars=chars)).run("A claim.")
    assert ep.stop_reason == "final_answer" and ep.searches == seen["budget"].searches
    assert (ep.queries, ep.ledger, ep.tool_errors) == (seen["budget"].queries, seen["budget"].ledger,
                                                       seen["budget"].errors)
    return outcome(seen["budget"], [m["content"] for m in ep.messages if m["role"] == "tool"])


def through_tools_node(chars):
    budget, _, _ = make(BUDGET, chars)
    texts = []
    for i, idx in enumerate(TURNS):
        texts += [m["content"] for m in tool_messages(budget, turn(i, idx).to_message())]
    return outcome(budget, texts)


def through_env(chars):
    tool = Tool(TABLE)
    env = make_env(tool, Prompts(max_searches=BUDGET, papers_per_search=tool.max_results), BUDGET, chars)
    env.reset(claim="A claim.", label="SUPPORTED")
    # GRPOTrainer calls the method named by the model with the model's arguments as keywords
    texts = [str(getattr(env, name)(**args)) for name, args in CALLS]
    return outcome(env.budget, texts)


@pytest.mark.parametrize("chars", [None, 12])
def test_the_graph_and_the_training_env_do_the_same_with_the_same_calls(chars):
    agent, node, env = through_agent(chars), through_tools_node(chars), through_env(chars)
    assert agent == node == env
    # and what they agree on is the budget's rules, not an empty or broken outcome
    prompts = Prompts(max_searches=BUDGET, papers_per_search=Tool.max_results)
    texts = env["texts"]
    assert texts[1:4] == [MISSING_QUERY] * 3 and texts[5] == "Search error: " + UNBALANCED
    assert texts[4] == format_results(Tool(TABLE).run("vit2"), chars)
    assert texts[7] == format_results(Tool(TABLE).run("more"), chars) + "\n\n" + prompts.intervention()
    assert texts[8:] == [refusal(prompts)] * 2 and not any(prompts.intervention() in t for t in texts[:7])
    assert env["ledger"] == {"1": A1, "2": A2, "3": A3}
    assert [q.query for q in env["queries"]] == ["vit", "vit2", BAD, "nothing", "more"]
    assert env["errors"] == [MISSING_QUERY] * 3 + [UNBALANCED] and (env["searches"], env["refused"]) == (8, 2)


# -- the tool's schema and the prompts agree -------------------------------------------------------------------


@pytest.mark.parametrize("papers, word", [(3, "three"), (5, "five")])
def test_trls_schema_for_the_env_method_is_the_agents(papers, word):
    prompts = Prompts(max_searches=4, papers_per_search=papers)
    for env in (make_env(Tool(TABLE), prompts, 4), env_factory(Tool(TABLE), prompts, 4)()):
        assert get_json_schema(env.search_pubmed) == prompts.tool_schema()
    assert f"up to {word} papers" in prompts.tool_schema()["function"]["description"]
    assert re.search(rf"at most {papers}\s+papers", prompts.system())


def test_the_system_prompt_and_the_tool_description_state_the_tools_paper_count():
    seen = []

    class Spy:
        spec = "fake:spy"

        def chat(self, messages, tools):
            seen.append((messages[0]["content"], tools))
            return AssistantTurn(content=REPORT)

        def fingerprint(self) -> str:
            return "spy"

    tool = TableTool(TABLE)
    assert tool.max_results == 3
    Agent(Spy(), tool, AgentConfig(llm="x", max_searches=4)).run("A claim.")
    system, tools = seen[0]
    assert re.search(r"returns at most 3\s+papers", system) and "at most 5" not in system
    assert tools == [Prompts(4, 3).tool_schema()]
    assert tools[0]["function"]["description"].startswith("Search PubMed and return up to three papers ")


def test_the_quickstart_tool_says_what_the_quickstart_search_returns(evidence_workdir, tmp_path):
    from biocheck.wiring import agent as make_agent_from_params
    from biocheck.wiring import make_prompts

    script = tmp_path / "script.json"
    script.write_text("[]")
    agent, agent_cfg, search_cfg = make_agent_from_params(evidence_workdir / "params.yaml", llm=f"scripted:{script}")
    assert search_cfg.max_results == agent.tool.max_results == 3  # the quickstart's search returns three
    assert "up to three papers" in agent.prompts.tool_schema()["function"]["description"]
    env = env_factory(agent.tool, make_prompts(agent_cfg, agent.tool), agent_cfg.max_searches)()
    assert get_json_schema(env.search_pubmed) == agent.prompts.tool_schema()


def test_the_prompt_hash_follows_both_numbers():
    base = Prompts(max_searches=5, papers_per_search=3)
    assert base.hash() == Prompts(max_searches=5, papers_per_search=3).hash() and re.fullmatch(r"[0-9a-f]{16}",
                                                                                               base.hash())
    assert len({base.hash(), Prompts(5, 5).hash(), Prompts(4, 3).hash(), Prompts(4, 5).hash()}) == 4


@pytest.mark.parametrize("name", ["system", "user", "intervention", "refusal"])
def test_the_prompt_hash_covers_every_prompt(monkeypatch, name):
    before = Prompts(5, 3).hash()
    raw = prompts_mod._raw
    monkeypatch.setattr(prompts_mod, "_raw", lambda n: raw(n) + (" changed" if n == name else ""))
    assert Prompts(5, 3).hash() != before


def test_the_prompt_hash_covers_the_tool_schema(monkeypatch):
    before = Prompts(5, 3).hash()
    real = tools_mod.tool_schema

    def edited(papers):
        schema = real(papers)
        schema["function"]["parameters"]["properties"]["query"]["description"] += " Be brief."
        return schema

    monkeypatch.setattr(tools_mod, "tool_schema", edited)
    assert Prompts(5, 3).hash() != before
