"""Run the agent on one claim and keep everything that happened: the episode trace.

The trace (`Episode`) is what `biocheck check --trace` writes and what rewards, scoring and
evaluation read: messages, tool calls and results, the ledger of retrieved papers, the raw final
text, the parsed report and its parse problems, and the model and prompt fingerprints.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from biocheck import __version__
from biocheck.agent.budget import OnSearch, QueryRecord, SearchBudget, check_budget
from biocheck.agent.graph import GraphConfig, build_graph, recursion_limit
from biocheck.agent.limits import MAX_REFUSALS, MAX_SEARCHES
from biocheck.agent.prompts import Prompts
from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.schema import Report
from biocheck.bounds import Count, NonNegative, NonNegativeFloat, Positive, PositiveShare
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.llm.base import REQUEST_TIMEOUT_S, ChatLLM


@dataclass
class AgentConfig:
    llm: str = "transformers:models/base"  # spec string (see biocheck.llm)
    max_searches: NonNegative = MAX_SEARCHES
    max_refusals: NonNegative = MAX_REFUSALS
    # Nonsense in these would not fail: it would silently cut every abstract or never generate a word.
    abstract_chars: Count | None = None  # null: the whole abstract
    max_new_tokens: Count = 1024
    temperature: NonNegativeFloat = 0.0  # 0: greedy
    top_p: PositiveShare = 1.0
    seed: int | None = 0
    workers: Count = 1  # episodes in parallel (batch mode)
    request_timeout_s: Positive = REQUEST_TIMEOUT_S  # a model server's answer (openai:); a stalled one fails the episode
    # transformers: the weights' dtype (null: float32 on a CPU, bfloat16 on CUDA). bfloat16 on a CPU with avx512_bf16
    # multiplies ~3x as fast (docs/benchmarks.md) and changes the model's numbers, so greedy text may differ
    dtype: Literal["float32", "bfloat16"] | None = None
    # transformers: the KV cache of a turn. static: preallocated, written in place (1.5-2.5x a decode step on a CPU
    # at 1500 tokens); prefix: the prompt prefix all turns share (system prompt, tool schema: 824 of a smol turn 0's
    # 841 tokens) computed once and reused (docs/benchmarks.md). Exact in float32; bfloat16 may differ in the last bits.
    cache: Literal["dynamic", "static", "prefix"] = "dynamic"
    extra: dict[str, Any] = field(default_factory=dict)



class Episode(BaseModel):
    """One claim, one agent run: the complete trace."""

    claim: str
    claim_id: str | None = None
    dataset: str | None = None
    gold_label: Label | None = None
    messages: list[dict[str, Any]]
    queries: list[QueryRecord] = Field(default_factory=list)
    ledger: dict[str, Article] = Field(default_factory=dict)  # every paper retrieved, by pmid
    tool_errors: list[str] = Field(default_factory=list)
    final_text: str = ""
    report: Report
    parse_problems: list[str] = Field(default_factory=list)
    stop_reason: str = ""
    searches: int = 0
    llm_calls: int = 0
    llm: str = ""
    llm_fingerprint: str = ""
    prompt_hash: str = ""
    search_backend: str = ""
    config: dict[str, Any] = Field(default_factory=dict)
    run_key: dict[str, Any] = Field(default_factory=dict)  # what produced this trace (a batch rerun compares it)
    timing: dict[str, float] = Field(default_factory=dict)
    # when each part ran, wall-clock start and end in ns since the epoch: the episode ("episode": one pair), each
    # model turn ("llm") and each search in `queries` ("search"), in order; a trace's spans take these times
    clock: dict[str, list[tuple[int, int]]] = Field(default_factory=dict)
    started_at: str = ""
    biocheck_version: str = __version__


class Agent:
    """An LLM, a search tool and the limits, compiled into a graph; `run(claim)` -> Episode."""

    def __init__(self, llm: ChatLLM, tool, cfg: AgentConfig | None = None, search_backend: str = "",
                 prompts: Prompts | None = None) -> None:
        self.llm, self.tool = llm, tool
        self.cfg = cfg or AgentConfig()
        self.prompts = prompts or Prompts.for_tool(self.cfg.max_searches, tool)
        check_budget(self.prompts, self.cfg.max_searches)
        self.graph_cfg = GraphConfig(max_searches=self.cfg.max_searches, max_refusals=self.cfg.max_refusals)
        self.graph = build_graph(llm, self.graph_cfg, self.prompts)
        self.search_backend = search_backend
        self.llm_fingerprint = llm.fingerprint()
        self.prompts_hash = self.prompts.hash()
        self.on_search: OnSearch | None = None  # a status hook the caller sets (`check`'s stderr line); not in traces

    def initial_messages(self, claim: str) -> list[dict[str, Any]]:
        return self.prompts.messages(claim)

    def new_budget(self) -> SearchBudget:
        return SearchBudget(self.tool, self.prompts, self.cfg.max_searches, self.cfg.abstract_chars,
                            on_search=self.on_search)

    def run(self, claim: str, claim_id: str | None = None, dataset: str | None = None,
            gold_label: Label | str | None = None) -> Episode:
        started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        t0, began = time.perf_counter(), time.time_ns()
        budget = self.new_budget()
        state = self.graph.invoke({"messages": self.initial_messages(claim), "refusals": 0, "llm_calls": 0},
                                  {"recursion_limit": recursion_limit(self.graph_cfg),
                                   "configurable": {"budget": budget}})
        total, ended = time.perf_counter() - t0, time.time_ns()
        messages = state["messages"]
        last = messages[-1] if messages else {}
        final_text = last.get("content", "") if last.get("role") == "assistant" else ""
        parsed = parse_report(final_text)
        return Episode(
            claim=claim, claim_id=claim_id, dataset=dataset,
            gold_label=Label(gold_label) if gold_label else None,
            messages=messages, queries=list(budget.queries), ledger=dict(budget.ledger),
            tool_errors=list(budget.errors),
            final_text=final_text, report=parsed.report, parse_problems=parsed.problems,
            stop_reason=state.get("stop_reason", ""), searches=budget.searches,
            llm_calls=state.get("llm_calls", 0), llm=self.llm.spec, llm_fingerprint=self.llm_fingerprint,
            prompt_hash=self.prompts_hash, search_backend=self.search_backend,
            config=asdict(self.cfg),
            timing={"total_s": round(total, 4), "llm_s": round(state.get("llm_seconds", 0.0), 4),
                    "search_s": round(budget.search_seconds, 4)},
            clock={"episode": [(began, ended)], "llm": list(state.get("llm_times", [])),
                   "search": list(budget.search_times)},
            started_at=started,
        )
