"""parse_report: the canonical format, the ways models deviate from it, round trips and a fuzz test."""

from __future__ import annotations

import gc
import random
import time

import pytest

from biocheck.agent.report.parse import MAX_PROBLEMS, parse_report
from biocheck.agent.report.schema import EvidenceItem, ParsedReport, Report, Summary
from biocheck.agent.report.writer import format_report
from biocheck.labels import Label
from tests.helpers.reports import CANONICAL, EXPECTED, REFUTING, SUMMARY, SUPPORTING

# The three empty sections, as problems, for texts that only hold evidence or a conclusion.
NO_REFUTING, NO_SUMMARY = "no Refuting evidence section", "no Summary section"


def item(pmid: str, quote: str, context: str = "") -> EvidenceItem:
    return EvidenceItem(pmid=pmid, quote=quote, context=context)


def test_canonical_report_parses_exactly_with_no_problems():
    parsed = parse_report(CANONICAL)
    assert parsed.report == EXPECTED
    assert parsed.problems == []
    assert parsed.ok


def test_format_report_writes_the_canonical_text():
    assert format_report(EXPECTED) == CANONICAL


def test_format_report_writes_none_for_empty_evidence_and_the_label_display():
    text = format_report(Report(conclusion=Label.NEI))
    assert text.split("\n")[:4] == ["## Supporting evidence", "None", "## Refuting evidence", "None"]
    assert text.rstrip().endswith("## Conclusion\nNOT ENOUGH INFORMATION")


# -- headings ---------------------------------------------------------------------------------------

HEADING_VARIANTS = {
    "h1_h3_mixed": ("# Supporting evidence", "### Refuting evidence", "# Summary", "#### Conclusion"),
    "bold": ("**Supporting evidence**", "**Refuting evidence:**", "**Summary**", "**Conclusion**"),
    "plain_colon": ("Supporting Evidence:", "Refuting Evidence:", "Summary:", "Conclusion:"),
    "upper_trailing_colon": ("## SUPPORTING EVIDENCE:", "## REFUTING EVIDENCE:", "## SUMMARY:", "## CONCLUSION:"),
    "numbered": ("## 1. Supporting evidence", "## 2. Refuting evidence", "## 3. Summary", "## 4. Conclusion"),
    "no_space_and_closing_hashes": ("##Supporting evidence ##", "##Refuting evidence", "## Summary ##", "##Conclusion"),
    "synonyms": ("## Evidence supporting the claim", "## Evidence against the claim", "## Summary", "## Final verdict"),
}


@pytest.mark.parametrize("heads", HEADING_VARIANTS.values(), ids=HEADING_VARIANTS.keys())
def test_heading_styles_are_all_read(heads):
    text = CANONICAL
    for old, new in zip(
        ("## Supporting evidence", "## Refuting evidence", "## Summary", "## Conclusion"), heads, strict=True
    ):
        text = text.replace(old, new)
    parsed = parse_report(text)
    assert parsed.report == EXPECTED
    assert parsed.problems == []


def test_heading_with_inline_conclusion():
    for line in ("## Conclusion: REFUTED", "**Conclusion:** REFUTED", "**Conclusion: REFUTED**"):
        parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", line))
        assert parsed.report.conclusion is Label.REFUTED, line
        assert parsed.problems == [], line


# -- evidence items ---------------------------------------------------------------------------------


def _evidence(body: str) -> ParsedReport:
    return parse_report("## Supporting evidence\n" + body + "\n## Conclusion\nSUPPORTED")


EVIDENCE_CASES = {
    "star_bullets_and_fields": (
        '* PMID: 1\n  * Quote: "Alpha."\n  * Context: a\n* PMID: 2\n  * Quote: "Beta."\n  * Context: b',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "numbered_bullets": (
        '1. PMID: 1\n   Quote: "Alpha."\n   Context: a\n2. PMID: 2\n   Quote: "Beta."\n   Context: b',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "no_bullets_blank_lines": (
        'PMID: 1\nQuote: "Alpha."\nContext: a\n\nPMID: 2\nQuote: "Beta."\nContext: b',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "pmid_forms": (
        '- PMID 1\n  Quote: "A."\n  Context: a\n- [PMID: 2]\n  Quote: "B."\n  Context: b\n'
        '- PMID:3\n  Quote: "C."\n  Context: c\n- **PMID:** 4\n  Quote: "D."\n  Context: d\n'
        '- **PMID**: PMID 5\n  Quote: "E."\n  Context: e',
        [item("1", "A.", "a"), item("2", "B.", "b"), item("3", "C.", "c"), item("4", "D.", "d"), item("5", "E.", "e")],
    ),
    "quote_marks": (
        "- PMID: 1\n  Quote: “Curly.”\n  Context: a\n- PMID: 2\n  Quote: 'Single, with patients' data.'\n  Context: b\n"
        "- PMID: 3\n  Quote: No marks at all.\n  Context: c\n- PMID: 4\n  Quote: „Low-high.“\n  Context: d",
        [
            item("1", "Curly.", "a"),
            item("2", "Single, with patients' data.", "b"),
            item("3", "No marks at all.", "c"),
            item("4", "Low-high.", "d"),
        ],
    ),
    "quote_keeps_inner_marks_and_spacing": (
        '- PMID: 1\n  Quote:   "  He said "no"  and ‘maybe’ ."  \n  Context: a',
        [item("1", 'He said "no"  and ‘maybe’ .', "a")],
    ),
    "multi_line_quote_kept_exactly": (
        '- PMID: 1\n  Quote: "First line,\n  - a dash line,\n  last line."\n  Context: a',
        [item("1", "First line,\n  - a dash line,\n  last line.", "a")],
    ),
    "fields_in_other_order": (
        '- Quote: "Alpha."\n  Context: a\n  PMID: 1\n- Context: b\n  PMID: 2\n  Quote: "Beta."',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "one_line_labelled": (
        '- PMID: 1, Quote: "Alpha." Context: a\n- PMID: 2 | Quote: "Beta." | Context: b',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "one_line_unlabelled": (
        '- PMID 1: "Alpha." — a\n- [PMID: 2] “Beta.” (RCT)\n- "Gamma." (PMID 3) - c',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "RCT"), item("3", "Gamma.", "c")],
    ),
    "multi_line_context_and_other_labels": (
        '- PMID: 1\n  Excerpt: "Alpha."\n  Reason: first line\n  second line',
        [item("1", "Alpha.", "first line\nsecond line")],
    ),
    "qwen_style_bold_fields": (
        '1. **PMID: 1**\n   - **Quote:** "Alpha."\n   - **Context (why it supports the claim):** a\n'
        '2. **PMID: 2**\n   - **Quote from the abstract**: "Beta."\n   - **Context**: b',
        [item("1", "Alpha.", "a"), item("2", "Beta.", "b")],
    ),
    "quote_on_next_line": ('- PMID: 1\n  Quote:\n  "Alpha."\n  Context: a', [item("1", "Alpha.", "a")]),
}


@pytest.mark.parametrize("body,items", EVIDENCE_CASES.values(), ids=EVIDENCE_CASES.keys())
def test_evidence_variants(body, items):
    parsed = _evidence(body)
    assert parsed.report.supporting == items
    assert parsed.problems == [NO_REFUTING, NO_SUMMARY]


@pytest.mark.parametrize(
    "empty", ["None", "N/A", "-", "none.", "*None*", "No refuting evidence was found.", "(none)", ""]
)
def test_empty_evidence_markers(empty):
    parsed = parse_report(
        CANONICAL.replace(CANONICAL[CANONICAL.index("- PMID: 30111222") : CANONICAL.index("## Summary")], empty + "\n")
    )
    assert parsed.report.refuting == []
    assert parsed.report.supporting == SUPPORTING
    assert parsed.problems == []


def test_missing_fields_are_problems_but_the_item_is_kept():
    parsed = _evidence(
        '- PMID: 1\n  Quote: "Alpha."\n  Context: a\n- PMID: 2\n  Context: b\n- Quote: "Gamma."\n  Context: c'
    )
    assert parsed.report.supporting == [item("1", "Alpha.", "a"), item("2", "", "b"), item("", "Gamma.", "c")]
    assert parsed.problems == [
        "evidence item 2 under Supporting evidence has no quote",
        "evidence item 3 under Supporting evidence has no PMID",
        NO_REFUTING,
        NO_SUMMARY,
    ]


def test_sub_headings_split_items_and_can_hold_the_pmid():
    parsed = _evidence('### Study 1 (PMID: 1)\nQuote: "Alpha."\nContext: a\n### PMID 2\nQuote: "Beta."\nContext: b')
    assert parsed.report.supporting == [item("1", "Alpha.", "a"), item("2", "Beta.", "b")]
    assert parsed.problems == ["evidence item 1 under Supporting evidence: ignored 'Study 1'", NO_REFUTING, NO_SUMMARY]


def test_unclosed_quote_stops_at_the_next_field():
    parsed = _evidence('- PMID: 1\n  Quote: "Alpha never closed\n  and goes on\n  Context: a')
    assert parsed.report.supporting == [item("1", "Alpha never closed\n  and goes on", "a")]
    assert parsed.problems[0] == "evidence item 1 under Supporting evidence has no closing quote mark"


def test_several_pmids_keep_the_first():
    parsed = _evidence('- PMID: 1, 2\n  Quote: "Alpha."\n  Context: a')
    assert parsed.report.supporting == [item("1", "Alpha.", "a")]
    assert parsed.problems[0] == "evidence item 1 under Supporting evidence lists several PMIDs; kept 1"


def test_text_without_pmid_or_quote_is_reported():
    parsed = _evidence('These studies were found:\n- PMID: 1\n  Quote: "Alpha."\n  Context: a')
    assert parsed.report.supporting == [item("1", "Alpha.", "a")]
    assert parsed.problems[0] == "text under Supporting evidence ignored: 'These studies were found:'"


def test_pmid_without_an_id():
    parsed = _evidence('- PMID: unknown\n  Quote: "Alpha."\n  Context: a')
    assert parsed.report.supporting == [item("", "Alpha.", "a")]
    assert parsed.problems[:2] == [
        "evidence item 1 under Supporting evidence has no PMID",
        "evidence item 1 under Supporting evidence: ignored 'unknown'",
    ]


def test_alphanumeric_corpus_ids_are_kept():
    parsed = _evidence('- PMID: S2ORC4983\n  Quote: "Alpha."\n  Context: a')
    assert parsed.report.supporting == [item("S2ORC4983", "Alpha.", "a")]


# -- summary ----------------------------------------------------------------------------------------


def test_summary_fields_span_lines_and_take_bold_and_bullets():
    text = CANONICAL.replace(
        CANONICAL[CANONICAL.index("Support reasons") : CANONICAL.index("## Conclusion")],
        "- **Support reasons:** first\n  second\n\n  third\n- **Refutation reasons**: r\n"
        "- Consensus & context check: c\n- Justification: j\n",
    )
    parsed = parse_report(text)
    assert parsed.report.summary == Summary(
        support_reasons="first\nsecond\n\nthird", refutation_reasons="r", consensus_context_check="c", justification="j"
    )
    assert parsed.problems == []


def test_summary_fields_as_sub_headings_and_horizontal_rules():
    text = CANONICAL.replace(
        CANONICAL[CANONICAL.index("Support reasons") : CANONICAL.index("## Conclusion")],
        "### Support reasons\ns\n### Refutation reasons\nr\n---\n**Consensus and context check**\nc\n"
        "***\n### Justification:\nj\n\n---\n",
    )
    parsed = parse_report(text)
    assert parsed.report.summary == Summary(
        support_reasons="s", refutation_reasons="r", consensus_context_check="c", justification="j"
    )
    assert parsed.problems == []


def test_summary_fields_in_other_order_and_missing():
    text = CANONICAL.replace(
        CANONICAL[CANONICAL.index("Support reasons") : CANONICAL.index("## Conclusion")],
        "Justification: j\nSupport reasons: s\n",
    )
    parsed = parse_report(text)
    assert parsed.report.summary == Summary(support_reasons="s", justification="j")
    assert parsed.problems == [
        "Summary has no 'Refutation reasons' field",
        "Summary has no 'Consensus and context check' field",
    ]


def test_summary_without_fields_becomes_the_justification():
    text = CANONICAL.replace(
        CANONICAL[CANONICAL.index("Support reasons") : CANONICAL.index("## Conclusion")], "The trials agree.\nMostly.\n"
    )
    parsed = parse_report(text)
    assert parsed.report.summary == Summary(justification="The trials agree.\nMostly.")
    assert parsed.problems == ["Summary has no fields; its text was read as the justification"]


# -- conclusion -------------------------------------------------------------------------------------

CONCLUSIONS = {
    "SUPPORTED": Label.SUPPORTED,
    "Supported.": Label.SUPPORTED,
    "**REFUTED**": Label.REFUTED,
    "refuted": Label.REFUTED,
    "NOT ENOUGH INFORMATION": Label.NEI,
    "NEI": Label.NEI,
    "Not enough info": Label.NEI,
    "NOT_ENOUGH_INFO": Label.NEI,
    "**Final verdict:** SUPPORTED": Label.SUPPORTED,
    "NOT ENOUGH INFORMATION (NEI)": Label.NEI,
}


@pytest.mark.parametrize("line,label", CONCLUSIONS.items(), ids=CONCLUSIONS.keys())
def test_conclusion_variants(line, label):
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n" + line))
    assert parsed.report.conclusion is label
    assert parsed.problems == []


def test_conclusion_line_without_heading():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "Conclusion: REFUTED"))
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.report.summary == SUMMARY  # the line is not part of the justification
    assert parsed.problems == ["no Conclusion section; conclusion read from 'Conclusion: REFUTED' line"]


def test_conclusion_section_wins_over_stray_lines():
    text = CANONICAL.replace(
        "Justification: The larger trials support the claim.", "Justification: j\nVerdict: REFUTED"
    )
    parsed = parse_report(text)
    assert parsed.report.conclusion is Label.SUPPORTED
    assert parsed.report.summary.justification == "j"
    assert parsed.problems == [
        "conclusion line 'Verdict: REFUTED' outside the Conclusion section disagrees with it; the section wins"
    ]


def test_several_labels_take_the_first_stated():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\nREFUTED, not SUPPORTED; NEI"))
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.problems == [
        "the Conclusion section names several labels (REFUTED, NOT ENOUGH INFORMATION); took the first, REFUTED",
        "text in the Conclusion section ignored: ', not SUPPORTED;'",
    ]


def test_extra_words_in_the_conclusion_are_a_problem():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\nThe claim is SUPPORTED."))
    assert parsed.report.conclusion is Label.SUPPORTED
    assert parsed.problems == ["text in the Conclusion section ignored: 'The claim is .'"]


@pytest.mark.parametrize("line", ["NOT SUPPORTED", "unsupported", "The evidence does not support it", "maybe"])
def test_negated_or_missing_label_is_no_conclusion(line):
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n" + line))
    assert parsed.report.conclusion is None
    assert parsed.problems == [f"no label in the Conclusion section: {line!r}"]
    assert not parsed.ok


def test_empty_conclusion_section():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n"))
    assert parsed.report.conclusion is None
    assert parsed.problems == ["the Conclusion section is empty"]


def test_last_bare_label_line_without_heading():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "**Not enough information.**"))
    assert parsed.report.conclusion is Label.NEI
    assert parsed.report.summary == SUMMARY
    assert parsed.problems == [
        "no Conclusion section; conclusion read from the last line '**Not enough information.**'"
    ]


def test_no_conclusion_at_all():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", ""))
    assert parsed.report.conclusion is None
    assert parsed.report.supporting == SUPPORTING
    assert parsed.problems == ["no conclusion found"]


# -- wrappers: think blocks, fences, preambles, unknown sections, JSON -------------------------------


def test_think_block_and_fences_are_unwrapped():
    text = "<think>Maybe ## Conclusion\nREFUTED?</think>\n```markdown\n" + CANONICAL + "```\n"
    parsed = parse_report(text)
    assert parsed.report == EXPECTED
    assert parsed.problems == []


def test_unclosed_think_block_is_read_with_a_problem():
    parsed = parse_report("<think>\n" + CANONICAL)
    assert parsed.report == EXPECTED
    assert parsed.problems == ["unclosed <think> block; its text was read as the report"]


def test_report_only_inside_think():
    parsed = parse_report("<think>\n" + CANONICAL + "</think>\n")
    assert parsed.report == EXPECTED
    assert parsed.problems == ["the report was found only inside the <think> block"]


def test_preamble_and_unknown_sections_are_problems_but_untitled_headings_are_not():
    text = "# Fact-check report\nHere is my report.\n" + CANONICAL + "## References\n1. Smith 2020\n## Notes\n"
    parsed = parse_report(text)
    assert parsed.report == EXPECTED
    assert parsed.problems == ["section 'Fact-check report' ignored", "section 'References' ignored"]
    parsed = parse_report("Here is my report.\n" + CANONICAL)
    assert parsed.problems == ["text before the first section ignored: 'Here is my report.'"]


def test_label_only_output():
    parsed = parse_report("REFUTED")
    assert parsed.report == Report(conclusion=Label.REFUTED)
    assert parsed.problems == [
        "no Supporting evidence section",
        NO_REFUTING,
        NO_SUMMARY,
        "no Conclusion section; conclusion read from the last line 'REFUTED'",
    ]


JSON_REPORT = """```json
{
  "supporting_evidence": [{"pmid": "PMID:31234567", "quote": "Vitamin D supplementation reduced hip fractures by 20% (95% CI 0.70-0.91).",
                           "context": "A large RCT in adults over 65, the claim's population."},
                          {"PMID": 29876543, "quote": "Fracture risk fell in the \\"high-dose\\" group.", "context": "Dose-response."}],
  "refuting_evidence": [{"pmid": "30111222", "quote": "No effect on fractures was observed.",
                         "context": "Null result in community-dwelling adults."}],
  "summary": {"support_reasons": "Two trials show fewer fractures.", "refutation_reasons": "One trial found no effect.",
              "consensus_and_context_check": "Mostly agree; doses differ.", "justification": "The larger trials support the claim."},
  "conclusion": "SUPPORTED"
}
```"""


def test_json_report():
    parsed = parse_report(JSON_REPORT)
    assert parsed.report == EXPECTED
    assert parsed.problems == []


def test_json_ish_python_dict_nested_with_unknown_keys():
    text = (
        "Report:\n{'report': {'claim': 'x', 'supporting': [{'id': 7, 'quote': 'q', 'context': 'c', 'year': 2020}],"
        " 'refuting': None, 'verdict': 'Not enough info', 'confidence': 0.5,}}"
    )
    parsed = parse_report(text)
    assert parsed.report == Report(supporting=[item("7", "q", "c")], conclusion=Label.NEI)
    assert parsed.problems == [
        "text before the JSON report ignored: 'Report:'",
        "JSON field 'confidence' ignored",
        "evidence item 1 under Supporting evidence: JSON field 'year' ignored",
        NO_SUMMARY,
    ]


def test_broken_json_falls_back_to_markdown_rules():
    parsed = parse_report('{"supporting": [ {"pmid": 1, \n"conclusion": "REFUTED"')
    assert parsed.report.conclusion is Label.REFUTED
    assert "no conclusion found" not in parsed.problems


# -- robustness -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "   \n\n", None, b"\xff\xfe## Conclusion\nREFUTED", "\x00\x01\x02", "\ud800 lone surrogate", "## " * 10_000],
)
def test_odd_inputs_never_raise(text):
    parsed = parse_report(text)
    assert isinstance(parsed, ParsedReport)
    parsed.model_dump_json()  # a lone surrogate would make this raise
    assert not any(p.startswith("internal parser error") for p in parsed.problems)


def test_bytes_input_is_decoded():
    assert parse_report(CANONICAL.encode()).report == EXPECTED


def _unclosed_items(n: int) -> str:
    return "## Supporting evidence\n" + '- PMID: 1\n  Quote: "x\n' * n


def test_huge_text_keeps_every_item_and_caps_the_problem_list():
    parsed = parse_report(_unclosed_items(20_000))
    assert len(parsed.report.supporting) == 20_000
    # two per item (no context, no closing quote), three for the report (no Refuting, no Summary, no conclusion)
    assert len(parsed.problems) == MAX_PROBLEMS + 1
    assert parsed.problems[-1] == f"... and {2 * 20_000 + 3 - MAX_PROBLEMS} more problems"


def _cpu_seconds(*texts: str, repeats: int = 5) -> list[float]:
    """Least CPU time of `repeats` parses of each text, the texts taken in turn so that they all see the
    same machine load (CPU time and the minimum: robust to other jobs on the machine)."""
    best = [float("inf")] * len(texts)
    gc.disable()  # a collection landing in one run and not the other would skew the ratio
    try:
        for _ in range(repeats):
            for i, text in enumerate(texts):
                t0 = time.process_time()
                parse_report(text)
                best[i] = min(best[i], time.process_time() - t0)
    finally:
        gc.enable()
    return best


def test_parse_time_grows_linearly_with_the_text():
    # A ratio of two sizes measured side by side, not a time limit: 4x the text costs ~4x when the
    # parser is linear and ~16x when it is quadratic. Absolute speed is in bench/parse_speed.py.
    small, large = _cpu_seconds(_unclosed_items(2_500), _unclosed_items(10_000))
    assert large / small < 10, (small, large)


def test_truncated_report_keeps_its_complete_sections():
    lines = CANONICAL.split("\n")
    cut = lines.index("## Summary") + 2  # mid-Summary: evidence sections are complete
    parsed = parse_report("\n".join(lines[:cut]))
    assert parsed.report.supporting == SUPPORTING
    assert parsed.report.refuting == REFUTING
    assert parsed.report.summary.support_reasons == SUMMARY.support_reasons
    assert parsed.report.conclusion is None
    assert "no conclusion found" in parsed.problems


# -- round trip and fuzz ----------------------------------------------------------------------------

_FIRST = ["Vitamin", "Patients", "Aspirin", "Results", "The", "In", "Mortality", "Randomised", "Ωmega", "Él"]
_WORDS = _FIRST + [
    "reduced", "risk", "(95%", "CI", "0.8–1.2)", "p<0.05", '"healthy', 'user"', "patients'", "“curly”", "‘single’",
    "β-blockers", "≥65", "μg/day", "—", "-", "&", "<b>", "x:y", "1.", "*", "#", "ﬁnal", "don't", "[1]", "{a}",
]  # fmt: skip


def _line(rng: random.Random) -> str:
    return " ".join([rng.choice(_FIRST)] + [rng.choice(_WORDS) for _ in range(rng.randrange(0, 12))])


def _text(rng: random.Random, lines: int = 3) -> str:
    return "\n".join(_line(rng) for _ in range(rng.randrange(1, lines + 1)))


def _random_report(rng: random.Random) -> Report:
    def items() -> list[EvidenceItem]:
        return [
            EvidenceItem(
                pmid=rng.choice([str(rng.randrange(1, 10**9)), f"S{rng.randrange(10**6)}"]),
                quote=_text(rng, 2),
                context=_text(rng, 2),
            )
            for _ in range(rng.randrange(0, 4))
        ]

    return Report(
        supporting=items(),
        refuting=items(),
        summary=Summary(**{k: _text(rng) for k in Summary.model_fields}),
        conclusion=rng.choice(list(Label)),
    )


def test_round_trip_random_reports():
    rng = random.Random(20240531)
    for _ in range(300):
        report = _random_report(rng)
        parsed = parse_report(format_report(report))
        assert parsed.report == report, format_report(report)
        assert parsed.problems == []


def test_round_trip_empty_fields_keeps_the_report_and_names_the_gaps():
    report = Report(supporting=[EvidenceItem(pmid="", quote="", context="")])
    parsed = parse_report(format_report(report))
    assert parsed.report == report
    assert parsed.problems == [
        "evidence item 1 under Supporting evidence has no PMID",
        "evidence item 1 under Supporting evidence has no quote",
        "evidence item 1 under Supporting evidence has no context",
        "the Conclusion section is empty",
    ]


def _mutate(rng: random.Random, text: str) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return text[: rng.randrange(len(text) + 1)]
    if kind == 1:
        lines = text.split("\n")
        rng.shuffle(lines)
        return "\n".join(lines)
    if kind == 2:
        return "".join(c for c in text if rng.random() > 0.1)
    if kind == 3:
        chars = list(text)
        for _ in range(rng.randrange(1, 40)):
            chars.insert(
                rng.randrange(len(chars) + 1),
                chr(rng.choice([rng.randrange(32, 0x2FFF), rng.randrange(0xD800, 0xE000)])),
            )
        return "".join(chars)
    if kind == 4:
        lines = text.split("\n")
        return "\n".join(rng.choice(lines) for _ in range(rng.randrange(1, 3 * len(lines))))
    return "".join(chr(rng.randrange(0, 0x10FFFF)) for _ in range(rng.randrange(0, 300)))


def test_fuzz_never_raises_and_always_returns_a_valid_report():
    rng = random.Random(7)
    seeds = [CANONICAL, JSON_REPORT, *(body for body, _items in EVIDENCE_CASES.values())]
    for n in range(1000):
        source = format_report(_random_report(rng)) if n % 3 == 0 else rng.choice(seeds)
        text = _mutate(rng, source)
        parsed = parse_report(text)
        assert isinstance(parsed, ParsedReport)
        assert not any(p.startswith("internal parser error") for p in parsed.problems), text
        assert Report.model_validate_json(parsed.report.model_dump_json()) == parsed.report
        assert parsed.report.conclusion is None or isinstance(parsed.report.conclusion, Label)
        assert len(parsed.problems) <= MAX_PROBLEMS + 1
        assert all(isinstance(p, str) and p for p in parsed.problems)
