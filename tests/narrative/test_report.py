"""The passage's report: marked spans are the claims' passage text, verdicts from the traces, each claim's full
report after, skipped sentences and the fallback note shown, and everything escaped in HTML."""

from __future__ import annotations

import html
import json
import re

import pytest

from biocheck.agent.episode import Agent, AgentConfig
from biocheck.narrative.extract import by_sentences, extract
from biocheck.narrative.report import pieces, render
from biocheck.narrative.run import check_passage_claims
from tests.helpers.batch import SEARCH, VerdictChat
from tests.helpers.turns import TABLE, TableTool

PASSAGE = "Vitamin D prevents fractures. Homeopathy cures <script>alert(1)</script> cancer. Is tea safe?"


@pytest.fixture
def result(tmp_path):
    agent = Agent(VerdictChat(refute=("Homeopathy",)), tool=TableTool(TABLE), cfg=AgentConfig(llm="scripted:x"))
    return check_passage_claims(extract(PASSAGE), agent, tmp_path, search=SEARCH)


def test_pieces_cover_the_passage_in_order(result):
    assert "".join(p.text for p in pieces(result)) == PASSAGE
    assert [p.text for p in pieces(result) if p.claims] == [PASSAGE[c.start:c.end] for c in result.claims]


def test_html_marks_each_span_with_its_verdict_class_and_links_to_its_report(result):
    page = render(result, "html")
    marks = re.findall(r'<mark class="(\w+)"[^>]*><a href="#([^"]+)">(.*?)</a></mark>', page, re.S)
    assert [(cls, cid, html.unescape(text)) for cls, cid, text in marks] == [
        ("supported", "c0-29", "Vitamin D prevents fractures."),
        ("refuted", "c30-80", "Homeopathy cures <script>alert(1)</script> cancer.")]
    for c in result.claims:
        assert f'<section class="claim" id="{c.id}">' in page
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "2 claims: 1 supported, 1 refuted; 1 sentence not check-worthy" in page
    assert '<span class="reason">question</span>: Is tea safe?' in page
    assert page.count("<iframe") == 2  # each claim's full report page


def test_json_holds_spans_conclusions_reports_and_skipped(result):
    data = json.loads(render(result, "json"))
    assert [(c["span"], c["conclusion"]) for c in data["claims"]] == [
        ("Vitamin D prevents fractures.", "SUPPORTED"), ("Homeopathy cures <script>alert(1)</script> cancer.", "REFUTED")]
    assert all(data["passage"][c["start"]:c["end"]] == c["span"] for c in data["claims"])
    assert [c["report"]["report"]["conclusion"] for c in data["claims"]] == ["SUPPORTED", "REFUTED"]
    assert data["skipped"] == [{"start": 81, "end": 93, "text": "Is tea safe?", "reason": "question"}]
    assert data["overall"] == "2 claims: 1 supported, 1 refuted; 1 sentence not check-worthy"


def test_markdown_has_the_marked_passage_then_each_claims_report(result):
    md = render(result, "md")
    assert md.startswith("# BioCheck passage report\n\n**Overall:** 2 claims: 1 supported, 1 refuted;")
    assert "[Vitamin D prevents fractures.](#c0-29) **[SUPPORTED]**" in md
    assert "- question: Is tea safe?" in md
    assert "## Claim c30-80: REFUTED" in md and "### BioCheck report" in md and "#### Conclusion" in md
    passage = md[md.index("## Passage"):md.index("## Claims")]
    assert "<script>" not in passage and r"\<script\>alert(1)\</script\>" in passage  # escaped for Markdown


def test_the_fallback_note_is_shown(tmp_path):
    agent = Agent(VerdictChat(), tool=TableTool(TABLE), cfg=AgentConfig(llm="scripted:x"))
    extraction = by_sentences("Vitamin D prevents fractures.", note="the model's extraction was not used (x)")
    result = check_passage_claims(extraction, agent, tmp_path, search=SEARCH)
    assert "> Note: the model's extraction was not used (x)" in render(result, "md")
    assert "Note: the model&#39;s extraction was not used (x)" in render(result, "html")
