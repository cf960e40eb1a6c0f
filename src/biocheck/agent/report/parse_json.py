"""Reports a model wrote as JSON (or as a Python dict literal) instead of the Markdown format."""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any

from biocheck.agent.report.parse_common import (
    SECTION_NAMES,
    canon_pmid,
    has_words,
    norm_words,
    section_kind,
    snip,
    unquote,
)
from biocheck.agent.report.parse_evidence import FIELD_LABELS, finish_item, parse_evidence
from biocheck.agent.report.parse_fields import SUMMARY_LABELS, SUMMARY_TITLES, parse_summary, read_conclusion
from biocheck.agent.report.schema import EvidenceItem, Report, Summary

_JSON_START = re.compile(r"^[ \t]*\{", re.M)
_MAX_JSON = 2_000_000  # larger blobs are not a report; skip the cost of trying
_MAX_LITERAL = 200_000  # literal_eval is far slower than json.loads: a smaller cap for dict literals
_ITEM_KEYS = {**FIELD_LABELS, "id": "pmid", "paper id": "pmid", "doc id": "pmid", "text": "quote", "sentence": "quote"}
_IGNORED_KEYS = {"claim"}  # the input, echoed back


def json_report(text: str, problems: list[str]) -> Report | None:
    """The report when `text` is a JSON object holding report fields; None to read it as Markdown."""
    start = _JSON_START.search(text)
    end = text.rfind("}")
    if start is None or end < start.start() or end - start.start() > _MAX_JSON:
        return None
    data = _load(text[start.start() : end + 1])
    if not isinstance(data, dict) or not _has_report_keys(data, depth=2):
        return None
    before = text[: start.start()]
    if has_words(before):
        problems.append(f"text before the JSON report ignored: {snip(before)!r}")
    if has_words(text[end + 1 :]):
        problems.append(f"text after the JSON report ignored: {snip(text[end + 1 :])!r}")
    return _report(data, problems)


def _load(blob: str) -> Any:
    try:
        return json.loads(blob)
    except (ValueError, RecursionError):
        pass
    if len(blob) > _MAX_LITERAL:
        return None
    try:
        with warnings.catch_warnings():  # literal_eval warns about odd escapes in model text
            warnings.simplefilter("ignore")
            return ast.literal_eval(blob)  # single quotes, trailing commas, None/True
    except Exception:  # SyntaxError, ValueError, MemoryError, RecursionError...: not a dict literal
        return None


def _key_kind(key: object) -> str | None:
    k = norm_words(str(key))
    return section_kind(k) or ("summary:" + SUMMARY_LABELS[k] if k in SUMMARY_LABELS else None)


def _has_report_keys(data: dict, depth: int) -> bool:
    return any(
        _key_kind(k) is not None or (depth > 0 and isinstance(v, dict) and _has_report_keys(v, depth - 1))
        for k, v in data.items()
    )


def _collect(data: dict, found: dict[str, Any], problems: list[str], depth: int = 0) -> None:
    """Known keys into `found` (nested objects such as {"report": {...}} or {"evidence": {...}} too)."""
    for key, value in data.items():
        kind = _key_kind(key)
        if kind is not None:
            found.setdefault(kind, value)
        elif isinstance(value, dict) and depth < 3 and _has_report_keys(value, 1):
            _collect(value, found, problems, depth + 1)
        elif norm_words(str(key)) not in _IGNORED_KEYS:
            problems.append(f"JSON field {snip(str(key))!r} ignored")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    return value if isinstance(value, str) else str(value)


def _items(value: Any, section: str, problems: list[str]) -> list[EvidenceItem]:
    if value is None:
        return []
    if isinstance(value, str):
        items, found = parse_evidence(value.split("\n"), section)
        problems += found
        return items
    entries = value if isinstance(value, list) else [value]
    items: list[EvidenceItem] = []
    for entry in entries:
        if isinstance(entry, dict):
            fields: dict[str, str] = {}
            for k, v in entry.items():
                name = _ITEM_KEYS.get(norm_words(str(k)))
                if name is None:
                    problems.append(
                        f"evidence item {len(items) + 1} under {section}: JSON field {snip(str(k))!r} ignored"
                    )
                else:
                    fields.setdefault(name, _text(v))
            item, found = finish_item(
                canon_pmid(fields.get("pmid", "")) or None,
                unquote(fields.get("quote", "")) or None,
                fields.get("context", "").strip() or None,
                len(items) + 1,
                section,
            )
            items.append(item)
            problems += found
        else:
            more, found = parse_evidence(_text(entry).split("\n"), section, first=len(items) + 1)
            items += more
            problems += found
    return items


def _summary(found: dict[str, Any], problems: list[str]) -> Summary:
    value = found.get("summary")
    flat = {k.split(":", 1)[1]: _text(v).strip() for k, v in found.items() if k.startswith("summary:")}
    if isinstance(value, dict):
        for k, v in value.items():
            field = SUMMARY_LABELS.get(norm_words(str(k)))
            if field is None:
                problems.append(f"Summary: JSON field {snip(str(k))!r} ignored")
            else:
                flat.setdefault(field, _text(v).strip())
    elif value is not None and not flat:
        summary, more = parse_summary(_text(value).split("\n"))
        problems += more
        return summary
    if "summary" not in found and not flat:
        problems.append("no Summary section")
        return Summary()
    problems += [f"Summary has no {title!r} field" for key, title in SUMMARY_TITLES.items() if key not in flat]
    return Summary(**flat)


def _report(data: dict, problems: list[str]) -> Report:
    found: dict[str, Any] = {}
    _collect(data, found, problems)
    evidence: dict[str, list[EvidenceItem]] = {}
    for kind in ("supporting", "refuting"):
        if kind not in found:
            problems.append(f"no {SECTION_NAMES[kind]} section")
        evidence[kind] = _items(found.get(kind), SECTION_NAMES[kind], problems)
    summary = _summary(found, problems)
    conclusion = None
    if "conclusion" in found:
        conclusion, more = read_conclusion(_text(found["conclusion"]))
        problems += more
    else:
        problems.append("no conclusion found")
    return Report(
        supporting=evidence["supporting"], refuting=evidence["refuting"], summary=summary, conclusion=conclusion
    )
