"""The report writer: a Report in exactly the format the system prompt asks for.

`biocheck.agent.report.parse.parse_report` reads it back unchanged (tests/agent/report/test_parse.py checks the round trip).
"""

from __future__ import annotations

from biocheck.agent.report.parse_fields import SUMMARY_TITLES
from biocheck.agent.report.schema import Report


def format_report(report: Report) -> str:
    """The report in exactly the system prompt's format; `parse_report` reads it back unchanged."""
    lines: list[str] = []
    for title, items in (("Supporting evidence", report.supporting), ("Refuting evidence", report.refuting)):
        lines.append(f"## {title}")
        if not items:
            lines.append("None")
        for item in items:
            context = item.context.split("\n")
            lines += [f"- PMID: {item.pmid}".rstrip(), f'  Quote: "{item.quote}"', f"  Context: {context[0]}".rstrip()]
            lines += [f"  {line}" if line else "" for line in context[1:]]
    lines.append("## Summary")
    for key, title in SUMMARY_TITLES.items():
        first, *more = getattr(report.summary, key).split("\n")
        lines += [f"{title}: {first}".rstrip(), *more]
    lines.append("## Conclusion")
    if report.conclusion is not None:
        lines.append(report.conclusion.display)
    return "\n".join(lines) + "\n"
