"""Agent episodes as MLflow traces (the Traces tab of the run's experiment), built from the episode record.

One trace per episode: a root span `episode` (AGENT; inputs: the claim, its id and dataset; outputs: the
conclusion, the report and its parse problems), then, in the order they happened, one `llm` span per model
turn (CHAT_MODEL; outputs: its text and tool calls) and one `search_pubmed` span per search the budget ran
(RETRIEVER; inputs: the query; outputs: the PMIDs, titles, hit count and error) or `tool call (not run)`
for a call the budget refused or could not run. The spans are written after the episode, from the same
`Episode` that `--trace` writes, so tracing costs nothing while the agent runs, and nothing at all when
tracking is off (no MLflow import). Every string passes `secrets.redact_json` first.

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


def _steps(ep: Episode) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(name, span type, inputs, outputs) of each step in order: model turns, and after each turn its tool
    calls (a search matched to the budget's query log in order; a call that ran no search: not run)."""
    from mlflow.entities import SpanType

    queries = list(ep.queries)
    steps = []
    turn = 0
    for m in ep.messages:
        if m.get("role") != "assistant":
            continue
        turn += 1
        steps.append((f"llm turn {turn}", SpanType.CHAT_MODEL, {}, _turn(m)))
        for call in m.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, Mapping) else None  # graph.tool_messages reads the same
            fn = fn if isinstance(fn, Mapping) else {}
            args = fn.get("arguments")
            query = args.get("query") if isinstance(args, Mapping) else None
            if fn.get("name") == TOOL_NAME and isinstance(query, str) and queries and queries[0].query == query:
                q = queries.pop(0)
                steps.append((TOOL_NAME, SpanType.RETRIEVER, {"query": q.query}, _search_output(ep, q)))
            else:
                steps.append(("tool call (not run)", SpanType.TOOL, {"call": call}, {}))
    for q in queries:  # searches no message names (a trace cut short): still shown
        steps.append((TOOL_NAME, SpanType.RETRIEVER, {"query": q.query}, _search_output(ep, q)))
    return steps


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
                                                                    "stop_reason": ep.stop_reason, **ep.timing}))
        try:
            for step, kind, step_in, step_out in _steps(ep):
                span = mlflow.start_span_no_context(step, span_type=kind, parent_span=root, inputs=redact_json(step_in))
                span.end(outputs=redact_json(step_out))
        finally:
            root.end(outputs=redact_json({"conclusion": _conclusion(ep), "searches": ep.searches,
                                          "report": ep.report.model_dump(mode="json"),
                                          "parse_problems": list(ep.parse_problems)}))
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
