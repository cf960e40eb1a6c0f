"""Reading a baseline's verdict (a label, not a report) from the model's text.

The report parser is the one reader of labels (agent.report.parse: "Answer: REFUTED", "**Conclusion:**
Supported", a bare last line, a "## Conclusion" section, text after a <think> block, every spelling
of NOT ENOUGH INFORMATION); a label-only answer only drops its notes about missing report sections.
When no such line exists, one label stated in the text, and only one, is taken ("The claim is
supported."), with a note: small models often answer in a sentence.
"""

from __future__ import annotations

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.parse_common import read_labels, snip
from biocheck.labels import Label

NO_LABEL = "no label in the final answer"  # the same note the label-only agent (pmsearch) writes


def read_verdict(text: str, strict: bool = False) -> tuple[Label | None, list[str]]:
    """(the label, notes on how it was read); (None, [NO_LABEL ...]) when none can be read.

    `strict`: an answer line (or a bare label) only, never a label word inside a sentence; for a reply
    that may also be reasoning about what to search next (FIRE's steps).
    """
    text = text or ""
    conclusion = parse_report(text).report.conclusion
    if conclusion is not None:
        return conclusion, []
    if strict:
        return None, [f"{NO_LABEL}: no answer line in {snip(text)!r}"]
    body = text[text.lower().rfind("</think>") + len("</think>"):] if "</think>" in text.lower() else text
    labels, _leftover = read_labels(body)
    distinct = list(dict.fromkeys(labels))
    if len(distinct) == 1:
        return distinct[0], [f"no answer line; the one label in the text was taken: {snip(body)!r}"]
    why = f"several labels ({', '.join(label.display for label in distinct)})" if distinct else "none"
    return None, [f"{NO_LABEL}: {why} in {snip(body)!r}"]
