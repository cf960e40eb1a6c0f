"""The agent as a LangGraph state machine: llm -> tools -> ... -> intervention -> llm -> END.

  llm           the chat model with `search_pubmed` offered as its one tool
  tools         runs the requested searches through the evidence layer; papers come back as text
  intervention  once the search budget is spent: appends the "write the report now" instruction to
                the last tool result, and refuses (does not run) any further tool call

The intervention reaches the model inside the last tool result rather than as a new user turn, the
same place a tool-calling trainer can put it, so training and inference present it identically.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from biocheck.agent.llm.base import ChatLLM, LLMError
from biocheck.agent.prompts import Prompts
from biocheck.agent.tools import MISSING_QUERY, TOOL_NAME, TOOL_SCHEMA, format_results


@dataclass
class Replace:
    """A state update that replaces message `index` instead of appending."""

    index: int
    message: dict[str, Any]


def merge_messages(left: list[dict], right: list[dict | Replace]) -> list[dict]:
    out = list(left)
    for item in right:
        if isinstance(item, Replace):
            out[item.index] = item.message
        else:
            out.append(item)
    return out


def merge_ledger(left: dict[str, dict], right: dict[str, dict]) -> dict[str, dict]:
    return {**right, **left}  # first retrieval of a paper wins (it keeps the query that found it first)


class AgentState(TypedDict, total=False):
    messages: Annotated[list[dict], merge_messages]
    searches: int  # search_pubmed calls executed (the budget counts these)
    refusals: int  # rounds of tool calls refused after the budget was spent
    llm_calls: int
    queries: Annotated[list[dict], operator.add]  # {query, pmids, error, n_results}
    ledger: Annotated[dict[str, dict], merge_ledger]  # pmid -> article dict (+ "query_index")
    tool_errors: Annotated[list[str], operator.add]
    llm_seconds: Annotated[float, operator.add]
    search_seconds: Annotated[float, operator.add]
    exhausted_at: int  # index of the tool message whose search spent the budget
    stop_reason: str


@dataclass
class GraphConfig:
    max_searches: int = 5
    max_refusals: int = 2  # refuse-and-remind rounds after the budget before giving up on a report
    abstract_chars: int | None = None  # truncate abstracts in tool results (small-context models)


def build_graph(llm: ChatLLM, tool, cfg: GraphConfig, prompts: Prompts):
    """Compile the graph for one (llm, search tool, limits) triple; invoke it once per claim."""

    def llm_node(state: AgentState) -> dict:
        t0 = time.perf_counter()
        try:
            turn = llm.chat(state["messages"], [TOOL_SCHEMA])
        except LLMError as e:  # a dead server ends this episode, not the whole batch
            return {"stop_reason": f"llm_error: {e}", "llm_seconds": time.perf_counter() - t0,
                    "llm_calls": state.get("llm_calls", 0) + 1}
        msg = turn.to_message()
        if turn.raw is not None:
            msg["raw"] = turn.raw  # kept for traces; chat templates ignore unknown keys
        return {"messages": [msg], "llm_calls": state.get("llm_calls", 0) + 1,
                "llm_seconds": time.perf_counter() - t0}

    def tools_node(state: AgentState) -> dict:
        calls = state["messages"][-1].get("tool_calls") or []
        searches = state.get("searches", 0)
        messages, queries, ledger, errors = [], [], {}, []
        seconds = 0.0
        exhausted_at = state.get("exhausted_at")
        for call in calls:
            fn = call.get("function") or {}
            name, args = fn.get("name"), fn.get("arguments") or {}
            query = args.get("query") if isinstance(args, dict) else None
            if name != TOOL_NAME:
                text = f"Unknown tool {name!r}: the only tool is {TOOL_NAME}(query)."
                errors.append(text)
            elif searches >= cfg.max_searches:
                text = prompts.refusal() + " " + prompts.intervention()
            elif not isinstance(query, str):
                text = MISSING_QUERY
                errors.append(text)
                searches += 1
            else:
                t0 = time.perf_counter()
                out = tool.run(query)
                seconds += time.perf_counter() - t0
                searches += 1
                index = len(state.get("queries", [])) + len(queries)
                queries.append({"query": query, "pmids": [r["pmid"] for r in out.results], "error": out.error,
                                "n_results": len(out.results), "backend": out.backend,
                                "translation": out.translation})
                for a in out.articles:
                    ledger.setdefault(a.pmid, {**a.model_dump(), "query_index": index})
                if out.error:
                    errors.append(out.error)
                text = format_results(out, cfg.abstract_chars)
            if searches == cfg.max_searches and exhausted_at is None:
                exhausted_at = len(state["messages"]) + len(messages)
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "name": name or "", "content": text})
        update = {"messages": messages, "searches": searches, "queries": queries, "ledger": ledger,
                  "tool_errors": errors, "search_seconds": seconds}
        if exhausted_at is not None:
            update["exhausted_at"] = exhausted_at
        return update

    def intervention_node(state: AgentState) -> dict:
        last = state["messages"][-1]
        if last.get("role") == "tool":
            # The budget was just spent: the reminder goes into the result of the search that spent it
            # (a tool-calling trainer can only speak through that result); later calls were refused.
            i = state.get("exhausted_at", len(state["messages"]) - 1)
            spent = state["messages"][i]
            return {"messages": [Replace(i, {**spent, "content": spent["content"] + "\n\n" + prompts.intervention()})]}
        refused = [{"role": "tool", "tool_call_id": c.get("id", ""), "name": (c.get("function") or {}).get("name", ""),
                    "content": prompts.refusal() + " " + prompts.intervention()} for c in last.get("tool_calls") or []]
        return {"messages": refused, "refusals": state.get("refusals", 0) + 1}

    def after_llm(state: AgentState) -> str:
        if state.get("stop_reason"):
            return END
        if not state["messages"][-1].get("tool_calls"):
            return "final"
        if state.get("searches", 0) < cfg.max_searches:
            return "tools"
        return "intervention" if state.get("refusals", 0) < cfg.max_refusals else "refusals_exhausted"

    def after_tools(state: AgentState) -> str:
        return "intervention" if state.get("searches", 0) >= cfg.max_searches else "llm"

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
    g.add_conditional_edges("tools", after_tools, ["llm", "intervention"])
    g.add_edge("intervention", "llm")
    g.add_edge("final", END)
    g.add_edge("refusals_exhausted", END)
    return g.compile()


def recursion_limit(cfg: GraphConfig) -> int:
    # Each round is llm + tools (+ intervention); generous headroom, but a hard stop all the same.
    return 4 * (cfg.max_searches + cfg.max_refusals) + 10
