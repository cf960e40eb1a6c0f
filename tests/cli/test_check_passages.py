"""`biocheck check --passages FILE.jsonl --out DIR`: a batch of passages, each checked as --text checks one, into
DIR/<id>/; one line each, DIR/summary.json, resume, and bad input as one error line with nothing written."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from tests.helpers.cli import assert_one_clear_line

runner = CliRunner()
ARGS = ["check", "--passages", "passages.jsonl", "--out", "out", "--llm", "scripted:script.json",
        "--extractor", "sentences"]
ROWS = [{"id": "p1", "text": "Vitamin D prevents fractures. Does coffee cause cancer?", "claims": []},  # benchmark rows
        {"id": "p2", "text": "Statins cause myopathy in older adults. Aspirin causes gastric bleeding."}]


def _write(rows) -> None:
    with open("passages.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


def test_each_passage_gets_its_folder_report_and_a_line(check_workdir):
    _write(ROWS)
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    assert "[1/2] p1: 1 claim: 1 supported; 1 sentence not check-worthy" in r.stderr
    assert "[2/2] p2: 2 claims: 2 supported" in r.stderr
    summary = json.loads((check_workdir / "out" / "summary.json").read_text())["passages"]
    assert [(s["id"], s["claims"], s["failed"], s["method"]) for s in summary] == [
        ("p1", 1, 0, "sentences"), ("p2", 2, 0, "sentences")]
    for pid, n in (("p1", 1), ("p2", 2)):
        data = json.loads((check_workdir / "out" / pid / "narrative.json").read_text())
        assert len(data["claims"]) == n and (check_workdir / "out" / pid / "narrative.html").is_file()


def test_a_rerun_reuses_every_trace(check_workdir):
    _write(ROWS)
    assert runner.invoke(app, ARGS).exit_code == 0
    traces = sorted((check_workdir / "out").glob("p*/c*.json"))
    before = [p.stat().st_mtime_ns for p in traces]
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    assert len(traces) == 3 and [p.stat().st_mtime_ns for p in traces] == before


@pytest.mark.parametrize(("rows", "phrases"), [
    ([{"id": "p1"}], ["line 1", '"text"']),
    ([{"id": "p1", "text": "Zinc shortens colds."}, {"id": "p1", "text": "Coffee raises blood pressure."}],
     ["line 2", "'p1' is used twice"]),
    ([{"id": "p1", "text": "   "}], ["line 1 ('p1')", "no text to check"]),
    ([{"id": True, "text": "Zinc shortens colds."}], ["line 1", '"id"']),
])
def test_bad_rows_are_one_line_and_nothing_runs(check_workdir, rows, phrases):
    _write(rows)
    assert_one_clear_line(runner.invoke(app, ARGS), "--passages", *phrases)
    assert not (check_workdir / "out").exists()


def test_the_batch_needs_out_and_excludes_the_other_inputs(check_workdir):
    _write(ROWS)
    assert_one_clear_line(runner.invoke(app, ["check", "--passages", "passages.jsonl"]), "--out DIR")
    assert_one_clear_line(runner.invoke(app, [*ARGS, "--text", "-"], input="Zinc shortens colds."), "not more")
    assert_one_clear_line(runner.invoke(app, ["check", "--passages", "nope.jsonl", "--out", "o"]), "nope.jsonl")
