"""Text from models and data is inert on a terminal: escape sequences and control characters never reach what
BioCheck prints or the files it writes for people; JSON files keep the text as data, escaped."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from biocheck import io
from biocheck.agent.report.render import render_html, render_markdown
from biocheck.agent.report.schema import Report, Summary
from biocheck.cli import app
from biocheck.terminal import inert
from tests.helpers.turns import REPORT, search

runner = CliRunner()
# One of each kind a terminal obeys, each around the word that must survive it.
SEQUENCES = {
    "csi_colour": "\x1b[31;1mred\x1b[0m",
    "csi_erase": "\x1b[2J\x1b[Hred",
    "osc8_link": "\x1b]8;;https://evil.example/\x1b\\red\x1b]8;;\x1b\\",
    "osc8_bel": "\x1b]8;;https://evil.example/\x07red\x1b]8;;\x07",
    "osc52_clipboard": "\x1b]52;c;cm0gLXJmIH4K\x07red",
    "osc_title_unterminated": "red\x1b]0;pwned\n",  # up to the end of its line
    "c1_csi": "\x9b31mred\x9b0m",
    "c1_osc": "\x9d52;c;cm0gLXJmIH4K\x9cred",
    "dcs": "\x1bP1$qm\x1b\\red",
    "carriage_return": "harmless\rred",
    "backspace_bell_del": "re\x08\x07\x7fd",
}
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # what no output may hold (tab and newline are fine)


@pytest.mark.parametrize("kind", sorted(SEQUENCES))
def test_inert_takes_out_each_sequence_kind(kind):
    out = inert(f"claim: {SEQUENCES[kind]} end\n\tnext line")
    assert not RAW.search(out), repr(out)
    assert "evil.example" not in out and "cm0gLXJmIH4K" not in out and "pwned" not in out
    assert out.startswith("claim: ") and out.endswith(" end\n\tnext line") and "re" in out


def test_inert_leaves_ordinary_text_alone():
    text = "Vitamin D “reduced” fractures ≥65 y (95% CI 0.7–0.9; μg/day) [1] é\n\tnext\r\n"
    assert inert(text, file=True) == text
    assert inert(text) == text.replace("\r", "")


@pytest.fixture
def workdir(evidence_workdir):
    said = " ".join(SEQUENCES.values())
    report = REPORT.replace("direct evidence for the claim.", f"direct evidence for the claim {said}.")
    script = [search("vitamin D AND fracture*"), {"content": report}]
    (evidence_workdir / "script.json").write_text(json.dumps(script))
    return evidence_workdir


@pytest.mark.parametrize("fmt", ["md", "html", "json"])
def test_check_prints_and_writes_no_escape_sequence(workdir, fmt):
    claim = "Vitamin D \x1b]52;c;cm0gLXJmIH4K\x07prevents \x1b[31mfractures\x1b[0m."
    r = runner.invoke(app, ["check", claim, "--llm", "scripted:script.json", "--format", fmt, "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    assert not RAW.search(r.output), repr(RAW.findall(r.output))
    assert "direct evidence for the claim" in r.output and "fractures" in r.output
    if fmt == "json":  # data: the sequences stay, escaped (\u001b), which a terminal prints as text
        assert "\x1b]8;;https://evil.example/" in json.loads(r.stdout)["report"]["summary"]["justification"]
    else:
        assert "evil.example" not in r.output and "cm0gLXJmIH4K" not in r.output
    raw = (workdir / "t.json").read_text(encoding="utf-8")
    assert not RAW.search(raw)  # JSON escapes them (\u001b, \u009b): no terminal obeys that
    trace = json.loads(raw)
    assert "\x1b]8;;https://evil.example/" in trace["final_text"] and "\x9b31m" in trace["final_text"]  # data kept


def test_an_error_line_is_inert(workdir):
    r = runner.invoke(app, ["check", "--claims", "x\x1b]52;c;cm0gLXJmIH4K\x07y.jsonl", "--out", "o"])
    assert r.exit_code == 1 and r.output.startswith("error: ") and "xy.jsonl" in r.output
    assert not RAW.search(r.output) and "cm0gLXJmIH4K" not in r.output


def test_usage_error_line_is_inert():
    r = runner.invoke(app, ["search", "q", "--backend", "\x1b[2Jlocal\x9b0m"])
    assert r.exit_code == 2 and not RAW.search(r.output) and "error: " in r.output


def test_files_for_people_hold_no_escape_sequence(tmp_path):
    said = " ".join(SEQUENCES.values())
    report = Report(summary=Summary(justification=said))
    io.write_text_atomic(tmp_path / "r.md", render_markdown(report, claim=said))
    io.write_text_atomic(tmp_path / "r.html", render_html(report, {}, said))
    for name in ("r.md", "r.html"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert not RAW.search(text) and "evil.example" not in text and "red" in text, name
    io.write_json_atomic(tmp_path / "a.json", {"text": said})
    io.dump_jsonl(tmp_path / "b.jsonl", [{"text": said}])
    for name in ("a.json", "b.jsonl"):
        raw = (tmp_path / name).read_text(encoding="utf-8")
        assert not RAW.search(raw) and json.loads(raw)["text"] == said, name  # escaped, the data round-trips
