"""`biocheck narratives passages` and `biocheck narratives evaluate`: the table on stdout, one clear line for bad
input (tests/pipeline/test_narratives_stage.py checks the numbers)."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from tests.helpers.cli import one_error_line
from tests.helpers.narrative_project import set_narratives

runner = CliRunner()


def test_passages_then_evaluate_prints_the_table(bench_project):
    r = runner.invoke(app, ["narratives", "passages"])
    assert r.exit_code == 0, r.output
    assert "2 passages" in r.stderr and "data/narratives/passages.jsonl" in r.stderr
    r = runner.invoke(app, ["narratives", "evaluate", "--no-progress", "--extractor", "sentences"])
    assert r.exit_code == 0, r.output
    assert "| gold claims (extraction perfect) |" in r.stdout
    assert "| the whole passage as one claim (baseline) |" in r.stdout
    assert "reports/narratives/index.html" in r.stderr
    assert Path("metrics/narratives.json").is_file()


def test_evaluate_before_the_passages_exist_is_one_line(bench_project):
    r = runner.invoke(app, ["narratives", "evaluate", "--no-progress"])
    one_error_line(r, "data/narratives/passages.jsonl", "dvc repro narrative_passages")
    assert not Path("metrics/narratives.json").exists()


def test_a_system_that_writes_no_report_is_refused_in_one_line(bench_project):
    set_narratives(bench_project, system="cer")
    r = runner.invoke(app, ["narratives", "passages"])
    one_error_line(r, "section 'narratives': system: 'cer'", "eg_grpo")


def test_an_empty_passages_file_from_another_setting_is_one_line(bench_project):
    set_narratives(bench_project, passages=0)
    assert runner.invoke(app, ["narratives", "passages"]).exit_code == 0
    set_narratives(bench_project, passages=2)  # params now ask for passages the file does not hold
    r = runner.invoke(app, ["narratives", "evaluate", "--no-progress"])
    one_error_line(r, "passages.jsonl", "narrative_passages")


def test_zero_passages_says_not_run(bench_project):
    set_narratives(bench_project, passages=0)
    params = yaml.safe_load(Path("params.yaml").read_text())
    assert params["narratives"]["passages"] == 0
    assert runner.invoke(app, ["narratives", "passages"]).exit_code == 0
    r = runner.invoke(app, ["narratives", "evaluate", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "not run: narratives.passages is 0" in r.stderr
