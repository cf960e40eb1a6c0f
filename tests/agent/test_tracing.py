"""Agent traces in MLflow (agent/tracing.py): `biocheck check --mlflow` logs its episode as a trace with one
span per search (query in, PMIDs and titles out) and the report as the root's output, secrets blanked; a
batch traces `tracking.trace_samples` episodes; nothing is traced without --mlflow."""

from __future__ import annotations

import json
import time

import mlflow
import pytest
import yaml
from typer.testing import CliRunner

from biocheck.agent import tracing
from biocheck.agent.episode import Agent, AgentConfig
from biocheck.cli import app
from biocheck.evidence.search import SearchConfig, SearchTool, search_tool
from biocheck.llm.scripted import ScriptedChat
from biocheck.tracking import tracking_uri
from tests.helpers.turns import REPORT, search

runner = CliRunner()
SECRET = "sk-trace-secret-0123456789"


@pytest.fixture
def workdir(evidence_workdir, monkeypatch):
    monkeypatch.delenv("BIOCHECK_TRACKING", raising=False)
    for name in ("BIOCHECK_PIPELINE_ID", "DVC_STAGE", "DVC_ROOT"):
        monkeypatch.delenv(name, raising=False)
    script = [search("vitamin D AND fracture*"), {"content": REPORT}]
    (evidence_workdir / "script.json").write_text(json.dumps(script))
    return evidence_workdir


def _check_run() -> mlflow.entities.Run:
    mlflow.set_tracking_uri(tracking_uri())
    [run] = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string="tags.stage = 'check'",
                               order_by=["start_time DESC"], max_results=1, output_format="list")
    return run


def _spans(trace, name: str) -> list:
    return [s for s in trace.data.spans if s.name == name]


def test_check_mlflow_logs_the_episode_as_a_trace_with_its_searches_and_report(workdir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    r = runner.invoke(app, ["check", f"Vitamin D prevents fractures {SECRET}.", "--llm", "scripted:script.json",
                            "--mlflow"])
    assert r.exit_code == 0, r.output
    run = _check_run()
    traces = mlflow.search_traces(run_id=run.info.run_id, return_type="list", flush=True)
    assert len(traces) == 1
    [trace] = traces
    [root] = [s for s in trace.data.spans if s.parent_id is None]
    assert root.name == "episode" and root.span_type == "AGENT"
    assert root.inputs["claim"] == "Vitamin D prevents fractures ***."  # the secret blanked
    assert root.outputs["conclusion"] == "SUPPORTED" and root.outputs["report"]["supporting"][0]["pmid"] == "101"
    [hit] = _spans(trace, "search_pubmed")
    assert hit.span_type == "RETRIEVER" and hit.parent_id == root.span_id
    assert hit.inputs == {"query": "vitamin D AND fracture*"}
    assert hit.outputs["pmids"][0] == "101" and hit.outputs["n_results"] == len(hit.outputs["pmids"])
    assert all(isinstance(t, str) and t for t in hit.outputs["titles"])
    assert [s.name for s in sorted(trace.data.spans, key=lambda s: s.start_time_ns)] == [
        "episode", "llm turn 1", "search_pubmed", "llm turn 2"]
    assert SECRET not in json.dumps(trace.to_dict(), default=str)


def test_a_batch_traces_trace_samples_episodes(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["tracking"]["trace_samples"] = 2
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    (workdir / "claims.jsonl").write_text("".join(json.dumps({"id": i, "claim": f"Vitamin D claim {i}."}) + "\n"
                                                  for i in "abc"))
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json",
                            "--mlflow"])
    assert r.exit_code == 0, r.output
    traces = mlflow.search_traces(run_id=_check_run().info.run_id, return_type="list", flush=True)
    claims = sorted(next(s for s in t.data.spans if s.parent_id is None).inputs["claim_id"] for t in traces)
    assert claims == ["a", "b"]


def test_no_trace_without_mlflow(workdir, monkeypatch):
    import biocheck.agent.tracing as tracing

    called = []
    monkeypatch.setattr(tracing, "log_episode", lambda *a, **k: called.append(a))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    assert called == []


@pytest.mark.parametrize("value", [-1, 1.5, "3", True])
def test_trace_samples_must_be_a_whole_number(workdir, value):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["tracking"]["trace_samples"] = value
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json", "--mlflow"])
    assert r.exit_code == 1 and "error:" in r.output and "trace_samples" in r.output
    assert "Traceback" not in r.output


class _SlowChat(ScriptedChat):
    """Scripted turns that take a while, as a model's do."""

    def chat(self, messages, tools):
        time.sleep(0.02)
        return super().chat(messages, tools)


class _SlowTool(SearchTool):
    def run(self, query, n=None):
        time.sleep(0.02)
        return super().run(query, n)


def test_spans_start_and_end_when_their_steps_ran(workdir, evidence):
    """The spans carry the times each step ran (recorded in the episode), not the moment they were written."""
    cfg, _ = evidence
    inner = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=3))
    agent = Agent(_SlowChat([search("vitamin D AND fracture*"), {"content": REPORT}]),
                  _SlowTool(inner.backend, inner.max_results), AgentConfig(llm="scripted:<inline>"))
    ep = agent.run("Vitamin D prevents fractures.")
    written = time.time_ns()
    mlflow.set_tracking_uri(tracking_uri())
    with mlflow.start_run() as run:
        trace_id = tracing.log_episode(ep)
    [trace] = mlflow.search_traces(run_id=run.info.run_id, return_type="list", flush=True)
    assert trace.info.trace_id == trace_id
    spans = sorted(trace.data.spans, key=lambda s: s.start_time_ns)
    assert [s.name for s in spans] == ["episode", "llm turn 1", "search_pubmed", "llm turn 2"]
    root, turn1, hit, turn2 = spans
    assert root.end_time_ns <= written  # every span ended before the trace was written
    # in the order they ran, one after the other, within the episode
    assert root.start_time_ns <= turn1.start_time_ns < turn1.end_time_ns <= hit.start_time_ns < hit.end_time_ns
    assert hit.end_time_ns <= turn2.start_time_ns < turn2.end_time_ns <= root.end_time_ns

    def seconds(span) -> float:
        return (span.end_time_ns - span.start_time_ns) / 1e9

    # each span lasts as long as the episode says its step took (its own clock, rounded to 0.1 ms)
    assert seconds(hit) >= ep.timing["search_s"] - 1e-4
    assert seconds(turn1) + seconds(turn2) >= ep.timing["llm_s"] - 1e-4
    assert seconds(root) >= ep.timing["total_s"] - 1e-4
    assert seconds(root) >= seconds(turn1) + seconds(hit) + seconds(turn2)
