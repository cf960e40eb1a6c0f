"""Training sees what inference sees: TRL's tool loop over SearchEnv vs the LangGraph agent."""

from __future__ import annotations

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.agent.llm.scripted import ScriptedChat
from biocheck.agent.tools import TOOL_SCHEMA
from biocheck.pubmed.search import SearchConfig, search_tool
from biocheck.train.dataset import prompt_messages
from biocheck.train.env import SearchEnv
from tests.test_agent import REPORT, search


def trl_conversation(env: SearchEnv, prompt: list[dict], turns: list[dict], max_iterations: int) -> list[dict]:
    """What GRPOTrainer._tool_call_loop builds: assistant turns, then {"role": "tool", "name", "content"}
    from calling the environment's methods, for at most max_tool_calling_iterations rounds."""
    msgs = list(prompt)
    for i, turn in enumerate(turns):
        calls = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for c in turn.get("tool_calls", [])]
        msgs.append({"role": "assistant", "content": turn.get("content", ""), **({"tool_calls": calls} if calls else {})})
        if not calls or i == max_iterations:  # past the limit a call is parsed but not run: the completion ends
            break
        for c in calls:
            msgs.append({"role": "tool", "name": c["function"]["name"],
                         "content": str(getattr(env, c["function"]["name"])(**c["function"]["arguments"]))})
    return msgs


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


@pytest.mark.parametrize("n_searches, budget", [(2, 3), (4, 3)])
def test_training_and_inference_render_the_same_text(evidence, tokenizer, n_searches, budget):
    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=2))
    turns = [search(q) for q in ["vitamin D AND fracture*", "aspirin[ti]", "coffee", "statin*"][:n_searches]]
    turns.insert(1, {"tool_calls": [{"name": "search_pubmed", "arguments": {}}]})  # a call without a query
    turns.append({"content": REPORT})
    agent = Agent(ScriptedChat(turns), tool, AgentConfig(llm="scripted:x", max_searches=budget, max_refusals=1,
                                                         abstract_chars=120))
    ep = agent.run("Vitamin D prevents fractures.")
    env = SearchEnv(tool, agent.prompts, budget, abstract_chars=120)
    prompt = prompt_messages(agent.prompts, "Vitamin D prevents fractures.")
    assert prompt == ep.messages[:2]
    trl = trl_conversation(env, prompt, turns, max_iterations=budget + 1)  # max_searches + max_refusals

    def render(messages, tools):
        return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)

    # TRL renders the environment's bound methods as the tools; we render our schema.
    assert render(ep.messages, [TOOL_SCHEMA]) == render(trl, [env.search_pubmed])
    assert env.queries == [q.query for q in ep.queries] and set(env.ledger) == set(ep.ledger)
    assert env.searches == ep.searches == min(n_searches + 1, budget)


def test_env_resets_between_rollouts(evidence):
    cfg, _ = evidence
    from biocheck.agent.prompts import Prompts

    env = SearchEnv(search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store)), Prompts(max_searches=1), 1)
    first = env.search_pubmed("coffee")
    assert first.endswith(Prompts(max_searches=1).intervention()) and env.ledger
    assert env.search_pubmed("coffee").startswith("Not run")
    env.reset(claim="x", label="SUPPORTED")
    assert env.searches == 0 and env.ledger == {} and env.queries == [] and env.row["label"] == "SUPPORTED"
