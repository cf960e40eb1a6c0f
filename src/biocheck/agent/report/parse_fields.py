"""The Summary and Conclusion sections of a report, and conclusion lines written outside a section."""

from __future__ import annotations

import re

from biocheck.agent.report.parse_common import field_label_at_start, has_words, norm_words, read_labels, snip
from biocheck.agent.report.schema import Summary
from biocheck.labels import Label

SUMMARY_TITLES: dict[str, str] = {
    "support_reasons": "Support reasons",
    "refutation_reasons": "Refutation reasons",
    "consensus_context_check": "Consensus and context check",
    "justification": "Justification",
}
SUMMARY_LABELS: dict[str, str] = {
    "support reasons": "support_reasons",
    "supporting reasons": "support_reasons",
    "support reason": "support_reasons",
    "reasons for": "support_reasons",
    "reasons for the claim": "support_reasons",
    "reasons supporting the claim": "support_reasons",
    "refutation reasons": "refutation_reasons",
    "refuting reasons": "refutation_reasons",
    "refutation reason": "refutation_reasons",
    "reasons against": "refutation_reasons",
    "reasons against the claim": "refutation_reasons",
    "reasons refuting the claim": "refutation_reasons",
    "consensus and context check": "consensus_context_check",
    "consensus and context": "consensus_context_check",
    "consensus context check": "consensus_context_check",
    "consensus check": "consensus_context_check",
    "context check": "consensus_context_check",
    "consensus": "consensus_context_check",
    "justification": "justification",
    "justifications": "justification",
}

_BULLET = re.compile(r"\s*(?:[-*•+]|\d{1,2}[.)])\s+")
_CONCLUSION_PREFIX = re.compile(r"[\s*_#>\-]*(?:final\s+)?(?:conclusion|verdict|label|answer)\b[\s*_]*[:\-–—=]", re.I)
_STRAY = re.compile(
    r"[\s>*_\-•\"']*(?:final\s+)?(?:conclusion|verdict|label|answer)[\"']?\s*(?:\*\*|__)?\s*[:=\-–—]\s*(?P<rest>.+)",
    re.I,
)


def parse_summary(lines: list[str]) -> tuple[Summary, list[str]]:
    """The four summary fields; a field's value runs until the next field label."""
    values: dict[str, list[str]] = {}
    current: str | None = None
    loose: list[str] = []  # text before the first field label
    for raw in lines:
        line = raw.strip()
        bullet = _BULLET.match(line)
        content = line[bullet.end() :] if bullet else line
        key, rest = field_label_at_start(content, SUMMARY_LABELS)
        if key is None and (bare := SUMMARY_LABELS.get(norm_words(content))) and not re.search(r"[.!?]$", content):
            key, rest = bare, ""  # "### Support reasons" or "**Justification**" on its own line
        if key is not None:
            current = key
            values.setdefault(key, []).append(rest.strip())
        elif current is None:
            loose.append(line)
        else:
            values[current].append(line)
    loose_text = "\n".join(loose).strip()
    if not values:
        if not loose_text:
            return Summary(), ["the Summary section is empty"]
        return Summary(justification=loose_text), ["Summary has no fields; its text was read as the justification"]
    problems = [f"text in Summary ignored: {snip(loose_text)!r}"] if has_words(loose_text) else []
    problems += [f"Summary has no {title!r} field" for key, title in SUMMARY_TITLES.items() if key not in values]
    return Summary(**{key: "\n".join(v).strip() for key, v in values.items()}), problems


def read_conclusion(body: str) -> tuple[Label | None, list[str]]:
    """The first label stated in a Conclusion section, and what was odd about the section."""
    m = _CONCLUSION_PREFIX.match(body)  # "**Final verdict:** SUPPORTED" inside the section
    text = body[m.end() :] if m else body
    labels, leftover = read_labels(text)
    if not labels:
        return None, [
            f"no label in the Conclusion section: {snip(body)!r}"
            if has_words(body)
            else "the Conclusion section is empty"
        ]
    problems: list[str] = []
    distinct = list(dict.fromkeys(labels))
    if len(distinct) > 1:
        names = ", ".join(label.display for label in distinct)
        problems.append(f"the Conclusion section names several labels ({names}); took the first, {distinct[0].display}")
    if has_words(leftover):
        problems.append(f"text in the Conclusion section ignored: {snip(leftover)!r}")
    return distinct[0], problems


def stray_conclusion(line: str) -> Label | None:
    """The label of a 'Conclusion: REFUTED' line written outside a Conclusion section."""
    if len(line) > 500:
        return None
    m = _STRAY.match(line)
    if not m:
        return None
    labels, _leftover = read_labels(m.group("rest"))
    return labels[0] if labels else None
