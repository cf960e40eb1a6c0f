"""Ctrl-C says what is true for the command it stopped: a batch keeps its finished traces and a rerun resumes;
each stage says what it keeps (issue 30)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from tests.helpers.cli import error_lines
from tests.helpers.paths import REPO

runner = CliRunner()


def _interrupt_on(monkeypatch, word: str) -> list[bool]:
    """The scripted model 'receives' Ctrl-C on the claim that mentions `word`, while the switch is on."""
    from biocheck.llm.scripted import ScriptedChat

    real, armed = ScriptedChat.chat, [True]

    def chat(self, messages, tools):
        if armed[0] and word in messages[1]["content"]:
            raise KeyboardInterrupt
        return real(self, messages, tools)

    monkeypatch.setattr(ScriptedChat, "chat", chat)
    return armed


def test_ctrl_c_in_a_batch_says_the_finished_traces_are_kept_and_a_rerun_resumes(evidence_workdir, monkeypatch):
    from biocheck.agent.run import trace_path

    (evidence_workdir / "script.json").write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    (evidence_workdir / "claims.jsonl").write_text(
        '{"id": "a", "claim": "Vitamin D prevents fractures."}\n{"id": "b", "claim": "Stop here."}\n')
    armed = _interrupt_on(monkeypatch, "Stop")
    args = ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json", "--workers", "1"]
    r = runner.invoke(app, args)
    assert r.exit_code == 130, r.output
    line, = error_lines(r)
    assert "no partial output was kept" not in line
    assert "interrupted" in line and "out" in line and "kept" in line and "resume" in line
    assert trace_path(evidence_workdir / "out", "a").is_file()  # what the message promises is there
    armed[0] = False
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert json.loads((evidence_workdir / "out" / "summary.json").read_text())["reused"] == 1


@pytest.mark.parametrize("command, stage, promise", [
    (["train"], "train_stage", "checkpoint"),
    (["evaluate"], "evaluate_stage", "reuse"),
    (["reward", "audit"], "audit_stage", "reuse"),
    (["data", "prepare"], "prepare_stage", "rerun"),
])
def test_ctrl_c_in_a_stage_says_what_is_true_for_it(tmp_path, monkeypatch, command, stage, promise):
    import biocheck.pipeline as pipeline

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, stage, interrupted)
    r = runner.invoke(app, [*command, "--params", str(REPO / "params.yaml")])
    assert r.exit_code == 130, r.output
    line, = error_lines(r)
    assert "interrupted" in line and promise in line and "no partial output was kept" not in line
    assert "Traceback" not in r.output
