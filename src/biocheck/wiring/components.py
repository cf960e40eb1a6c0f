"""The components every driver shares, built from typed configs: the search tool, the agent's prompts, the
agent, the judge. Training (train/training.py), evaluation (evaluate/systems), `biocheck check` and the
benchmarks build them here, so the agent that is trained is the agent that is evaluated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biocheck.params import DEFAULT_PARAMS
from biocheck.wiring.config import JudgeConfig, agent_config, params_of, search_config


def make_search_tool(search_cfg):
    from biocheck.evidence.search import search_tool

    return search_tool(search_cfg)


def make_prompts(agent_cfg, tool):
    """The agent's prompts for `agent_cfg` and `tool`: budget from `agent:`, papers per search from the tool
    (`Prompts.for_tool`, the one construction; the agent falls back to it too)."""
    from biocheck.agent.prompts import Prompts

    return Prompts.for_tool(agent_cfg.max_searches, tool)


def agent_generation(agent_cfg, batch: int):
    """The `GenerationConfig` of the agent's model from `agent:` (one place for the agent and every baseline);
    `batch`: the most concurrent greedy turns generated together."""
    from biocheck.llm import GenerationConfig

    return GenerationConfig(max_new_tokens=agent_cfg.max_new_tokens, temperature=agent_cfg.temperature,
                            top_p=agent_cfg.top_p, seed=agent_cfg.seed, request_timeout_s=agent_cfg.request_timeout_s,
                            batch=batch, dtype=agent_cfg.dtype, cache=agent_cfg.cache)


def make_agent(agent_cfg, search_cfg):
    from biocheck.agent.episode import Agent
    from biocheck.llm import make_llm

    gen = agent_generation(agent_cfg, agent_cfg.workers)
    tool = make_search_tool(search_cfg)
    return Agent(make_llm(agent_cfg.llm, gen), tool, agent_cfg, search_backend=search_cfg.backend,
                 prompts=make_prompts(agent_cfg, tool))


def make_judge(judge_cfg: JudgeConfig):
    from biocheck.rewards.judge import make_judge as _make

    return _make(judge_cfg.spec, batch_size=judge_cfg.batch_size, cache=judge_cfg.cache)


def agent(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, search: dict[str, Any] | None = None,
          **overrides: Any):
    """(Agent, AgentConfig, SearchConfig) for `biocheck check` and evaluation."""
    p = params_of(params)
    agent_cfg = agent_config(p, **overrides)
    search_cfg = search_config(p, options={"backend": "--search"}, **(search or {}))
    return make_agent(agent_cfg, search_cfg), agent_cfg, search_cfg
