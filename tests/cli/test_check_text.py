"""`biocheck check --text`: a passage's claims each fact-checked into --out, one report (stdout and
OUT/narrative.*), resume, a passage of only questions, and bad input as one error line with nothing written."""

from __future__ import annotations

import html
import json
import re

import pytest
from typer.testing import CliRunner

from biocheck.agent.episode import Episode
from biocheck.cli import app
from biocheck.narrative.extract import MAX_PASSAGE_CHARS
from tests.helpers.cli import assert_one_clear_line

runner = CliRunner()
PASSAGE = "Vitamin D prevents fractures. Does coffee cause cancer? Statins cause <script>x</script> myopathy."
ARGS = ["check", "--text", "-", "--out", "out", "--llm", "scripted:script.json", "--extractor", "sentences"]


def test_a_passage_from_stdin_gives_marked_spans_and_the_traces_conclusions(check_workdir):
    r = runner.invoke(app, [*ARGS, "--format", "json"], input=PASSAGE)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [(c["start"], c["end"]) for c in data["claims"]] == [(0, 29), (56, 98)]
    for c in data["claims"]:
        assert c["span"] == PASSAGE[c["start"]:c["end"]]
        episode = Episode.model_validate_json((check_workdir / c["trace"]).read_text())  # out/c0-29.json
        assert c["conclusion"] == episode.report.conclusion.value == "SUPPORTED"
    assert data["overall"] == "2 claims: 2 supported; 1 sentence not check-worthy"
    assert data["skipped"] == [{"start": 30, "end": 55, "text": "Does coffee cause cancer?", "reason": "question"}]
    out = check_workdir / "out"
    assert json.loads((out / "narrative.json").read_text()) == data
    assert (out / "narrative.md").is_file() and (out / "narrative.html").is_file()
    assert "2 claims: 2 supported" in r.stderr


def test_html_marks_the_spans_and_escapes_a_script(check_workdir):
    r = runner.invoke(app, [*ARGS, "--format", "html"], input=PASSAGE)
    assert r.exit_code == 0, r.output
    marks = re.findall(r'<mark class="(\w+)"[^>]*><a href="#([^"]+)">(.*?)</a></mark>', r.stdout, re.S)
    assert [(cls, cid, html.unescape(t)) for cls, cid, t in marks] == [
        ("supported", "c0-29", PASSAGE[0:29]), ("supported", "c56-98", PASSAGE[56:98])]
    assert "<script>x</script>" not in r.stdout and "&lt;script&gt;x&lt;/script&gt;" in r.stdout


def test_a_rerun_reuses_every_trace(check_workdir):
    assert runner.invoke(app, ARGS, input=PASSAGE).exit_code == 0
    traces = sorted((check_workdir / "out").glob("c*.json"))
    before = [p.stat().st_mtime_ns for p in traces]
    r = runner.invoke(app, ARGS, input=PASSAGE)
    assert r.exit_code == 0, r.output
    assert len(traces) == 2 and [p.stat().st_mtime_ns for p in traces] == before
    assert "reused 2 traces" in r.stderr


def test_a_passage_of_only_questions_is_an_empty_explained_result(check_workdir):
    r = runner.invoke(app, ARGS, input="Does coffee cause cancer? Is aspirin safe?")
    assert r.exit_code == 0, r.output
    assert "**Overall:** 0 claims: every sentence was skipped: 2 questions" in r.stdout


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("make, phrases", [
    (lambda d: _write(d / "empty.txt", b"  \n"), ("empty.txt", "empty")),
    (lambda d: _write(d / "big.txt", b"Vitamin D prevents fractures. " * (1_000_000 // 30)),
     ("big.txt", f"{MAX_PASSAGE_CHARS:,}")),
    (lambda d: _write(d / "bin.dat", b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe"), ("bin.dat", "text")),
    (lambda d: str(d / "missing.txt"), ("missing.txt", "no such file")),
])
def test_bad_input_is_one_error_line_and_nothing_is_written(check_workdir, make, phrases):
    args = ["check", "--text", make(check_workdir), "--out", "out", "--llm", "scripted:script.json"]
    r = runner.invoke(app, args)
    assert_one_clear_line(r, *phrases)
    assert not list(check_workdir.glob("out/narrative.*"))


@pytest.mark.parametrize("extra", [["a claim"], ["--claims", "c.jsonl"]])
def test_text_is_exclusive_with_a_claim_and_claims(check_workdir, extra):
    r = runner.invoke(app, ["check", "--text", "-", "--out", "out", *extra], input=PASSAGE)
    assert_one_clear_line(r, "--text")


def test_an_extractor_without_text_is_refused_not_ignored(check_workdir):
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--extractor", "sentences"])
    assert r.exit_code == 2 and assert_one_clear_line(r, "--extractor", "--text")


def test_text_needs_out(check_workdir):
    r = runner.invoke(app, ["check", "--text", "-"], input=PASSAGE)
    assert_one_clear_line(r, "--out")


def test_the_model_extractor_falls_back_to_the_sentence_rule_with_a_note(check_workdir):
    # the script's first turn is the agent's search call, not extraction JSON: the rule stands in, and says so
    r = runner.invoke(app, ["check", "--text", "-", "--out", "out", "--llm", "scripted:script.json", "--format",
                            "json"], input=PASSAGE)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["method"] == "sentences" and data["note"].startswith("the model's extraction was not used")
    assert "note: the model's extraction was not used" in r.stderr and len(data["claims"]) == 2
