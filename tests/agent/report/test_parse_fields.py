"""parse_report's outer layer: input clean-up, headings and sections, the Summary's loose text, the problem
cap, the internal-error guard, and format_report's exact lines (docs/report.md)."""

from __future__ import annotations

import pytest

import biocheck.agent.report.parse as parse_module
from biocheck.agent.report.parse import MAX_PROBLEMS, parse_report
from biocheck.agent.report.schema import EvidenceItem, Report, Summary
from biocheck.agent.report.writer import format_report
from biocheck.labels import Label
from tests.helpers.reports import CANONICAL, EXPECTED, SUMMARY

SUMMARY_TEXT = CANONICAL[CANONICAL.index("Support reasons") : CANONICAL.index("## Conclusion")]


def with_summary(body: str) -> str:
    return CANONICAL.replace(SUMMARY_TEXT, body)


def with_conclusion(section: str) -> str:
    return CANONICAL.replace("## Conclusion\nSUPPORTED\n", section)


# -- input clean-up ---------------------------------------------------------------------------------


def test_none_reads_as_an_empty_text():
    assert parse_report(None) == parse_report("")
    assert parse_report("").problems[-1] == "no conclusion found"


def test_any_object_is_read_as_its_text():
    class Text:
        def __str__(self) -> str:
            return CANONICAL

    parsed = parse_report(Text())
    assert parsed.report == EXPECTED and parsed.problems == []


def test_a_lone_surrogate_becomes_the_replacement_character():
    assert parse_report("Note \ud800\n" + CANONICAL).problems == [
        "text before the first section ignored: 'Note \ufffd'"
    ]


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_windows_and_old_mac_line_ends(newline):
    text = with_summary(SUMMARY_TEXT.replace("Two trials show fewer fractures.", "Two trials\nshow fewer fractures."))
    parsed = parse_report(text.replace("\n", newline))
    assert parsed.report.summary.support_reasons == "Two trials\nshow fewer fractures."
    assert parsed.report.supporting == EXPECTED.supporting and parsed.problems == []


@pytest.mark.parametrize(
    "text",
    [
        "<think>a</think>\n<think>b</think>\n" + CANONICAL,  # only the text after the LAST </think>
        "</think>\n" + CANONICAL,  # a stray closing tag at the very start
        "<THINK>plan</THINK>\n" + CANONICAL,  # any case
        "\n\n" + CANONICAL + "## Notes\n\n\n",  # blank lines before the report, an empty unknown section
    ],
)
def test_think_blocks_and_blank_text_are_dropped_silently(text):
    parsed = parse_report(text)
    assert parsed.report == EXPECTED and parsed.problems == []


@pytest.mark.parametrize("think", ["<think>\n", "<THINK>\n"])
def test_an_unclosed_think_tag_of_any_case_is_dropped(think):
    parsed = parse_report(think + CANONICAL)
    assert parsed.report == EXPECTED
    assert parsed.problems == ["unclosed <think> block; its text was read as the report"]


def test_a_report_only_inside_an_upper_case_think_block():
    parsed = parse_report("<THINK>\n" + CANONICAL + "</THINK>\n")
    assert parsed.report == EXPECTED
    assert parsed.problems == ["the report was found only inside the <think> block"]


# -- headings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "heading,title",
    [("## References ##", "References"), ("## Appendix X##", "Appendix X"), ("## **Notes**", "Notes")],
)
def test_an_unknown_heading_is_named_without_its_decoration(heading, title):
    parsed = parse_report(CANONICAL + heading + "\nsome text\n")
    assert parsed.report == EXPECTED
    assert parsed.problems == [f"section {title!r} ignored"]


@pytest.mark.parametrize("line", ["#evidence-based", "## " + "x" * 1000, ": Summary"])
def test_lines_that_are_not_headings_stay_in_their_section(line):
    parsed = parse_report(with_summary(SUMMARY_TEXT.replace("support the claim.", "support the claim.\n" + line)))
    assert parsed.report.summary.justification == "The larger trials support the claim.\n" + line
    assert parsed.problems == []


@pytest.mark.parametrize(
    "heading,label,problems",
    [
        ("## Conclusion: Final answer: REFUTED", Label.REFUTED, []),  # the first colon ends the title
        ("## Conclusion:REFUTED", Label.REFUTED, []),
        ("**Conclusion: likely** REFUTED", Label.REFUTED, ["text in the Conclusion section ignored: 'likely'"]),
    ],
)
def test_text_after_a_heading_is_the_sections_first_line(heading, label, problems):
    parsed = parse_report(with_conclusion(heading + "\n"))
    assert parsed.report.conclusion is label
    assert parsed.problems == problems


@pytest.mark.parametrize(
    "heading", ["**Summary**: Xylitol helps.", "**Summary**:Xylitol helps.", "Summary: Xylitol helps."]
)
def test_bold_and_plain_headings_keep_the_text_after_their_colon(heading):
    parsed = parse_report(with_summary("").replace("## Summary\n", heading + "\n"))
    assert parsed.report.summary == Summary(justification="Xylitol helps.")
    assert parsed.problems == ["Summary has no fields; its text was read as the justification"]


@pytest.mark.parametrize("heading", ["**Supporting evidence**", "Supporting Evidence:"])
def test_a_deeper_unknown_heading_stays_in_a_bold_or_plain_section(heading):
    text = CANONICAL.replace("## Supporting evidence\n", heading + "\n### Trials\n")
    parsed = parse_report(text)
    assert parsed.report.supporting == EXPECTED.supporting
    assert parsed.problems == ["evidence item 1 under Supporting evidence: ignored 'Trials'"]


@pytest.mark.parametrize("heading", ["## Conclusion", "**Conclusion**", "Conclusion:"])
def test_a_conclusion_heading_then_a_verdict_heading_is_one_section(heading):
    parsed = parse_report(with_conclusion(heading + "\n**Final verdict:** REFUTED\n"))
    assert parsed.report.conclusion is Label.REFUTED and parsed.problems == []


@pytest.mark.parametrize(
    "section",
    [
        "## Conclusion\n**Final verdict:** SUPPORTED\n**Verdict:** REFUTED\n",  # merged once, then a new section
        "## Conclusion: SUPPORTED\n## Final verdict: REFUTED\n",  # a heading with text is not merged
    ],
)
def test_a_second_conclusion_heading_after_text_opens_a_second_section(section):
    parsed = parse_report(with_conclusion(section))
    assert parsed.report.conclusion is Label.SUPPORTED
    assert parsed.problems == ["several Conclusion sections; the first with a label was used"]


def test_a_conclusion_line_inside_the_conclusion_section_is_its_label():
    parsed = parse_report(with_conclusion("## Conclusion\nVerdict: REFUTED\n"))
    assert parsed.report.conclusion is Label.REFUTED and parsed.problems == []


# -- summary ----------------------------------------------------------------------------------------


def test_an_empty_summary_section_is_a_problem():
    parsed = parse_report(with_summary(""))
    assert parsed.report.summary == Summary()
    assert parsed.problems == ["the Summary section is empty"]


def test_text_before_the_first_summary_field_is_a_problem():
    parsed = parse_report(with_summary("Overall the trials agree.\nSupport reasons: s\nJustification: j\n"))
    assert parsed.report.summary == Summary(support_reasons="s", justification="j")
    assert parsed.problems == [
        "text in Summary ignored: 'Overall the trials agree.'",
        "Summary has no 'Refutation reasons' field",
        "Summary has no 'Consensus and context check' field",
    ]


def test_a_field_name_ending_a_sentence_is_text_not_a_field():
    parsed = parse_report(
        with_summary(
            SUMMARY_TEXT.replace("Justification: The larger trials support the claim.", "Justification:\nConsensus.")
        )
    )
    assert parsed.report.summary == SUMMARY.model_copy(update={"justification": "Consensus."})
    assert parsed.problems == []


# -- the problem list and the internal-error guard --------------------------------------------------


def _missing_contexts(n: int) -> str:
    items = "".join(f'- PMID: {i}\n  Quote: "q{i}"\n' for i in range(1, n + 1))
    return CANONICAL.replace(CANONICAL[: CANONICAL.index("## Refuting")], "## Supporting evidence\n" + items)


def test_the_problem_list_is_capped_at_max_problems_plus_a_count():
    full = parse_report(_missing_contexts(MAX_PROBLEMS)).problems
    assert (
        len(full) == MAX_PROBLEMS
        and full[-1] == f"evidence item {MAX_PROBLEMS} under Supporting evidence has no context"
    )
    capped = parse_report(_missing_contexts(MAX_PROBLEMS + 2)).problems
    assert capped == full + ["... and 2 more problems"]


def test_a_parser_bug_costs_the_report_not_an_exception(monkeypatch):
    def broken(text, problems):
        raise KeyError("bug")

    monkeypatch.setattr(parse_module, "_parse", broken)
    parsed = parse_report(CANONICAL)
    assert parsed.report == Report()
    assert parsed.problems == ["internal parser error (KeyError); nothing was read"]


# -- format_report's exact lines --------------------------------------------------------------------


def test_format_report_writes_multi_line_and_empty_fields_exactly():
    report = Report(
        supporting=[EvidenceItem(pmid="", quote="q", context="first\n\nthird")],
        summary=Summary(
            support_reasons="s1\ns2", refutation_reasons="", consensus_context_check="c", justification="\n- j"
        ),
    )
    assert format_report(report).split("\n") == [
        "## Supporting evidence",
        "- PMID:",
        '  Quote: "q"',
        "  Context: first",
        "",
        "  third",
        "## Refuting evidence",
        "None",
        "## Summary",
        "Support reasons: s1",
        "s2",
        "Refutation reasons:",
        "Consensus and context check: c",
        "Justification:",
        "- j",
        "## Conclusion",
        "",
    ]
