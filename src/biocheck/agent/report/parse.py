"""The agent's final report: a tolerant reader (text -> ParsedReport, never an exception) and its writer.

`format_report` writes exactly the format the system prompt asks for; `parse_report` reads that format
and the ways models deviate from it (other heading styles, bullets, quote marks, JSON, code fences, a
<think> block, ...). Every deviation that loses information is named in `ParsedReport.problems`.
docs/report.md lists the rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from biocheck.agent.report.parse_common import SECTION_NAMES, has_words, pure_label, section_kind, snip
from biocheck.agent.report.parse_evidence import parse_evidence
from biocheck.agent.report.parse_fields import parse_summary, read_conclusion, stray_conclusion
from biocheck.agent.report.parse_json import json_report
from biocheck.agent.report.schema import ParsedReport, Report
from biocheck.labels import Label

__all__ = ["parse_report"]

MAX_PROBLEMS = 50  # a garbage text must not yield a problem list longer than the report

_SURROGATE = re.compile(r"[\ud800-\udfff]")
# Lines that only wrap or decorate the report: code fences, <answer> tags, horizontal rules.
_WRAPPER = re.compile(r"\s*(?:(?:```|~~~)[\w+.-]*|</?(?:answer|report|output|response)>|([-*_])(?:\s*\1){2,})\s*", re.I)
_MD_HEADING = re.compile(r"\s{0,3}(#{1,6})(\s*)(.*)")
_BOLD_HEADING = re.compile(r"\s*(?:\d{1,2}[.)]\s*)?(\*\*|__)(.+?)\1(.*)")


def parse_report(text: str) -> ParsedReport:
    """Read a report from model output. Never raises: what cannot be read is listed in `problems`."""
    problems: list[str] = []
    try:
        report = _parse(_as_text(text), problems)
    except Exception as exc:  # a parser bug must cost one report, never an episode or a training step
        return ParsedReport(
            report=Report(), problems=[f"internal parser error ({type(exc).__name__}); nothing was read"]
        )
    if len(problems) > MAX_PROBLEMS:
        problems = problems[:MAX_PROBLEMS] + [f"... and {len(problems) - MAX_PROBLEMS} more problems"]
    return ParsedReport(report=report, problems=problems)


# -- input clean-up ---------------------------------------------------------------------------------


def _as_text(text: object) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8", "replace")
    elif not isinstance(text, str):
        text = str(text)
    text = _SURROGATE.sub("\ufffd", text)  # a lone surrogate cannot be written out as UTF-8 JSON later
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _strip_think(text: str, problems: list[str]) -> str:
    """The text after a reasoning model's <think>...</think> block."""
    low = text.lower()
    close = low.rfind("</think>")
    if close >= 0:
        after = text[close + len("</think>") :]
        if after.strip():
            return after
        problems.append("the report was found only inside the <think> block")
        return re.sub(r"</?think>", "", text, flags=re.I)
    if "<think>" in low:
        problems.append("unclosed <think> block; its text was read as the report")
        return re.sub(r"<think>", "", text, flags=re.I)
    return text


# -- sections ---------------------------------------------------------------------------------------


@dataclass
class _Section:
    kind: str | None  # "supporting" | "refuting" | "summary" | "conclusion" | None (unknown)
    title: str
    level: int  # Markdown heading level; bold and plain headings count as 2
    lines: list[str] = field(default_factory=list)
    has_text: bool = False  # kept up to date: checking the joined lines per heading would be quadratic


def _split_title(text: str) -> tuple[str, str]:
    """'Conclusion: REFUTED' -> ('Conclusion', 'REFUTED')."""
    i = text.find(":")
    return (text, "") if i < 0 else (text[:i].strip(), text[i + 1 :].strip())


def _heading(line: str) -> _Section | None:
    if len(line) > 300 or not line.strip():
        return None
    m = _MD_HEADING.match(line)
    if m:
        content = m.group(3).strip().rstrip("#").strip()
        title, inline = _split_title(content)
        kind = section_kind(title)
        if kind is None and (not m.group(2) or not content):  # "#hashtag", a lone "##"
            return None
        if kind is None:
            title, inline = content, ""
        return _Section(kind, title.strip("*_ "), len(m.group(1)), [inline] if inline else [])
    m = _BOLD_HEADING.match(line)
    if m:
        title, inline = _split_title(m.group(2).strip())
        kind = section_kind(title)
        if kind is None:
            return None
        rest = " ".join(x for x in (inline, m.group(3).strip().lstrip(":").strip()) if x)
        return _Section(kind, title, 2, [rest] if rest else [])
    title, inline = _split_title(line.strip())
    kind = section_kind(title)
    if kind is None or (inline and kind == "conclusion"):  # "Conclusion: REFUTED" is a stray line, not a heading
        return None
    return _Section(kind, title, 2, [inline] if inline else [])


def _sections(lines: list[str]) -> tuple[list[str], list[_Section]]:
    preamble: list[str] = []
    sections: list[_Section] = []
    for line in lines:
        head = _heading(line)
        cur = sections[-1] if sections else None
        if (
            head is not None
            and head.kind is None
            and cur is not None
            and cur.kind is not None
            and head.level > cur.level
        ):
            head = None  # "### Study 1" inside an evidence section belongs to it
        if (
            head is not None
            and cur is not None
            and head.kind is not None
            and head.kind == cur.kind
            and not cur.has_text
        ):
            cur.lines += head.lines  # "## Conclusion" then "**Final verdict:** X": one section
            cur.has_text = bool(head.lines)
        elif head is not None:
            head.has_text = bool(head.lines)
            sections.append(head)
        elif cur is not None:
            cur.lines.append(line)
            cur.has_text = cur.has_text or has_words(line)
        else:
            preamble.append(line)
    return preamble, sections


# -- the whole report -------------------------------------------------------------------------------


def _parse(text: str, problems: list[str]) -> Report:
    text = _strip_think(text, problems)
    lines = [line for line in text.split("\n") if not _WRAPPER.fullmatch(line)]
    as_json = json_report("\n".join(lines), problems)
    if as_json is not None:
        return as_json
    preamble, sections = _sections(lines)
    strays = _take_strays([preamble] + [s.lines for s in sections if s.kind != "conclusion"])
    conclusion_problems: list[str] = []
    conclusion = _conclusion(sections, strays, preamble, conclusion_problems)
    if has_words("\n".join(preamble)):
        problems.append(f"text before the first section ignored: {snip(chr(10).join(preamble))!r}")
    report = Report(conclusion=conclusion)
    for kind in ("supporting", "refuting"):
        found = [s for s in sections if s.kind == kind]
        if not found:
            problems.append(f"no {SECTION_NAMES[kind]} section")
            continue
        items, more = parse_evidence([line for s in found for line in s.lines], SECTION_NAMES[kind])
        setattr(report, kind, items)
        problems += more
    summaries = [s for s in sections if s.kind == "summary"]
    if summaries:
        report.summary, more = parse_summary([line for s in summaries for line in s.lines])
        problems += more
    else:
        problems.append("no Summary section")
    problems += conclusion_problems
    problems += [
        f"section {snip(s.title)!r} ignored" for s in sections if s.kind is None and has_words("\n".join(s.lines))
    ]
    return report


def _take_strays(containers: list[list[str]]) -> list[tuple[str, Label]]:
    """Remove 'Conclusion: REFUTED' lines written outside a Conclusion section; return them."""
    strays: list[tuple[str, Label]] = []
    for lines in containers:
        keep = []
        for line in lines:
            label = stray_conclusion(line)
            if label is None:
                keep.append(line)
            else:
                strays.append((line.strip(), label))
        lines[:] = keep
    return strays


def _conclusion(
    sections: list[_Section], strays: list[tuple[str, Label]], preamble: list[str], problems: list[str]
) -> Label | None:
    """The Conclusion section wins; then a stray 'Conclusion: X' line; then a last line that is only a label."""
    found = [s for s in sections if s.kind == "conclusion"]
    label, section_problems = None, []
    for s in found:
        label, section_problems = read_conclusion("\n".join(s.lines))
        if label is not None:
            break
    if len(found) > 1:
        problems.append("several Conclusion sections; the first with a label was used")
    if label is not None:
        problems += section_problems
        problems += [
            f"conclusion line {snip(line)!r} outside the Conclusion section disagrees with it; the section wins"
            for line, other in strays
            if other != label
        ]
        return label
    if strays:
        where = "the Conclusion section has no label" if found else "no Conclusion section"
        problems.append(f"{where}; conclusion read from {snip(strays[0][0])!r} line")
        return strays[0][1]
    if found:
        problems += read_conclusion("\n".join(found[0].lines))[1]
        return None
    label = _last_line_label([preamble] + [s.lines for s in sections], problems)
    if label is None:
        problems.append("no conclusion found")
    return label


def _last_line_label(containers: list[list[str]], problems: list[str]) -> Label | None:
    """A report that ends with a bare label line ("**REFUTED**") but has no Conclusion heading."""
    for lines in reversed(containers):
        for i in range(len(lines) - 1, -1, -1):
            if not lines[i].strip():
                continue
            label = pure_label(lines[i])
            if label is not None:
                problems.append(f"no Conclusion section; conclusion read from the last line {snip(lines[i].strip())!r}")
                del lines[i]
            return label
    return None
