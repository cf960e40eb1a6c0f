"""A passage's report (JSON, Markdown, HTML): the passage with each claim's span marked by its verdict, the overall
line, the skipped sentences and why, the extraction note, then each claim's full report from the agent's own
renderers (agent/report/render.py), read from its trace."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from biocheck.agent.episode import Episode
from biocheck.agent.report.render import render_html, render_json, render_markdown
from biocheck.agent.report.schema import ParsedReport
from biocheck.labels import Label
from biocheck.narrative.run import CheckedClaim, NarrativeResult

FORMATS = ("md", "json", "html")
# One CSS class per verdict (the same names as the claim report's badges), and for a claim that failed.
CLASSES = {Label.SUPPORTED: "supported", Label.REFUTED: "refuted", Label.NEI: "nei"}
FAILED = "failed"
# Autoescape on, as in agent/report/render.py: the passage, the claims and the reports are untrusted text.
_ENV = Environment(loader=PackageLoader("biocheck.narrative", "templates"),
                   autoescape=select_autoescape(enabled_extensions=("html.jinja",), default=True),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


@dataclass(frozen=True)
class Piece:
    """A run of passage text; `claims` are the claims marked on it (none: plain text)."""

    text: str
    claims: tuple[CheckedClaim, ...] = ()


def verdict(c: CheckedClaim) -> str:
    if c.error is not None:
        return "FAILED"
    return c.conclusion.display if c.conclusion is not None else "NO CONCLUSION"


def css_class(c: CheckedClaim) -> str:
    return FAILED if c.error is not None else CLASSES.get(c.conclusion, "none") if c.conclusion else "none"


def pieces(result: NarrativeResult) -> list[Piece]:
    """The passage cut at the claims' spans, in order. Claims sharing one span are marked together; a span that
    overlaps an earlier one is not marked (its claim is still listed and reported below)."""
    by_span: dict[tuple[int, int], list[CheckedClaim]] = {}
    for c in sorted(result.claims, key=lambda c: (c.start, c.end)):
        by_span.setdefault((c.start, c.end), []).append(c)
    out, at = [], 0
    for (start, end), claims in by_span.items():
        if start < at or start == end:
            continue
        if start > at:
            out.append(Piece(result.passage[at:start]))
        out.append(Piece(result.passage[start:end], tuple(claims)))
        at = end
    if at < len(result.passage):
        out.append(Piece(result.passage[at:]))
    return out


def _episode(c: CheckedClaim) -> Episode | None:
    return Episode.model_validate_json(c.trace.read_text(encoding="utf-8")) if c.trace is not None else None


def render(result: NarrativeResult, fmt: str) -> str:
    return {"md": render_narrative_markdown, "json": render_narrative_json, "html": render_narrative_html}[fmt](result)


def render_narrative_json(result: NarrativeResult) -> str:
    claims: list[dict[str, Any]] = []
    for c in result.claims:
        ep = _episode(c)
        report = None if ep is None else json.loads(
            render_json(ParsedReport(report=ep.report, problems=ep.parse_problems), claim=ep.claim))
        claims.append({"id": c.id, "start": c.start, "end": c.end, "span": result.passage[c.start:c.end],
                       "claim": c.text, "conclusion": c.conclusion.value if c.conclusion else None,
                       "trace": c.trace.as_posix() if c.trace else None, "error": c.error, "report": report})
    data = {"passage": result.passage, "overall": result.overall, "method": result.method, "note": result.note,
            "claims": claims,
            "skipped": [{"start": s.start, "end": s.end, "text": result.passage[s.start:s.end], "reason": s.reason}
                        for s in result.skipped]}
    return json.dumps(data, ensure_ascii=False, indent=2)


_MD_SPECIAL = re.compile(r"([\\\[\]*_`<>])")


def _md(text: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", text)


def render_narrative_markdown(result: NarrativeResult) -> str:
    marked = "".join(_md(p.text) if not p.claims else
                     f"[{_md(p.text)}](#{p.claims[0].id}) **[{' / '.join(verdict(c) for c in p.claims)}]**"
                     for p in pieces(result))
    lines = ["# BioCheck passage report", "", f"**Overall:** {result.overall}", "",
             f"**Claims found by:** {'the model' if result.method == 'model' else 'the sentence rule'}"]
    if result.note:
        lines += ["", f"> Note: {result.note}"]
    lines += ["", "## Passage", "", marked.replace("\n", "  \n"), "", "## Claims", ""]
    lines += [f"{i}. [{c.id}](#{c.id}) {verdict(c)}: {_md(c.text)}" + (f" (failed: {c.error})" if c.error else "")
              for i, c in enumerate(result.claims, 1)] or ["None"]
    lines += ["", "## Skipped", ""]
    lines += [f"- {s.reason}: {_md(result.passage[s.start:s.end])}" for s in result.skipped] or ["None"]
    for c in result.claims:
        lines += ["", f'<a id="{c.id}"></a>', "", f"## Claim {c.id}: {verdict(c)}", ""]
        ep = _episode(c)
        if ep is None:
            lines.append(f"Failed: {c.error}")
            continue
        text = render_markdown(ep.report, ledger=ep.ledger, claim=ep.claim, queries=ep.queries)
        lines.append(re.sub(r"(?m)^(#+) ", r"##\1 ", text).rstrip())  # its headings under this claim's
    return "\n".join(lines) + "\n"


def render_narrative_html(result: NarrativeResult) -> str:
    reports = []
    for c in result.claims:
        ep = _episode(c)
        page = None if ep is None else render_html(ep.report, ep.ledger, ep.claim, problems=ep.parse_problems,
                                                    queries=ep.queries)
        reports.append((c, page))
    return _ENV.get_template("narrative.html.jinja").render(
        result=result, pieces=pieces(result), reports=reports, verdict=verdict, css_class=css_class,
        skipped=[(s.reason, result.passage[s.start:s.end]) for s in result.skipped])
