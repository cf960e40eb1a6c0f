"""`biocheck check`: one claim (md/json/html, --trace) and batches (--claims/--out, resume)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from biocheck.agent.episode import Episode
from biocheck.cli import app
from biocheck.report.render import render_html, render_json, render_markdown
from biocheck.report.schema import ParsedReport
from tests.test_agent import REPORT, search

runner = CliRunner()


@pytest.fixture
def workdir(evidence_workdir):
    script = [search("vitamin D AND fracture*"), {"content": REPORT}]
    (evidence_workdir / "script.json").write_text(json.dumps(script))
    return evidence_workdir


def test_single_claim_json_report_and_trace(workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json",
                            "--format", "json", "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["report"]["conclusion"] == "SUPPORTED" and report["report"]["supporting"][0]["pmid"] == "101"
    trace = json.loads((workdir / "t.json").read_text())
    assert trace["searches"] == 1 and set(trace["ledger"]) == {"101"} and trace["final_text"] == REPORT
    assert trace["llm"] == "scripted:script.json" and len(trace["prompt_hash"]) == 16
    assert [m["role"] for m in trace["messages"]] == ["system", "user", "assistant", "tool", "assistant"]


def test_html_is_escaped(workdir):
    r = runner.invoke(app, ["check", "<script>alert(1)</script> cures colds", "--llm", "scripted:script.json",
                            "--format", "html"])
    assert r.exit_code == 0, r.output
    assert "<html" in r.stdout.lower() and "<script>alert(1)</script>" not in r.stdout
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.stdout


def _expected(fmt: str, episode: Episode) -> str:
    """What `check --format fmt` must print for this episode, written with the renderers directly."""
    parsed = ParsedReport(report=episode.report, problems=episode.parse_problems)
    meta = {"llm": episode.llm, "llm_fingerprint": episode.llm_fingerprint, "prompt_hash": episode.prompt_hash,
            "search": episode.search_backend}
    return {"md": lambda: render_markdown(episode.report, ledger=episode.ledger, claim=episode.claim),
            "json": lambda: render_json(parsed),
            "html": lambda: render_html(episode.report, episode.ledger, episode.claim, problems=[], meta=meta)}[fmt]()


@pytest.mark.parametrize("fmt", [None, "md", "json", "html"])
def test_each_format_prints_its_renderer_output_and_markdown_is_the_default(workdir, fmt):
    args = ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json", "--trace", "t.json"]
    r = runner.invoke(app, args + (["--format", fmt] if fmt else []))
    assert r.exit_code == 0, r.output
    episode = Episode.model_validate_json((workdir / "t.json").read_text())
    assert episode.parse_problems == [] and episode.search_backend == "local"
    assert r.stdout == _expected(fmt or "md", episode) + "\n"  # echo adds one newline


def test_the_default_markdown_is_the_report_not_json_or_html(workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:3] == ["# BioCheck report", "", "**Claim:** Vitamin D prevents fractures."]
    assert [x for x in lines if x.startswith("## ")] == [
        "## Supporting evidence", "## Refuting evidence", "## Summary", "## Conclusion", "## Sources"]
    assert lines[lines.index("## Conclusion") + 1] == "SUPPORTED"
    assert "- Supporting 1: ID 101: Vitamin D and fracture risk [corpus:scifact] (quote found in the abstract)" in lines
    assert "<html" not in r.stdout.lower()
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.stdout)


def test_batch_writes_traces_and_resumes(workdir):
    claims = workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures.", "label": "SUPPORTED", "dataset": "x"}\n'
                      '{"id": "b/2", "claim": "Coffee causes arrhythmia."}\n')
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json",
                            "--workers", "2"])
    assert r.exit_code == 0, r.output
    a = json.loads((workdir / "out" / "a.json").read_text())
    assert a["gold_label"] == "SUPPORTED" and a["claim_id"] == "a" and a["dataset"] == "x"
    assert (workdir / "out" / "b_2.json").is_file()
    summary = json.loads((workdir / "out" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["conclusions"] == {"SUPPORTED": 2}
    before = (workdir / "out" / "a.json").stat().st_mtime_ns
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 0 and (workdir / "out" / "a.json").stat().st_mtime_ns == before  # not rerun


@pytest.mark.parametrize("args, message", [
    (["check", "x", "--llm", "gpt4"], "bad LLM spec"),
    (["check", "x", "--llm", "scripted:missing.json"], "no script file"),
    (["check", "x", "--format", "pdf"], "--format must be"),
    (["check"], "give either a CLAIM"),
])
def test_bad_usage_is_explained(workdir, args, message):
    r = runner.invoke(app, args)
    assert r.exit_code != 0 and message in r.output


def test_mlflow_run_records_prompt_hash_and_traces(workdir):
    import mlflow

    from biocheck.tracking import tracking_uri

    claims = workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json",
                            "--mlflow"])
    assert r.exit_code == 0, r.output
    mlflow.set_tracking_uri(tracking_uri())
    run = mlflow.search_runs(experiment_names=["biocheck"], filter_string="tags.stage = 'check'",
                             order_by=["start_time DESC"], max_results=1, output_format="list")[0]
    trace = json.loads((workdir / "out" / "a.json").read_text())
    assert run.data.params["prompt_hash"] == trace["prompt_hash"] and len(trace["prompt_hash"]) == 16
    assert run.data.metrics["episodes"] == 1 and run.data.metrics["mean_searches"] == 1
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "traces")]
    assert "traces/a.json" in artifacts


def test_score_cli_one_trace_and_a_folder(workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json",
                            "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["score", "t.json", "--judge", "none", "--gold", "SUPPORTED", "--json"])
    assert r.exit_code == 0, r.output
    b = json.loads(r.stdout)
    # one search with a field tag: R_search 1; correct label: R_outcome 1; the quote is verbatim in 101
    assert (b["outcome"], b["search"], b["hallucination"], b["n_cited"]) == (1.0, 1.0, 0.0, 1)
    assert b["total"] == 1.0 + 0.5 * 1.0 + 1.0 * b["evidence"] - 0.0
    assert b["entries"][0]["strict"] is True and b["judge_used"] is False
    r = runner.invoke(app, ["score", "t.json", "--judge", "none", "--gold", "REFUTED"])
    assert r.exit_code == 0 and "R_outcome       0.0000" in r.stdout
    (workdir / "runs").mkdir()
    (workdir / "t.json").rename(workdir / "runs" / "a.json")
    r = runner.invoke(app, ["score", "--traces", "runs", "--judge", "none", "--out", "scores.json"])
    assert r.exit_code == 0, r.output
    agg = json.loads((workdir / "scores.json").read_text())
    assert json.loads(r.stdout) == agg and "outcome" in json.dumps(agg)
    assert runner.invoke(app, ["score", "t.json", "--gold", "MAYBE"]).exit_code == 2
