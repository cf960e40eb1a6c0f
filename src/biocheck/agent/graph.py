"""The agent as a LangGraph state machine: llm -> tools -> llm ... -> intervention -> llm -> END.

  llm           the chat model with `search_pubmed` offered as its one tool
  tools         hands the model's tool calls to the episode's SearchBudget (agent/budget.py), which
                runs the searches and appends the "write the report now" intervention to the result
                of the search that spends the budget
  intervention  tool calls after the budget is spent: the budget refuses them (not run) and repeats
                the intervention, at most `max_refusals` rounds; then the episode ends

The intervention reaches the model inside a tool result rather than as a new user turn, the same
place a tool-calling trainer can put it, so training and inference present it identically. The
budget is a per-episode object passed in the run config (`configurable.budget`), not graph state.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from biocheck.agent.budget import SearchBudget
from biocheck.agent.limits import MAX_REFUSALS, MAX_SEARCHES
from biocheck.agent.prompts import Prompts
from biocheck.llm.base import ChatLLM, LLMError
from biocheck.secrets import redact

LLM_ERROR = "llm_error"  # stop_reason prefix when the model could not answer (batch mode reports these as failures)


class AgentState(TypedDict, total=False):
    messages: Annotated[list[dict], operator.add]
    refusals: int  # rounds of tool calls refused after the budget was spent
    llm_calls: int
    llm_seconds: Annotated[float, operator.add]
    llm_times: Annotated[list[tuple[int, int]], operator.add]  # each turn's wall-clock start and end, ns since the epoch
    stop_reason: str


@dataclass
class GraphConfig:
    max_searches: int = MAX_SEARCHES
    max_refusals: int = MAX_REFUSALS


def tool_messages(budget: SearchBudget, message: dict[str, Any]) -> list[dict[str, Any]]:
    """One tool message per tool call of an assistant message, in order."""
    out = []
    for call in message.get("tool_calls") or []:
        call = call if isinstance(call, dict) else {}
        fn = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = fn.get("name")
        text = budget.call(name, fn.get("arguments"))
        out.append({"role": "tool", "tool_call_id": call.get("id", ""), "name": name if isinstance(name, str) else "",
                    "content": text})
    return out


def build_graph(llm: ChatLLM, cfg: GraphConfig, prompts: Prompts):
    """Compile the graph for one (llm, limits, prompts) triple; invoke it once per claim with a fresh budget."""
    tools = [prompts.tool_schema()]

    def llm_node(state: AgentState) -> dict:
        t0, began = time.perf_counter(), time.time_ns()
        try:
            turn = llm.chat(state["messages"], tools)
        except LLMError as e:  # a dead server ends this episode, not the whole batch
            return {"stop_reason": f"{LLM_ERROR}: {redact(e)}", "llm_seconds": time.perf_counter() - t0,
                    "llm_calls": state.get("llm_calls", 0) + 1, "llm_times": [(began, time.time_ns())]}
        msg = turn.to_message()
        if turn.raw is not None:
            msg["raw"] = turn.raw  # kept for traces; chat templates ignore unknown keys
        if getattr(turn, "usage", None):
            msg["usage"] = dict(turn.usage)  # tokens per claim in evaluation; never sent back to a server
        return {"messages": [msg], "llm_calls": state.get("llm_calls", 0) + 1,
                "llm_seconds": time.perf_counter() - t0, "llm_times": [(began, time.time_ns())]}

    def tools_node(state: AgentState, config) -> dict:
        return {"messages": tool_messages(config["configurable"]["budget"], state["messages"][-1])}

    def intervention_node(state: AgentState, config) -> dict:
        return {"messages": tool_messages(config["configurable"]["budget"], state["messages"][-1]),
                "refusals": state.get("refusals", 0) + 1}

    def after_llm(state: AgentState, config) -> str:
        if state.get("stop_reason"):
            return END
        if not state["messages"][-1].get("tool_calls"):
            return "final"
        if not config["configurable"]["budget"].exhausted:
            return "tools"
        return "intervention" if state.get("refusals", 0) < cfg.max_refusals else "refusals_exhausted"

    def stop(reason: str):
        return lambda state: {"stop_reason": reason}

    g = StateGraph(AgentState)
    g.add_node("llm", llm_node)
    g.add_node("tools", tools_node)
    g.add_node("intervention", intervention_node)
    g.add_node("final", stop("final_answer"))
    g.add_node("refusals_exhausted", stop("budget_refusals_exhausted"))
    g.add_edge(START, "llm")
    g.add_conditional_edges("llm", after_llm, ["tools", "intervention", "final", "refusals_exhausted", END])
    g.add_edge("tools", "llm")
    g.add_edge("intervention", "llm")
    g.add_edge("final", END)
    g.add_edge("refusals_exhausted", END)
    return g.compile()


def recursion_limit(cfg: GraphConfig) -> int:
    # Every round with tool calls spends a search or a refusal, so rounds are bounded by
    # max_searches + max_refusals; each round is two steps. A hard stop with headroom all the same.
    return 2 * (cfg.max_searches + cfg.max_refusals) + 10
