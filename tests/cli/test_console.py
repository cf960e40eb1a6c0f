"""Data the CLI prints is printed verbatim: rich markup and emoji codes in a claim id, a search result or a model
name are not rendered (issue 30)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from biocheck.cli import app
from tests.helpers.cli import error_lines

runner = CliRunner()


MARKUP = ":thumbs_up: [bold]loud[/bold] :smile:"  # rich would print 👍 loud 😄


def test_a_failed_claims_id_is_printed_verbatim(evidence_workdir, monkeypatch):
    from biocheck.llm import LLMError
    from biocheck.llm.scripted import ScriptedChat

    def dead(self, messages, tools):
        raise LLMError("cannot reach the server :fire: [red]down[/red]")

    monkeypatch.setattr(ScriptedChat, "chat", dead)
    (evidence_workdir / "script.json").write_text("[]")
    (evidence_workdir / "claims.jsonl").write_text(json.dumps({"id": MARKUP, "claim": "Vitamin D works."}) + "\n")
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 1, r.output
    line, = error_lines(r)
    assert f"{MARKUP}: cannot reach the server :fire: [red]down[/red]" in line


def test_search_results_are_printed_verbatim(evidence_workdir):
    r = runner.invoke(app, ["search", f"vitamin {MARKUP}"])
    assert MARKUP in r.output and "👍" not in r.output, r.output


def test_the_model_line_is_printed_verbatim(evidence_workdir):
    script = evidence_workdir / "my :thumbs_up: model.json"
    script.write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"scripted:{script.name}"])
    assert r.exit_code == 0, r.output
    assert "scripted:my :thumbs_up: model.json" in r.output and "👍" not in r.output
