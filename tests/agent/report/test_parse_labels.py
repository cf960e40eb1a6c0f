"""Labels in free text: negations are never labels, and the rules that pick a report's conclusion.

A misread negation flips a verdict ("doesn't support" read as SUPPORTED), so each negation form has
its own case, through the pure helpers and through `parse_report`.
"""

from __future__ import annotations

import pytest

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.parse_common import pure_label, read_labels
from biocheck.agent.report.parse_fields import read_conclusion, stray_conclusion
from biocheck.labels import Label
from tests.helpers.reports import CANONICAL, SUMMARY

# -- negations ---------------------------------------------------------------------------------------

NEGATED = [
    "The evidence doesn't support the claim.",
    "The evidence does not support the claim.",
    "The trials don’t support the claim.",  # curly apostrophe
    "isn't supported",
    "It was never supported.",
    "neither supported nor refuted",
    "unsupported",
    "un-supported",
    "not refuted",
    "NOT SUPPORTED",
    "NOT_SUPPORTED",
    "not-refuted",
    "wasn’t refuted",
    "The claim cannot be supported.",
    "The claim is not fully supported.",
    "not well supported",
    "It has not been refuted.",
    "No evidence supports the claim.",
    "The evidence lacks support.",
    "The evidence fails to support the claim.",
    "non-supported",
]

POSITIVE = {
    "SUPPORTED": Label.SUPPORTED,
    "Refuted.": Label.REFUTED,
    "supports": Label.SUPPORTED,
    "refutes": Label.REFUTED,
    "NOT ENOUGH INFORMATION": Label.NEI,
    "NEI": Label.NEI,
    "Not enough info": Label.NEI,
    "insufficient evidence": Label.NEI,
}


@pytest.mark.parametrize("text", NEGATED)
def test_a_negated_word_is_no_label_and_stays_in_the_leftover(text):
    assert read_labels(text) == ([], text)
    assert pure_label(text) is None


@pytest.mark.parametrize("text", NEGATED)
def test_a_negated_conclusion_is_no_conclusion(text):
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n" + text))
    assert parsed.report.conclusion is None
    assert parsed.problems == [f"no label in the Conclusion section: {text!r}"]


@pytest.mark.parametrize("text", NEGATED)
def test_a_negated_stray_or_last_line_is_no_conclusion(text):
    assert stray_conclusion("Conclusion: " + text) is None
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "Verdict: " + text))
    assert parsed.report.conclusion is None and "no conclusion found" in parsed.problems
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", text))  # a bare last line
    assert parsed.report.conclusion is None and "no conclusion found" in parsed.problems


@pytest.mark.parametrize("text,label", POSITIVE.items(), ids=POSITIVE.keys())
def test_positive_labels(text, label):
    labels, leftover = read_labels(text)
    assert labels == [label] and leftover.strip(" .") == ""
    assert pure_label(text) is label
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n" + text))
    assert parsed.report.conclusion is label and parsed.problems == []


def test_a_negation_only_cancels_the_word_it_governs():
    labels, leftover = read_labels("not SUPPORTED but REFUTED")
    assert labels == [Label.REFUTED] and leftover == "not SUPPORTED but "
    text = "The data doesn't support it; the claim is REFUTED."
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\n" + text))
    assert parsed.report.conclusion is Label.REFUTED


def test_section_words_are_not_labels():
    assert read_labels("supporting and refuting studies") == ([], "supporting and refuting studies")
    assert pure_label("**Supported.**") is Label.SUPPORTED
    assert pure_label("SUPPORTED or REFUTED") is None  # two labels are not one label
    assert pure_label("SUPPORTED " + "x" * 200) is None  # long text is never a bare label


# -- conclusion rules: which label a report concludes -----------------------------------------------

NO_CONCLUSION = CANONICAL.replace("## Conclusion\nSUPPORTED\n", "")


def test_the_first_conclusion_section_with_a_label_wins():
    parsed = parse_report(CANONICAL.replace("## Conclusion\nSUPPORTED", "## Conclusion\nmaybe\n## Verdict\nREFUTED"))
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.problems == ["several Conclusion sections; the first with a label was used"]
    parsed = parse_report(CANONICAL + "## Final answer\nREFUTED\n")
    assert parsed.report.conclusion is Label.SUPPORTED
    assert parsed.problems == ["several Conclusion sections; the first with a label was used"]


def test_a_stray_line_fills_a_conclusion_section_without_a_label():
    text = CANONICAL.replace("Justification: The larger trials support the claim.", "Justification: j\nVerdict: REFUTED")
    parsed = parse_report(text.replace("## Conclusion\nSUPPORTED", "## Conclusion\nhard to say"))
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.report.summary.justification == "j"
    assert parsed.problems == ["the Conclusion section has no label; conclusion read from 'Verdict: REFUTED' line"]


def test_the_first_of_several_stray_lines_wins():
    text = NO_CONCLUSION.replace("Justification: The larger trials support the claim.",
                                 "Justification: j\nVerdict: REFUTED\nFinal answer: SUPPORTED")
    parsed = parse_report(text)
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.problems == ["no Conclusion section; conclusion read from 'Verdict: REFUTED' line"]


def test_a_stray_line_that_agrees_with_the_section_is_not_a_problem():
    text = CANONICAL.replace("Justification: The larger trials support the claim.", "Justification: j\nVerdict: SUPPORTED")
    parsed = parse_report(text)
    assert parsed.report.conclusion is Label.SUPPORTED and parsed.problems == []
    assert parsed.report.summary.justification == "j"  # the line is still taken out of the summary


def test_a_stray_line_wins_over_a_bare_last_line():
    text = NO_CONCLUSION.replace("Justification: The larger trials support the claim.",
                                 "Justification: j\nVerdict: REFUTED") + "SUPPORTED\n"
    parsed = parse_report(text)
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.problems == ["no Conclusion section; conclusion read from 'Verdict: REFUTED' line"]


def test_only_the_last_non_blank_line_can_be_a_bare_label():
    parsed = parse_report(NO_CONCLUSION + "**REFUTED**\n\n  \n")
    assert parsed.report.conclusion is Label.REFUTED
    assert parsed.report.summary == SUMMARY  # the label line is not part of the justification
    parsed = parse_report(NO_CONCLUSION + "REFUTED\nThat is my answer.\n")
    assert parsed.report.conclusion is None
    assert parsed.problems[-1] == "no conclusion found"


def test_a_last_line_with_more_than_a_label_is_no_conclusion():
    parsed = parse_report(NO_CONCLUSION + "The claim is REFUTED.\n")
    assert parsed.report.conclusion is None
    assert parsed.problems == ["no conclusion found"]


def test_a_conclusion_section_without_a_label_stops_the_search():
    # With a Conclusion section present, a bare label on an earlier section's last line is not read.
    text = CANONICAL.replace("Justification: The larger trials support the claim.\n",
                             "Justification: j\nREFUTED\n").replace("## Conclusion\nSUPPORTED", "## Conclusion\n")
    parsed = parse_report(text)
    assert parsed.report.conclusion is None
    assert parsed.problems == ["the Conclusion section is empty"]


def test_read_conclusion_states_the_first_label_and_names_the_others():
    assert read_conclusion("SUPPORTED. SUPPORTED!") == (Label.SUPPORTED, [])  # a repeat is not a conflict
    assert read_conclusion("**Final verdict:** REFUTED") == (Label.REFUTED, [])
    assert read_conclusion("NEI, maybe REFUTED") == (
        Label.NEI,
        ["the Conclusion section names several labels (NOT ENOUGH INFORMATION, REFUTED); took the first, "
         "NOT ENOUGH INFORMATION", "text in the Conclusion section ignored: ', maybe'"],
    )
    assert read_conclusion("  \n") == (None, ["the Conclusion section is empty"])


def test_stray_conclusion_needs_a_conclusion_word_and_a_label():
    assert stray_conclusion("- **Verdict:** REFUTED") is Label.REFUTED
    assert stray_conclusion('"answer": "NEI"') is Label.NEI
    assert stray_conclusion("Justification: REFUTED by two trials") is None  # not a conclusion word
    assert stray_conclusion("Conclusion: the evidence is mixed") is None  # no label
    assert stray_conclusion("Conclusion: REFUTED" + " " * 500) is None  # a huge line is never a stray verdict
