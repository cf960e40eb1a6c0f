"""`biocheck check`: one claim (md/json/html, --trace) and batches (--claims/--out, resume)."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from biocheck.agent.episode import Episode
from biocheck.agent.report.render import render_html, render_json, render_markdown
from biocheck.agent.report.schema import ParsedReport
from biocheck.agent.run import trace_path
from biocheck.cli import app
from tests.helpers.cli import assert_one_clear_line
from tests.helpers.turns import REPORT, search

runner = CliRunner()


def test_single_claim_json_report_and_trace(check_workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json",
                            "--format", "json", "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["report"]["conclusion"] == "SUPPORTED" and report["report"]["supporting"][0]["pmid"] == "101"
    trace = json.loads((check_workdir / "t.json").read_text())
    assert trace["searches"] == 1 and set(trace["ledger"]) == {"101"} and trace["final_text"] == REPORT
    assert trace["llm"] == "scripted:script.json" and len(trace["prompt_hash"]) == 16
    assert [m["role"] for m in trace["messages"]] == ["system", "user", "assistant", "tool", "assistant"]


def test_html_is_escaped(check_workdir):
    r = runner.invoke(app, ["check", "<script>alert(1)</script> cures colds", "--llm", "scripted:script.json",
                            "--format", "html"])
    assert r.exit_code == 0, r.output
    assert "<html" in r.stdout.lower() and "<script>alert(1)</script>" not in r.stdout
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in r.stdout


def _expected(fmt: str, episode: Episode) -> str:
    """What `check --format fmt` must print for this episode, written with the renderers directly."""
    parsed = ParsedReport(report=episode.report, problems=episode.parse_problems)
    model = f"{episode.llm} (fingerprint {episode.llm_fingerprint})"
    meta = {"model": model, "llm": episode.llm, "llm_fingerprint": episode.llm_fingerprint,
            "prompt_hash": episode.prompt_hash, "search": episode.search_backend}
    md = render_markdown(episode.report, ledger=episode.ledger, claim=episode.claim, queries=episode.queries)
    claim_line = f"**Claim:** {episode.claim}\n"
    md = md.replace(claim_line, f"{claim_line}\n**Model:** {model}\n", 1)  # the model is named under the claim
    return {"md": lambda: md,
            "json": lambda: render_json(parsed, meta=meta),
            "html": lambda: render_html(episode.report, episode.ledger, episode.claim, problems=[], meta=meta,
                                        queries=episode.queries)}[fmt]()


@pytest.mark.parametrize("fmt", [None, "md", "json", "html"])
def test_each_format_prints_its_renderer_output_and_markdown_is_the_default(check_workdir, fmt):
    args = ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json", "--trace", "t.json"]
    r = runner.invoke(app, args + (["--format", fmt] if fmt else []))
    assert r.exit_code == 0, r.output
    episode = Episode.model_validate_json((check_workdir / "t.json").read_text())
    assert episode.parse_problems == [] and episode.search_backend == "local"
    assert r.stdout == _expected(fmt or "md", episode) + "\n"  # echo adds one newline


def test_the_default_markdown_is_the_report_not_json_or_html(check_workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:3] == ["# BioCheck report", "", "**Claim:** Vitamin D prevents fractures."]
    assert [x for x in lines if x.startswith("## ")] == [
        "## Supporting evidence", "## Refuting evidence", "## Summary", "## Conclusion", "## Sources", "## Searches"]
    assert lines[lines.index("## Conclusion") + 1] == "SUPPORTED"
    assert "- Supporting 1: ID 101: Vitamin D and fracture risk [corpus:scifact] (quote found in the abstract)" in lines
    assert "<html" not in r.stdout.lower()
    with pytest.raises(json.JSONDecodeError):
        json.loads(r.stdout)


def test_the_reports_list_the_searches_in_order_with_their_hits(check_workdir):
    script = [search("vitamin D AND fracture*"), search("zzqx AND qqzx"), {"content": REPORT}]
    (check_workdir / "script.json").write_text(json.dumps(script))
    args = ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json", "--max-searches", "3"]
    page = runner.invoke(app, [*args, "--format", "html"]).stdout
    searches = page[page.index('<section id="searches"'):]
    assert searches.index("vitamin D AND fracture*") < searches.index("zzqx AND qqzx")
    assert re.search(r"vitamin D AND fracture\*</code> <span class=\"hits\">[1-9]\d* hits?</span>", searches)
    assert "ID 101</li>" not in searches and "ID 101: Vitamin D and fracture risk</li>" in searches  # hit + title
    assert 'zzqx AND qqzx</code> <span class="hits">0 hits</span>' in searches
    md = runner.invoke(app, args).stdout.splitlines()
    assert md[md.index("## Searches") + 1].startswith("1. `vitamin D AND fracture*` -> ")
    assert "2. `zzqx AND qqzx` -> 0 hits" in md


def test_check_says_each_search_on_stderr_as_it_runs_and_stdout_is_the_report_only(check_workdir):
    script = [search("vitamin D AND fracture*"), search("zzqx AND qqzx"), {"content": REPORT}]
    (check_workdir / "script.json").write_text(json.dumps(script))
    args = ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json", "--max-searches", "3"]
    r = runner.invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    lines = [x for x in r.stderr.splitlines() if x.startswith("search ")]
    assert len(lines) == 2 and re.fullmatch(r'search 1/3: "vitamin D AND fracture\*" -> [1-9]\d* hits?', lines[0])
    assert lines[1] == 'search 2/3: "zzqx AND qqzx" -> 0 hits'
    assert json.loads(r.stdout)["report"]["conclusion"] == "SUPPORTED"  # stdout: the report alone
    quiet = runner.invoke(app, ["--quiet", *args])
    assert quiet.exit_code == 0 and "search 1/3" not in quiet.stderr and "search 1/3" not in quiet.stdout


def test_batch_writes_traces_and_resumes(check_workdir):
    claims = check_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures.", "label": "SUPPORTED", "dataset": "x"}\n'
                      '{"id": "b/2", "claim": "Coffee causes arrhythmia."}\n')
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json",
                            "--workers", "2"])
    assert r.exit_code == 0, r.output
    a = json.loads((check_workdir / "out" / "a.json").read_text())
    assert a["gold_label"] == "SUPPORTED" and a["claim_id"] == "a" and a["dataset"] == "x"
    assert trace_path(check_workdir / "out", "b/2").is_file() and trace_path(check_workdir / "out", "b/2").name != "b_2.json"
    summary = json.loads((check_workdir / "out" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["conclusions"] == {"SUPPORTED": 2}
    before = (check_workdir / "out" / "a.json").stat().st_mtime_ns
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 0 and (check_workdir / "out" / "a.json").stat().st_mtime_ns == before  # not rerun


@pytest.mark.parametrize("args, message", [
    (["check", "x", "--llm", "gpt4"], "bad LLM spec"),
    (["check", "x", "--llm", "scripted:missing.json"], "no script file"),
    (["check", "x", "--format", "pdf"], "'pdf' is not one of 'md', 'html', 'json'"),
    (["check"], "give either a CLAIM"),
])
def test_bad_usage_is_explained(check_workdir, args, message):
    r = runner.invoke(app, args)
    assert r.exit_code != 0 and message in r.output


def test_mlflow_run_records_prompt_hash_and_traces(check_workdir):
    import mlflow

    from biocheck.tracking import tracking_uri

    claims = check_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json",
                            "--mlflow"])
    assert r.exit_code == 0, r.output
    mlflow.set_tracking_uri(tracking_uri())
    run = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string="tags.stage = 'check'",
                             order_by=["start_time DESC"], max_results=1, output_format="list")[0]
    trace = json.loads((check_workdir / "out" / "a.json").read_text())
    assert run.data.params["prompt_hash"] == trace["prompt_hash"] and len(trace["prompt_hash"]) == 16
    assert run.data.metrics["episodes"] == 1 and run.data.metrics["mean_searches"] == 1
    artifacts = [a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id, "traces")]
    assert "traces/a.json" in artifacts


def test_score_cli_one_trace_and_a_folder(check_workdir):
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
    (check_workdir / "runs").mkdir()
    (check_workdir / "t.json").rename(check_workdir / "runs" / "a.json")
    r = runner.invoke(app, ["score", "--traces", "runs", "--judge", "none", "--out", "scores.json"])
    assert r.exit_code == 0, r.output
    agg = json.loads((check_workdir / "scores.json").read_text())
    assert json.loads(r.stdout) == agg and "outcome" in json.dumps(agg)
    assert runner.invoke(app, ["score", "t.json", "--gold", "MAYBE"]).exit_code == 2


# -- failures say what failed, on one line, with a non-zero exit -------------------------------------------------


@pytest.fixture
def dead_model(monkeypatch):
    """The scripted model behaves like an unreachable server for claims that mention 'Coffee'."""
    from biocheck.llm import LLMError
    from biocheck.llm.scripted import ScriptedChat

    real = ScriptedChat.chat

    def chat(self, messages, tools):
        if "Coffee" in messages[1]["content"]:
            raise LLMError("openai:gpt-x: cannot reach http://localhost:9/v1 (connection refused)")
        return real(self, messages, tools)

    monkeypatch.setattr(ScriptedChat, "chat", chat)


def test_a_model_that_cannot_be_reached_fails_the_check_with_one_line(check_workdir, dead_model):
    r = runner.invoke(app, ["check", "Coffee causes arrhythmia.", "--llm", "scripted:script.json", "--trace", "t.json"])
    assert_one_clear_line(r, "the model failed", "connection refused")
    assert r.stdout == "" and not (check_workdir / "t.json").exists()  # no empty report, no trace of a failed run


def test_a_batch_runs_every_claim_then_fails_naming_the_claims_that_failed(check_workdir, dead_model):
    claims = check_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Coffee causes arrhythmia."}\n'
                      '{"id": "b", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json"])
    assert_one_clear_line(r, "1 of 2 claims failed", "a:", "connection refused", "summary.json")
    summary = json.loads((check_workdir / "out" / "summary.json").read_text())
    assert summary["episodes"] == 1 and [f["id"] for f in summary["failed"]] == ["a"]
    assert "connection refused" in summary["failed"][0]["error"]
    assert trace_path(check_workdir / "out", "b").is_file() and not trace_path(check_workdir / "out", "a").exists()


def test_a_prompt_longer_than_the_models_context_fails_with_one_line(check_workdir, tiny_model):
    import shutil

    short = check_workdir / "short-model"
    shutil.copytree(tiny_model, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 64}))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"transformers:{short}"])
    assert_one_clear_line(r, "the model failed", "at most 64 positions")
    assert r.stdout == ""


def test_an_id_named_summary_and_ids_that_slug_alike_keep_their_traces_through_the_cli(check_workdir):
    claims = check_workdir / "claims.jsonl"
    claims.write_text("".join(json.dumps({"id": i, "claim": "Vitamin D prevents fractures."}) + "\n"
                              for i in ("summary", "a/b", "a_b")))
    args = ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads((check_workdir / "out" / "summary.json").read_text())["episodes"] == 3
    assert len([p for p in (check_workdir / "out").glob("*.json") if p.name != "summary.json"]) == 3
    r = runner.invoke(app, args)  # the rerun reuses all three (it used to crash on summary.json)
    assert r.exit_code == 0, r.output
    assert json.loads((check_workdir / "out" / "summary.json").read_text())["reused"] == 3


def _params(check_workdir, **agent) -> None:
    import yaml

    p = yaml.safe_load((check_workdir / "params.yaml").read_text())
    p["agent"].update(agent)
    (check_workdir / "params.yaml").write_text(yaml.safe_dump(p))


def _setup_bad_input(check_workdir, case: str) -> list[str]:
    """Write what the case needs into check_workdir; return the command line."""
    single = ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json"]
    batch = ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"]
    claims = check_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    if case == "label":
        claims.write_text('{"id": "a", "claim": "A."}\n{"id": "b", "claim": "B.", "label": "TRUE"}\n')
    elif case == "dataset":
        claims.write_text('{"id": "a", "claim": "A.", "dataset": 5}\n')
    elif case == "id":
        claims.write_text('{"id": ["x"], "claim": "A."}\n')
    elif case == "claims_dir":
        claims.unlink()
        claims.mkdir()
    elif case == "empty_claims":
        claims.write_text("\n  \n")
    elif case == "out_file":
        (check_workdir / "out").write_text("not a folder")
    elif case == "trace_dir":
        (check_workdir / "t.json").mkdir()
        return single + ["--trace", "t.json"]
    elif case == "script_dir":
        (check_workdir / "script.d").mkdir()
        return ["check", "A claim.", "--llm", "scripted:script.d"]
    elif case in ("args_list", "args_number", "args_json_list"):
        args = {"args_list": [1, 2], "args_number": 5, "args_json_list": "[1, 2]"}[case]
        (check_workdir / "bad.json").write_text(json.dumps([{"tool_calls": [{"name": "search_pubmed", "arguments": args}]}]))
        return ["check", "A claim.", "--llm", "scripted:bad.json"]
    elif case == "blank_claim":
        return ["check", "  \n ", "--llm", "scripted:script.json"]
    elif case == "workers":
        return batch + ["--workers", "0"]
    elif case.startswith("agent."):
        key, value = case.removeprefix("agent.").split("=")
        _params(check_workdir, **{key: json.loads(value)})
        return single
    return batch


@pytest.mark.parametrize("case, phrases", [
    ("label", ["claims.jsonl, record 2", "unknown label 'TRUE'", "SUPPORTED, REFUTED, NEI"]),
    ("dataset", ["claims.jsonl, record 1", "'dataset' must be a string"]),
    ("id", ["claims.jsonl, record 1", "'id' must be a string or an integer"]),
    ("claims_dir", ["claims.jsonl", "is a folder"]),
    ("empty_claims", ["claims.jsonl", "no claims"]),
    ("out_file", ["out", "is a file", "--out"]),
    ("trace_dir", ["t.json", "is a folder", "--trace"]),
    ("script_dir", ["script.d", "is a folder"]),
    ("args_list", ["bad.json", "turn 0, tool call 0", "arguments"]),
    ("args_number", ["bad.json", "turn 0, tool call 0", "arguments"]),
    ("args_json_list", ["bad.json", "turn 0, tool call 0", "arguments"]),
    ("blank_claim", ["claim is empty"]),
    ("workers", ["agent.workers", ">= 1"]),
    ("agent.abstract_chars=-5", ["agent.abstract_chars", ">= 1"]),
    ("agent.abstract_chars=0", ["agent.abstract_chars"]),
    ("agent.max_new_tokens=0", ["agent.max_new_tokens", ">= 1"]),
    ("agent.temperature=-0.5", ["agent.temperature", ">= 0"]),
    ("agent.top_p=0", ["agent.top_p"]),
    ("agent.top_p=1.5", ["agent.top_p"]),
])
def test_bad_input_is_one_clear_line_before_anything_runs(check_workdir, case, phrases):
    r = runner.invoke(app, _setup_bad_input(check_workdir, case))
    assert_one_clear_line(r, *phrases)
    assert "data fetch" not in r.output  # the old advice for an empty claims file
    out = check_workdir / "out"
    assert not out.is_dir() or not any(out.iterdir())  # refused before any episode ran


def test_the_empty_claims_message_says_how_to_write_one(check_workdir):
    (check_workdir / "claims.jsonl").write_text("")
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert '{"claim": ' in assert_one_clear_line(r, "no claims")


# -- which model: the registry's champion, else the selected checkpoint, named in the report and on stderr ---------

@pytest.fixture
def no_registry(tmp_path, monkeypatch):
    """A tracking store of this test's own, not created (so no champion): the session's store may hold one."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'no-store' / 'mlflow.db'}")


def _selected(check_workdir, model=None, step: int = 30):
    """models/selected as `biocheck select` leaves it: a copy of `model`, or (never loaded) just its file names."""
    import shutil

    selected = check_workdir / "models" / "selected"
    if model is not None:
        shutil.copytree(model, selected)
    else:
        selected.mkdir(parents=True)
        for name in ("config.json", "model.safetensors"):
            (selected / name).write_text("{}")
    (selected / "selection.json").write_text(json.dumps({"step": step, "eval_reward": 0.5}))
    return selected


def test_after_select_check_uses_the_selected_checkpoint_and_names_it(check_workdir, tiny_model, no_registry):
    _selected(check_workdir, tiny_model, step=30)
    _params(check_workdir, max_new_tokens=4)  # the random model's words are not the point: keep it quick
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--max-searches", "0"])
    assert r.exit_code == 0, r.output
    model_lines = [x for x in r.stdout.splitlines() if x.startswith("**Model:**")]
    assert model_lines and model_lines[0].startswith(
        "**Model:** transformers:models/selected (selected checkpoint, step 30; folder ")
    assert "models/selected" in r.stderr and "selected checkpoint" in r.stderr
    assert "no champion from the model registry" in r.stderr  # it looked there first
    assert len([x for x in r.stderr.splitlines() if x.startswith("model: ")]) == 1


def test_an_explicit_llm_beats_the_selected_checkpoint(check_workdir):
    _selected(check_workdir)
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", "scripted:script.json",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["meta"]["model"].startswith("scripted:script.json")
    assert "models/selected" not in r.stderr


def test_a_non_default_agent_llm_in_params_beats_the_selected_checkpoint(check_workdir):
    _selected(check_workdir)
    _params(check_workdir, llm="scripted:script.json")
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--format", "html"])
    assert r.exit_code == 0, r.output
    assert "model: scripted:script.json" in r.stdout and "models/selected" not in r.stdout


@pytest.mark.parametrize("files", [[], ["config.json"], ["model.safetensors"], ["selection.json"]])
def test_without_a_model_in_the_selected_folder_agent_llm_is_kept(check_workdir, files, no_registry):
    (check_workdir / "models" / "selected").mkdir(parents=True)
    for name in files:
        (check_workdir / "models" / "selected" / name).write_text("{}")
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures."])
    line = assert_one_clear_line(r, "models/base")  # the quickstart's base model, not built in this folder
    assert "models/selected" not in line


def test_choose_llm_order(check_workdir):
    from pathlib import Path

    from biocheck.agent.run import choose_llm

    selected = _selected(check_workdir)
    assert choose_llm(None, "transformers:models/base", selected) == (
        f"transformers:{selected.as_posix()}", "the selected checkpoint (biocheck select)")
    assert choose_llm(None, None, selected)[0] == f"transformers:{selected.as_posix()}"
    assert choose_llm("scripted:s.json", None, selected)[0] == "scripted:s.json"
    empty = Path("/nonexistent/selected")
    assert choose_llm("scripted:s.json", "openai:x", empty) == ("scripted:s.json", "--llm")
    assert choose_llm(None, "openai:x", empty) == (None, "agent.llm")
    assert choose_llm(None, "transformers:models/base", empty)[0] is None
    assert choose_llm(None, None, empty)[0] is None
    # the registry's champion beats models/selected (not a model the user gave), never --llm or agent.llm
    champion = ("transformers:models:/biocheck-agent@champion", "the registry's champion (biocheck-agent version 2)")
    assert choose_llm(None, "transformers:models/base", selected, lambda: champion) == champion
    assert choose_llm(None, None, empty, lambda: champion) == champion
    assert choose_llm("scripted:s.json", None, selected, lambda: champion) == ("scripted:s.json", "--llm")
    assert choose_llm(None, "openai:x", selected, lambda: champion) == (None, "agent.llm")
    assert choose_llm(None, None, selected, lambda: None) == (
        f"transformers:{selected.as_posix()}", "the selected checkpoint (biocheck select; no champion from the model "
        "registry)")
    assert choose_llm(None, None, empty, lambda: None) == (
        None, f"agent.llm (no selected checkpoint in {empty.as_posix()} yet; no champion from the model registry)")
