"""Training sees what inference sees: TRL's tool loop over SearchEnv vs the LangGraph agent, rendered to text.

tests/agent/test_budget.py compares the two adapters call by call (texts, ledgers, query logs); here whole
episodes go through the tiny model's chat template, the text the model is trained on and generates from.
"""

from __future__ import annotations

import inspect

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.data.schema import ClaimRecord
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.llm.scripted import ScriptedChat
from biocheck.train.dataset import to_rows
from biocheck.train.env import SearchEnv, ToolTable, make_env
from tests.helpers.turns import REPORT, search

CLAIM = "Vitamin D prevents fractures."


def trl_tools(env: SearchEnv) -> dict:
    """The tool dict GRPOTrainer builds per rollout: the env's public functions but reset/get_reward, by name."""
    return {name: getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")}


def trl_conversation(env: SearchEnv, prompt: list[dict], turns: list[dict], max_iterations: int) -> list[dict]:
    """What GRPOTrainer._tool_call_loop (TRL 1.16) builds: assistant turns, then {"role": "tool", "name",
    "content"} from calling the environment's methods, for at most max_tool_calling_iterations rounds.
    A call that raises reads TRL's own {"error": ...} text; BioCheckGRPOTrainer gives TRL a ToolTable, so a
    name that is not a tool goes to the env's budget as in the agent."""
    tools = ToolTable(trl_tools(env), env)
    msgs = list(prompt)
    for i, turn in enumerate(turns):
        calls = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for c in turn.get("tool_calls", [])]
        msgs.append({"role": "assistant", "content": turn.get("content", ""), **({"tool_calls": calls} if calls else {})})
        if not calls or i == max_iterations:  # past the limit a call is parsed but not run: the completion ends
            break
        for c in calls:
            name = c["function"]["name"]
            try:
                if name not in tools:
                    raise ValueError(f"Tool {name} not found.")
                result = tools[name](**c["function"]["arguments"])
            except Exception as e:  # noqa: BLE001 - TRL turns any failure into a tool message
                result = {"error": str(e)}
            msgs.append({"role": "tool", "name": name, "content": str(result)})
    return msgs


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def both(evidence, turns, budget: int, max_refusals: int = 1):
    """The agent's episode and TRL's conversation over the same scripted turns, with the same tool and prompts."""
    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=2))
    agent = Agent(ScriptedChat(turns), tool, AgentConfig(llm="scripted:x", max_searches=budget,
                                                         max_refusals=max_refusals, abstract_chars=120))
    ep = agent.run(CLAIM)
    env = make_env(tool, agent.prompts, budget, abstract_chars=120)
    row = to_rows([ClaimRecord(id="c1", dataset="scifact", split="train", claim=CLAIM, label="SUPPORTED")],
                  agent.prompts)[0]
    env.reset(**row)
    assert row["prompt"] == ep.messages[:2]  # the dataset's prompt is the agent's opening
    trl = trl_conversation(env, row["prompt"], turns, max_iterations=budget + max_refusals)
    return agent, ep, env, trl


@pytest.mark.parametrize("n_searches, budget", [(2, 3), (4, 3)])
def test_training_and_inference_render_the_same_text(evidence, tokenizer, n_searches, budget):
    turns = [search(q) for q in ["vitamin D AND fracture*", "aspirin[ti]", "coffee", "statin*"][:n_searches]]
    turns.insert(1, {"tool_calls": [{"name": "search_pubmed", "arguments": {}}]})  # a call without a query
    turns.insert(2, {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": "coffee", "n": 9}}]})  # extra arg
    turns.append({"content": REPORT})
    agent, ep, env, trl = both(evidence, turns, budget)

    def render(messages, tools):
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)

    # TRL renders the environment's bound methods as the tools; the agent renders the prompts' schema.
    assert render(ep.messages, [agent.prompts.tool_schema()]) == render(trl, list(trl_tools(env).values()))
    assert "up to two papers" in render(trl, list(trl_tools(env).values()))  # the tool returns 2, and says so
    b = env.budget
    assert b.queries == ep.queries and b.ledger == ep.ledger and b.errors == ep.tool_errors
    assert b.searches == ep.searches == min(n_searches + 2, budget)


def test_an_unknown_tool_reads_the_same_in_training_and_inference(evidence):
    turns = [{"tool_calls": [{"name": "google", "arguments": {"query": "x"}}]}, search("coffee"), {"content": REPORT}]
    _, ep, env, trl = both(evidence, turns, budget=1)
    assert [m["content"] for m in trl if m["role"] == "tool"] == [m["content"] for m in ep.messages
                                                                  if m["role"] == "tool"]
    assert env.budget.searches == ep.searches


def test_env_resets_between_rollouts(evidence):
    cfg, _ = evidence
    from biocheck.agent.prompts import Prompts

    env = make_env(search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store)), Prompts(max_searches=1), 1)
    first = env.search_pubmed("coffee")
    assert first.endswith(Prompts(max_searches=1).intervention()) and env.budget.ledger
    assert env.search_pubmed("coffee").startswith("Not run")
    env.reset(claim="x", label="SUPPORTED")
    b = env.budget
    assert b.searches == 0 and b.ledger == {} and b.queries == [] and env.row["label"] == "SUPPORTED"


def test_the_trainer_routes_unknown_tools_to_each_rollouts_budget(evidence):
    """BioCheckGRPOTrainer's tool round sees ToolTables: TRL's `name in tools` / `tools[name](**args)` then reach
    the env's SearchBudget for a name it does not have, per rollout, and only for our environments."""
    from biocheck.agent.prompts import Prompts
    from biocheck.train.grpo import UnknownToolsMixin

    seen = []

    class Base:
        def _tool_call_loop(self, *args, **kwargs):
            seen.append((args, kwargs, list(self._sync_tool_dicts)))
            return "done"

    class Trainer(UnknownToolsMixin, Base):
        pass

    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=2))
    envs = [make_env(tool, Prompts(max_searches=1, papers_per_search=2), 1) for _ in range(2)]
    t = Trainer()
    t.environments = [*envs, object()]
    t._sync_tool_dicts = [trl_tools(e) for e in envs] + [{"other": len}]
    assert t._tool_call_loop(1, k=2) == "done"
    [(args, kwargs, tables)] = seen
    assert (args, kwargs) == ((1,), {"k": 2})
    assert [type(x) for x in tables] == [ToolTable, ToolTable, dict]  # a foreign environment keeps TRL's dict
    assert "google" in tables[0] and "google" not in tables[2]
    text = tables[0]["google"](query="x")
    assert text.startswith("Unknown tool 'google'") and envs[0].budget.searches == 1 and envs[1].budget.searches == 0
    tables[1]["search_pubmed"](query="coffee")  # the env's own tool is TRL's bound method, untouched
    assert envs[1].budget.query_texts() == ["coffee"] and envs[0].budget.queries == []
    t._tool_call_loop()
    assert seen[-1][2][0] is tables[0]  # installed once, not wrapped again each round
