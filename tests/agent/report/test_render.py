"""Renderers: Markdown and JSON, and the self-contained, escaped HTML page that checks every quote."""

from __future__ import annotations

import html
import json
import re

import pytest

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.render import render_html, render_json, render_markdown
from biocheck.agent.report.schema import EvidenceItem, ParsedReport, Report, Summary
from biocheck.agent.report.writer import format_report
from biocheck.evidence.types import Article
from biocheck.labels import Label

XSS = "<script>alert(1)</script>"

LEDGER = {
    "111": Article(
        pmid="111",
        title="Vitamin D and fractures",
        abstract="BACKGROUND: Falls matter. RESULTS: The “high-dose” group had fewer fractures (p<0.05).",
        journal="BMJ",
        year=2020,
        source="entrez",
    ),
    "222": Article(
        pmid="222",
        title="Baseline record",
        abstract="Fractures were unchanged.",
        source="baseline:pubmed25n0001.xml.gz",
    ),
    "4983": Article(pmid="4983", title="A SciFact document", abstract="Bone density rose.", source="corpus:scifact"),
}

REPORT = Report(
    supporting=[
        EvidenceItem(pmid="111", quote='the "high-dose" group had fewer fractures', context="dose effect"),
        EvidenceItem(pmid="4983", quote="Bone density rose.", context="bone"),
    ],
    refuting=[
        EvidenceItem(pmid="222", quote="Fractures were reduced.", context="misquoted"),
        EvidenceItem(pmid="999", quote="Invented.", context="hallucinated"),
    ],
    summary=Summary(
        support_reasons="trials", refutation_reasons="one null", consensus_context_check="mixed", justification="weight"
    ),
    conclusion=Label.SUPPORTED,
)


def _articles(page: str) -> list[str]:
    return re.findall(r"<article.*?</article>", page, flags=re.S)


def test_html_is_self_contained():
    page = render_html(REPORT, LEDGER, "Vitamin D prevents fractures.", meta={"model": "qwen"})
    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    for external in ("<script", "<link", "src=", "@import", "url("):
        assert external not in page.lower()
    assert set(re.findall(r'href="([^"]*)"', page)) == {
        "https://pubmed.ncbi.nlm.nih.gov/111/",
        "https://pubmed.ncbi.nlm.nih.gov/222/",
    }


def test_pubmed_links_only_for_pubmed_sources():
    items = _articles(render_html(REPORT, LEDGER, "claim"))
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/111/"' in items[0]  # entrez
    assert "href" not in items[1] and "ID 4983" in items[1] and "corpus:scifact" in items[1]  # corpus id, not a PMID
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/222/"' in items[2]  # baseline
    assert "href" not in items[3] and "PMID 999" in items[3]  # never link an unretrieved id


def test_quotes_are_marked_inside_their_abstract_and_failures_are_flagged():
    items = _articles(render_html(REPORT, LEDGER, "claim"))
    # the mark holds the ORIGINAL abstract text (curly quotes), escaped, although the quote used straight ones
    assert "<mark>The “high-dose” group had fewer fractures</mark> (p&lt;0.05)." in items[0]
    assert "quote found in the abstract" in items[0] and "flagged" not in items[0]
    assert "<mark>Bone density rose.</mark>" in items[1]
    assert (
        "quote not found in the abstract" in items[2]
        and "<mark>" not in items[2]
        and 'class="item flagged"' in items[2]
    )
    assert "not in the retrieved papers" in items[3] and 'class="item flagged"' in items[3]


def test_quote_found_in_the_title_is_marked_there():
    report = Report(supporting=[EvidenceItem(pmid="111", quote="vitamin d and FRACTURES", context="c")])
    (item,) = _articles(render_html(report, LEDGER, "claim"))
    assert "<mark>Vitamin D and fractures</mark>" in item
    assert "quote found in the title" in item


@pytest.mark.parametrize(
    "label,css,text",
    [
        (Label.SUPPORTED, "supported", "SUPPORTED"),
        (Label.REFUTED, "refuted", "REFUTED"),
        (Label.NEI, "nei", "NOT ENOUGH INFORMATION"),
        (None, "none", "NO CONCLUSION"),
    ],
)
def test_conclusion_badge(label, css, text):
    page = render_html(Report(conclusion=label), {}, "claim")
    assert f'<span class="badge {css}">{text}</span>' in page


def test_summary_problems_and_meta_are_shown():
    page = render_html(
        REPORT, LEDGER, "claim", problems=["no Summary section"], meta={"model": "qwen3-4b", "prompt_hash": "ab12"}
    )
    for value in ("trials", "one null", "mixed", "weight", "Consensus and context check"):
        assert value in page
    assert "<li>no Summary section</li>" in page
    footer = page[page.index("<footer>") :]
    assert "model: qwen3-4b" in footer and "prompt_hash: ab12" in footer
    assert "Parse problems" not in render_html(REPORT, LEDGER, "claim")  # no empty problems section


def test_every_text_is_escaped():
    ledger = {
        "1": Article(pmid="1", title=f"Title {XSS}", abstract=f"Before {XSS} after.", journal=XSS, source="entrez")
    }
    report = Report(
        supporting=[EvidenceItem(pmid="1", quote=f"Before {XSS} after", context=XSS)],
        refuting=[EvidenceItem(pmid=f"2{XSS}", quote=XSS, context=XSS)],
        summary=Summary(support_reasons=XSS, refutation_reasons=XSS, consensus_context_check=XSS, justification=XSS),
        conclusion=Label.REFUTED,
    )
    page = render_html(report, ledger, f"Claim {XSS}", problems=[XSS], meta={XSS: XSS, "nested": {"k": XSS}})
    assert "<script" not in page.lower()
    assert "alert(1)</" not in page
    escaped = html.escape(XSS)
    assert page.count(escaped) >= 14
    # the quote is still found and marked: escaping happens around the mark, not before matching
    assert f"<mark>Before {escaped} after</mark>" in page
    assert f"<title>BioCheck: Claim {escaped}</title>" in page


def test_html_escapes_attribute_breaking_ids():
    ledger = {'1"><b>': Article(pmid='1"><b>', title="t", abstract="a", source="entrez")}
    page = render_html(Report(supporting=[EvidenceItem(pmid='1"><b>', quote="a")]), ledger, "claim")
    assert "<b>" not in page
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/1%22%3E%3Cb%3E/"' in page


def test_markdown_keeps_the_canonical_report_and_checks_sources():
    text = render_markdown(REPORT, LEDGER, claim="Vitamin D prevents fractures.")
    assert text.startswith("# BioCheck report\n\n**Claim:** Vitamin D prevents fractures.\n")
    assert parse_report(text).report == REPORT  # the claim header and Sources list do not disturb the report
    sources = text[text.index("## Sources") :].splitlines()[1:]
    assert sources == [
        "- Supporting 1: PMID 111: Vitamin D and fractures (BMJ, 2020) https://pubmed.ncbi.nlm.nih.gov/111/ (quote found in the abstract)",
        "- Supporting 2: ID 4983: A SciFact document [corpus:scifact] (quote found in the abstract)",
        "- Refuting 1: PMID 222: Baseline record https://pubmed.ncbi.nlm.nih.gov/222/ (quote not found in the abstract)",
        "- Refuting 2: PMID 999 (not in the retrieved papers)",
    ]


def test_markdown_without_ledger_or_claim_is_the_canonical_text():
    assert render_markdown(REPORT) == format_report(REPORT)


def test_json_has_the_schema_problems_claim_and_meta():
    parsed = ParsedReport(report=REPORT, problems=["no Summary section"])
    data = json.loads(render_json(parsed, claim="c", meta={"model": "m"}))
    assert data["report"] == REPORT.model_dump(mode="json")
    assert data["report"]["conclusion"] == "SUPPORTED"
    assert data["problems"] == ["no Summary section"]
    assert data["ok"] is False
    assert data["claim"] == "c" and data["meta"] == {"model": "m"}
    assert Report.model_validate(data["report"]) == REPORT
    assert set(json.loads(render_json(ParsedReport(report=Report()))).keys()) == {"report", "problems", "ok"}


# -- the searches the agent made (query, hits) --------------------------------------------------------


class _Search:
    """A search as the trace records it (agent.budget.QueryRecord has these fields)."""

    def __init__(self, query: str, pmids: list[str], error: str | None = None):
        self.query, self.pmids, self.n_results, self.error = query, pmids, len(pmids), error


SEARCHES = [_Search('"vitamin D" AND fracture*', ["111", "4983"]), _Search("statin AND myopathy", []),
            _Search("bad [[query", [], error="query syntax error")]


def test_html_lists_each_search_in_order_with_its_hits_and_titles():
    page = render_html(REPORT, LEDGER, "claim", queries=SEARCHES)
    section = page[page.index('<section id="searches"'):]
    section = section[: section.index("</section>")]
    items = re.findall(r"<li class=\"search\">(.*?)</li>\s*(?=<li class=\"search\">|</ol>)", section, flags=re.S)
    assert len(items) == 3
    assert "&#34;vitamin D&#34; AND fracture*" in items[0] and "2 hits" in items[0]
    assert 'href="https://pubmed.ncbi.nlm.nih.gov/111/"' in items[0] and "Vitamin D and fractures" in items[0]
    assert "ID 4983" in items[0] and "A SciFact document" in items[0]  # a corpus id: named, not linked
    assert "statin AND myopathy" in items[1] and "0 hits" in items[1]
    assert "query syntax error" in items[2]
    assert section.index("vitamin D") < section.index("statin") < section.index("bad [[query")


def test_html_says_when_the_agent_made_no_search_and_has_no_section_without_a_trace():
    assert "No searches" in render_html(REPORT, LEDGER, "claim", queries=[])
    assert 'id="searches"' not in render_html(REPORT, LEDGER, "claim")


def test_hostile_text_in_claim_quote_query_and_title_is_escaped():
    hostile = "<script>alert(1)</script> \"q\" 'a' & b"
    ledger = {"1": Article(pmid="1", title=f"T {hostile}", abstract=f"A {hostile}.", source="entrez")}
    report = Report(supporting=[EvidenceItem(pmid="1", quote=hostile, context=hostile)], conclusion=Label.NEI)
    page = render_html(report, ledger, f"C {hostile}", queries=[_Search(f"Q {hostile}", ["1"])])
    assert "<script" not in page.lower() and "alert(1)</" not in page
    assert " & b" not in page and "&amp; b" in page
    for text in (f"C {hostile}", f"Q {hostile}", f"T {hostile}"):
        assert html.escape(text, quote=False).replace('"', "&#34;").replace("'", "&#39;") in page, text


def test_markdown_lists_the_searches_and_keeps_the_report_readable():
    text = render_markdown(REPORT, LEDGER, claim="Vitamin D prevents fractures.", queries=SEARCHES)
    assert parse_report(text).report == REPORT
    lines = text[text.index("## Searches"):].splitlines()[1:]
    assert lines == [
        '1. `"vitamin D" AND fracture*` -> 2 hits',
        "   - PMID 111: Vitamin D and fractures https://pubmed.ncbi.nlm.nih.gov/111/",
        "   - ID 4983: A SciFact document [corpus:scifact]",
        "2. `statin AND myopathy` -> 0 hits",
        "3. `bad [[query` -> error: query syntax error",
    ]
    odd = render_markdown(REPORT, LEDGER, queries=[_Search("a `b`\nAND c", [])])
    assert odd.endswith("1. ``a `b` AND c`` -> 0 hits\n")  # one code span, one line
