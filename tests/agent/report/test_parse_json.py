"""Reports written as JSON or a Python dict: where the object may stand, which keys count, how deep the
reader looks, the shapes a value may take (string, list, dict, null) and the problems each gap gives."""

from __future__ import annotations

import json

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.parse_json import _MAX_JSON, _MAX_LITERAL
from biocheck.agent.report.schema import EvidenceItem, Report, Summary
from biocheck.labels import Label

NO_SUPPORTING, NO_REFUTING, NO_SUMMARY = (
    "no Supporting evidence section",
    "no Refuting evidence section",
    "no Summary section",
)
NO_FIELDS = [
    "Summary has no 'Support reasons' field",
    "Summary has no 'Refutation reasons' field",
    "Summary has no 'Consensus and context check' field",
    "Summary has no 'Justification' field",
]
FULL_SUMMARY = {"support_reasons": "s", "refutation_reasons": "r", "consensus": "c", "justification": "j"}
SUMMARY = Summary(support_reasons="s", refutation_reasons="r", consensus_context_check="c", justification="j")


def item(pmid: str, quote: str, context: str = "") -> EvidenceItem:
    return EvidenceItem(pmid=pmid, quote=quote, context=context)


def read(data: object) -> tuple[Report, list[str]]:
    parsed = parse_report(json.dumps(data))
    return parsed.report, parsed.problems


# -- which objects are reports ----------------------------------------------------------------------


def test_an_object_without_report_keys_is_read_as_markdown():
    text = json.dumps({"name": "x", "details": {"year": 2020}})
    parsed = parse_report(text)
    assert parsed.report == Report()
    assert parsed.problems == [
        f"text before the first section ignored: {text!r}",
        NO_SUPPORTING,
        NO_REFUTING,
        NO_SUMMARY,
        "no conclusion found",
    ]


def test_report_keys_are_looked_for_two_levels_down():
    assert read({"a": {"b": {"conclusion": "REFUTED"}}}) == (
        Report(conclusion=Label.REFUTED),
        [NO_SUPPORTING, NO_REFUTING, NO_SUMMARY],
    )
    text = json.dumps({"a": {"b": {"c": {"conclusion": "REFUTED"}}}})  # three levels down: not a report
    parsed = parse_report(text)
    assert parsed.report == Report()
    assert parsed.problems[0] == f"text before the first section ignored: {text!r}"


def test_nested_objects_are_collected_three_levels_deep():
    data = {"a": {"b": {"supporting": [], "c": {"refuting": []}, "d": {"e": {"summary": {}}}}}, "conclusion": "NEI"}
    report, problems = read(data)
    assert report == Report(conclusion=Label.NEI)
    # "refuting" (level 3) is read; "summary" (level 4) is not, and the key that holds it is named
    assert problems == ["JSON field 'e' ignored", NO_SUMMARY]


def test_a_nested_object_is_entered_only_when_report_keys_sit_within_two_levels_of_it():
    data = {"conclusion": "REFUTED", "a": {"b": {"c": {"supporting": []}}}}
    assert read(data) == (
        Report(conclusion=Label.REFUTED),
        ["JSON field 'a' ignored", NO_SUPPORTING, NO_REFUTING, NO_SUMMARY],
    )


def test_text_around_the_object_is_a_problem_and_the_object_must_start_a_line():
    body = json.dumps({"supporting": [], "refuting": [], "summary": FULL_SUMMARY, "conclusion": "SUPPORTED"})
    parsed = parse_report("Here it is:\n  " + body + "\nHope this helps!")
    assert parsed.report == Report(summary=SUMMARY, conclusion=Label.SUPPORTED)
    assert parsed.problems == [
        "text before the JSON report ignored: 'Here it is:'",
        "text after the JSON report ignored: 'Hope this helps!'",
    ]
    parsed = parse_report("Here it is: " + body)  # not at a line start: Markdown rules
    assert parsed.problems[0].startswith("text before the first section ignored: 'Here it is: {")


def test_a_json_blob_up_to_the_size_limit_is_read_and_a_larger_one_is_not():
    pre, head = "Report:\n", '{"conclusion": "REFUTED", "pad": "'
    for size, is_json in ((_MAX_JSON + 1, True), (_MAX_JSON + 2, False)):  # from "{" to "}": `size - 1` apart
        blob = head + "x" * (size - len(head) - 2) + '"}'
        assert len(blob) == size
        parsed = parse_report(pre + blob)
        if is_json:
            assert parsed.report == Report(conclusion=Label.REFUTED)
            assert parsed.problems == [
                "text before the JSON report ignored: 'Report:'",
                "JSON field 'pad' ignored",
                NO_SUPPORTING,
                NO_REFUTING,
                NO_SUMMARY,
            ]
        else:
            assert parsed.report.conclusion is None
            assert parsed.problems[-1] == "no conclusion found"


def test_text_right_after_the_closing_brace_is_a_problem():
    parsed = parse_report('{"supporting": [], "refuting": [], "conclusion": "NEI"}<|im_end|>')
    assert parsed.report == Report(conclusion=Label.NEI)
    assert parsed.problems == ["text after the JSON report ignored: '<|im_end|>'", NO_SUMMARY]


def test_a_python_literal_up_to_its_size_limit_is_read_and_a_larger_one_is_not():
    head = "{'conclusion': 'REFUTED', 'pad': '"
    for size, is_read in ((_MAX_LITERAL, True), (_MAX_LITERAL + 1, False)):
        text = head + "x" * (size - len(head) - 2) + "'}"
        assert len(text) == size
        parsed = parse_report(text)
        assert (parsed.report.conclusion is Label.REFUTED) is is_read
        assert ("JSON field 'pad' ignored" in parsed.problems) is is_read


# -- evidence values --------------------------------------------------------------------------------


def test_evidence_as_a_markdown_string():
    report, problems = read(
        {
            "supporting": '- PMID: 1\n  Quote: "A."\n  Context: a\n- PMID 2: "B."',
            "refuting": "None",
            "conclusion": "NEI",
        }
    )
    assert report == Report(supporting=[item("1", "A.", "a"), item("2", "B.")], conclusion=Label.NEI)
    assert problems == ["evidence item 2 under Supporting evidence has no context", NO_SUMMARY]


def test_evidence_as_one_object_instead_of_a_list():
    report, problems = read(
        {"refuting": {"pmid": "PMID: 9", "quote": "'Q.'", "context": " c "}, "conclusion": "REFUTED"}
    )
    assert report == Report(refuting=[item("9", "Q.", "c")], conclusion=Label.REFUTED)
    assert problems == [NO_SUPPORTING, NO_SUMMARY]


def test_evidence_objects_with_missing_null_and_list_values_are_numbered_in_problems():
    data = {
        "supporting": [
            {"pmid": 1, "quote": "“A.”", "context": ["first", "second"]},
            {"pmid": 2, "quote": None, "context": None, "year": 2020},
            {"quotation": "C."},
            '[PMID: 4] "D." (RCT)',
            "PMID: 5",
        ],
        "refuting": [],
        "conclusion": "SUPPORTED",
    }
    report, problems = read(data)
    assert report.supporting == [
        item("1", "A.", "first\nsecond"),
        item("2", ""),
        item("", "C."),
        item("4", "D.", "RCT"),
        item("5", ""),
    ]
    assert problems == [
        "evidence item 2 under Supporting evidence: JSON field 'year' ignored",
        "evidence item 2 under Supporting evidence has no quote",
        "evidence item 2 under Supporting evidence has no context",
        "evidence item 3 under Supporting evidence has no PMID",
        "evidence item 3 under Supporting evidence has no context",
        "evidence item 5 under Supporting evidence has no quote",
        "evidence item 5 under Supporting evidence has no context",
        NO_SUMMARY,
    ]


def test_other_item_key_names_and_an_item_without_a_quote_key():
    report, problems = read(
        {
            "supporting": [
                {"paper id": "7", "text": "T.", "rationale": "r"},
                {"doc_id": "S2ORC8", "sentence": "U."},
                {"pmid": "9", "context": "c"},
            ]
        }
    )
    assert report.supporting == [item("7", "T.", "r"), item("S2ORC8", "U."), item("9", "", "c")]
    assert problems[:2] == [
        "evidence item 2 under Supporting evidence has no context",
        "evidence item 3 under Supporting evidence has no quote",
    ]


def test_a_multi_line_string_entry_is_read_as_markdown_items():
    report, problems = read(
        {"refuting": ['PMID: 5\nQuote: "E e."\nContext: e\nPMID: 6\nQuote: "F."', "PMID: 7"], "conclusion": "REFUTED"}
    )
    assert report.refuting == [item("5", "E e.", "e"), item("6", "F."), item("7", "")]
    assert problems == [
        NO_SUPPORTING,
        "evidence item 2 under Refuting evidence has no context",
        "evidence item 3 under Refuting evidence has no quote",
        "evidence item 3 under Refuting evidence has no context",
        NO_SUMMARY,
    ]


# -- summary values ---------------------------------------------------------------------------------


def test_summary_fields_written_flat_at_the_top_level():
    report, problems = read({"supporting": [], "refuting": [], **FULL_SUMMARY, "conclusion": "SUPPORTED"})
    assert report == Report(summary=SUMMARY, conclusion=Label.SUPPORTED)
    assert problems == []


def test_flat_summary_fields_with_gaps_are_named():
    report, problems = read({"supporting": [], "refuting": [], "justification": [" j1", "j2 "], "conclusion": "NEI"})
    assert report.summary == Summary(justification="j1\nj2")
    assert problems == NO_FIELDS[:3]


def test_flat_fields_and_a_summary_object_are_merged_flat_first():
    data = {
        "supporting": [],
        "refuting": [],
        "justification": "flat",
        "summary": {"justification": "nested", "support reasons": "s", "tone": "calm"},
        "conclusion": "NEI",
    }
    report, problems = read(data)
    assert report.summary == Summary(support_reasons="s", justification="flat")
    assert problems == ["Summary: JSON field 'tone' ignored", *NO_FIELDS[1:3]]


def test_summary_as_markdown_text():
    report, problems = read(
        {
            "supporting": [],
            "refuting": [],
            "summary": "Support reasons: s\nJustification: j\nmore",
            "conclusion": "REFUTED",
        }
    )
    assert report.summary == Summary(support_reasons="s", justification="j\nmore")
    assert problems == NO_FIELDS[1:3]


def test_an_empty_or_null_summary_names_each_missing_field():
    for value in ({}, None):
        report, problems = read({"supporting": [], "refuting": [], "conclusion": "REFUTED", "summary": value})
        assert report == Report(conclusion=Label.REFUTED)
        assert problems == NO_FIELDS


# -- conclusion values ------------------------------------------------------------------------------


def test_conclusion_problems_are_passed_on_and_a_missing_conclusion_is_none():
    report, problems = read(
        {"supporting": [], "refuting": [], "summary": FULL_SUMMARY, "verdict": ["The claim is", "REFUTED"]}
    )
    assert report.conclusion is Label.REFUTED
    assert problems == ["text in the Conclusion section ignored: 'The claim is'"]
    report, problems = read({"supporting": [], "refuting": [], "summary": FULL_SUMMARY})
    assert report == Report(summary=SUMMARY)
    assert problems == ["no conclusion found"]
