"""The BioCheck agent as an evaluated system (`base`, `eg_grpo`, `outcome_only`) and its label-only twin
(`pmsearch`: the same graph, tool and budgets, but the final answer is a label, not a report).

The agent is the one `biocheck check` runs (agent/episode.Agent): the agent that is trained is the agent that
is evaluated. Only the model spec differs between the three agent systems; only the prompts' report
instructions (Prompts(report=False)) set pmsearch apart.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from biocheck.agent.episode import Agent, AgentConfig, Episode
from biocheck.agent.prompts import Prompts
from biocheck.agent.report.schema import Report
from biocheck.agent.run import NOT_IN_KEY
from biocheck.data.schema import ClaimRecord
from biocheck.io import json_digest
from biocheck.llm.base import ChatLLM

NO_LABEL = "no label in the final answer"  # pmsearch's one parse problem


def settings_key(agent_cfg: AgentConfig, search_cfg: Any) -> dict[str, Any]:
    """The agent and search settings that change an answer (how many workers, timeouts and retries do not)."""
    agent = {k: v for k, v in dataclasses.asdict(agent_cfg).items() if k not in NOT_IN_KEY["agent"]}
    search = {} if search_cfg is None else (search_cfg if isinstance(search_cfg, dict) else dataclasses.asdict(search_cfg))
    search = {k: v for k, v in search.items() if k not in NOT_IN_KEY["search"]}
    return json.loads(json.dumps({"agent": agent, "search": search}, default=str))


def label_only(ep: Episode) -> Episode:
    """A label-only episode: the report is the conclusion and nothing else (no evidence, no summary).

    The conclusion is what the report parser reads from the final text (a bare label, "**Refuted**",
    a "Conclusion:" line, the last line after a <think> block); the missing-section notes are not
    problems for an answer that was asked to be a label.
    """
    conclusion = ep.report.conclusion
    return ep.model_copy(update={"report": Report(conclusion=conclusion),
                                 "parse_problems": [] if conclusion is not None else [NO_LABEL]})


class AgentSystem:
    """One model behind the BioCheck agent; `run(claim)` -> the agent's own Episode."""

    def __init__(self, name: str, llm: ChatLLM, tool: Any, agent_cfg: AgentConfig, search_cfg: Any,
                 prompts: Prompts, *, label_only: bool = False) -> None:
        self.name = name
        self.writes_report = not label_only
        self.label_only = label_only
        self.agent_cfg, self.search_cfg = agent_cfg, search_cfg
        backend = (search_cfg.get("backend") if isinstance(search_cfg, dict) else getattr(search_cfg, "backend", "")) or ""
        self.agent = Agent(llm, tool, agent_cfg, search_backend=backend,
                           prompts=dataclasses.replace(prompts, report=not label_only))
        self._fingerprint = json_digest({"llm_fingerprint": self.agent.llm_fingerprint,
                                     "prompt_hash": self.agent.prompts_hash, "search_backend": backend,
                                     **settings_key(agent_cfg, search_cfg)})

    def fingerprint(self) -> str:
        return self._fingerprint

    def run(self, claim: ClaimRecord) -> Episode:
        ep = self.agent.run(claim.claim, claim_id=claim.id, dataset=claim.dataset, gold_label=claim.label)
        return label_only(ep) if self.label_only else ep

    def describe(self) -> dict[str, Any]:
        """What MLflow and the gallery show about the system (tags)."""
        return {"llm": self.agent.llm.spec, "model_fingerprint": self.agent.llm_fingerprint,
                "prompt_hash": self.agent.prompts_hash}
