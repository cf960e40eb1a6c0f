"""Agent episodes as MLflow traces (the Traces tab of the run's experiment), built from the episode record.

One trace per episode: a root span `episode` (AGENT; inputs: the claim, its id and dataset; outputs: the
conclusion, the report and its parse problems), then, in the order they happened, one `llm` span per model
turn (CHAT_MODEL; outputs: its text and tool calls) and one `search_pubmed` span per search the budget ran
(RETRIEVER; inputs: the query; outputs: the PMIDs, titles, hit count and error) or `tool call (not run)`
for a call the budget refused or could not run. Each span starts and ends when its step did: the episode
records the wall-clock times of itself, each model turn and each search while it runs (`Episode.clock`), and
the spans are written with those times after the episode, from the same `Episode` that `--trace` writes. So
a trace shows where an episode's time went, also for an episode that ran on a Dask worker or came from the
evaluation's cache; tracing costs nothing while the agent runs, and nothing at all when tracking is off (no
MLflow import). A step with no recorded time (an episode written before they were) gets the time of writing,
as before. Every string passes `secrets.redact_json` first.

`biocheck check --mlflow` traces its episode; `evaluate` traces the first `tracking.trace_samples` episodes
of each system and dataset (docs/mlflow.md, "Agent traces").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from biocheck import tracking
from biocheck.agent.episode import Episode
from biocheck.agent.tools import TOOL_NAME
from biocheck.secrets import redact_json

log = logging.getLogger(__name__)

TEXT_CHARS = 4000  # a model turn's text in a span (a trace is for reading, the full text is in the episode)


def _conclusion(ep: Episode) -> str | None:
    label = getattr(ep.report, "conclusion", None)
    return getattr(label, "value", label)


def _search_output(ep: Episode, q: Any) -> dict[str, Any]:
    titles = [ep.ledger[p].title if p in ep.ledger else None for p in q.pmids]
    return {"n_results": q.n_results, "pmids": list(q.pmids), "titles": titles, "error": q.error}


def _turn(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"content": str(message.get("content") or "")[:TEXT_CHARS], "tool_calls": message.get("tool_calls") or []}


Times = tuple[int, int] | None  # a step's start and end, ns since the epoch (None: not recorded)


def _times(ep: Episode, kind: str) -> list[Times]:
    return [(int(a), int(b)) for a, b in ep.clock.get(kind, [])]


def _steps(ep: Episode) -> list[tuple[str, str, dict[str, Any], dict[str, Any], Times]]:
    """(name, span type, inputs, outputs, times) of each step in order: model turns, and after each turn its
    tool calls (a search matched to the budget's query log in order; a call that ran no search: not run, at
    the end of its turn)."""
    from mlflow.entities import SpanType

    queries = list(ep.queries)
    turn_times, search_times = _times(ep, "llm"), _times(ep, "search")
    searched = len(ep.queries) - len(search_times)  # the first searches with no recorded time (none, normally)
    steps = []
    turn = 0
    for m in ep.messages:
        if m.get("role") != "assistant":
            continue
        turn += 1
        at = turn_times[turn - 1] if turn <= len(turn_times) else None
        steps.append((f"llm turn {turn}", SpanType.CHAT_MODEL, {}, _turn(m), at))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None  # graph.tool_messages reads the same
            fn = fn if isinstance(fn, Mapping) else {}
            args = fn.get("arguments")
            query = args.get("query") if isinstance(args, Mapping) else None
            if fn.get("name") == TOOL_NAME and isinstance(query, str) and queries and queries[0].query == query:
                q = queries.pop(0)
                steps.append((TOOL_NAME, SpanType.RETRIEVER, {"query": q.query}, _search_output(ep, q),
                              _search_time(search_times, searched)))
                searched += 1
            else:
                steps.append(("tool call (not run)", SpanType.TOOL, {"call": call}, {}, at and (at[1], at[1])))
    for q in queries:  # searches no message names (a trace cut short): still shown
        steps.append((TOOL_NAME, SpanType.RETRIEVER, {"query": q.query}, _search_output(ep, q),
                      _search_time(search_times, searched)))
        searched += 1
    return steps


def _search_time(search_times: list[Times], k: int) -> Times:
    return search_times[k] if 0 <= k < len(search_times) else None


def log_episode(ep: Episode, name: str = "episode", tags: Mapping[str, str] | None = None) -> str | None:
    """Log `ep` as one trace in the active run (its experiment, linked to the run); returns the trace id,
    None when tracking is off, outside a run, or when logging fails (one warning, tracking goes off)."""
    if not tracking.enabled():
        return None
    import mlflow
    from mlflow.entities import SpanType

    active = mlflow.active_run()
    if active is None:
        return None
    whole = (_times(ep, "episode") or [None])[0]
    with tracking.guard("logging an agent trace"):
        inputs = {"claim": ep.claim, "claim_id": ep.claim_id, "dataset": ep.dataset,
                  "gold_label": ep.gold_label.value if ep.gold_label else None}
        root = mlflow.start_span_no_context(name, span_type=SpanType.AGENT, inputs=redact_json(inputs),
                                            experiment_id=active.info.experiment_id,
                                            tags=redact_json({"mlflow.sourceRun": active.info.run_id,
                                                              **dict(tags or {})}),
                                            attributes=redact_json({"llm": ep.llm, "llm_fingerprint": ep.llm_fingerprint,
                                                                    "prompt_hash": ep.prompt_hash,
                                                                    "search_backend": ep.search_backend,
                                                                    "stop_reason": ep.stop_reason, **ep.timing}),
                                            start_time_ns=whole[0] if whole else None)
        try:
            for step, kind, step_in, step_out, at in _steps(ep):
                span = mlflow.start_span_no_context(step, span_type=kind, parent_span=root, inputs=redact_json(step_in),
                                                    start_time_ns=at[0] if at else None)
                span.end(outputs=redact_json(step_out), end_time_ns=at[1] if at else None)
        finally:
            root.end(outputs=redact_json({"conclusion": _conclusion(ep), "searches": ep.searches,
                                          "report": ep.report.model_dump(mode="json"),
                                          "parse_problems": list(ep.parse_problems)}),
                     end_time_ns=whole[1] if whole else None)
        return root.trace_id
    return None


def log_sample(episodes: Sequence[Episode | None], n: int, tags: Mapping[str, str] | None = None) -> list[str]:
    """Trace the first `n` episodes (missing ones skipped) in the active run; the trace ids."""
    ids = []
    for ep in [e for e in episodes if e is not None][: max(0, n)]:
        trace_id = log_episode(ep, tags=tags)
        if trace_id is None:
            break
        ids.append(trace_id)
    return ids


def log_folder(folder: Any, n: int, tags: Mapping[str, str] | None = None) -> list[str]:
    """Trace the first `n` episode files (by name) of a `check --claims --out` folder in the active run."""
    from pathlib import Path

    episodes: list[Episode | None] = []
    for path in sorted(Path(folder).glob("*.json")):
        if len(episodes) >= n:
            break
        try:
            episodes.append(Episode.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # summary.json, a file cut short: not an episode
    return log_sample(episodes, n, tags=tags)
