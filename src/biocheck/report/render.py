"""A report for people: Markdown, JSON, or a self-contained HTML page that checks every quote.

The HTML page needs nothing from the network (inline CSS, no scripts). Every piece of text that came
from a model, a paper or a user goes through html.escape: abstracts and model output are untrusted.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from urllib.parse import quote as url_quote

from biocheck.labels import Label
from biocheck.pubmed.types import Article
from biocheck.report.parse_fields import SUMMARY_TITLES
from biocheck.report.quotes import find_quote
from biocheck.report.schema import EvidenceItem, ParsedReport, Report
from biocheck.report.writer import format_report

PUBMED_URL = "https://pubmed.ncbi.nlm.nih.gov/{}/"
NOT_RETRIEVED = "not in the retrieved papers"
QUOTE_NOT_FOUND = "quote not found in the abstract"


def is_pubmed(article: Article) -> bool:
    """Whether the article's id is a real PMID (a corpus such as SciFact uses its own ids)."""
    return article.source == "entrez" or article.source.startswith("baseline:")


def pubmed_url(article: Article) -> str | None:
    return PUBMED_URL.format(url_quote(article.pmid, safe="")) if is_pubmed(article) else None


def check_item(item: EvidenceItem, ledger: Mapping[str, Article]) -> tuple[str, str, tuple[int, int] | None]:
    """(status, where, span): status 'ok' | 'no quote' | NOT_RETRIEVED | QUOTE_NOT_FOUND; where 'title' | 'abstract'."""
    article = ledger.get(item.pmid)
    if article is None:
        return NOT_RETRIEVED, "", None
    if not item.quote.strip():
        return "no quote", "", None
    if (span := find_quote(item.quote, article.title)) is not None:
        return "ok", "title", span
    if (span := find_quote(item.quote, article.abstract)) is not None:
        return "ok", "abstract", span
    return QUOTE_NOT_FOUND, "", None


# -- Markdown and JSON ------------------------------------------------------------------------------


def render_markdown(report: Report, ledger: Mapping[str, Article] | None = None, claim: str | None = None) -> str:
    """The canonical report text, headed by the claim; with a ledger, a Sources list checks each quote."""
    parts: list[str] = []
    if claim is not None:
        parts += ["# BioCheck report", "", f"**Claim:** {claim}", ""]
    parts.append(format_report(report).rstrip("\n"))
    if ledger is not None:
        parts += ["", "## Sources"]
        for title, items in (("Supporting", report.supporting), ("Refuting", report.refuting)):
            for n, item in enumerate(items, 1):
                parts.append(f"- {title} {n}: {_source_line(item, ledger)}")
    return "\n".join(parts) + "\n"


def _source_line(item: EvidenceItem, ledger: Mapping[str, Article]) -> str:
    status, where, _span = check_item(item, ledger)
    article = ledger.get(item.pmid)
    if article is None:
        return f"PMID {item.pmid or '(none)'} ({status})"
    facts = ", ".join(str(x) for x in (article.journal, article.year) if x)
    url = pubmed_url(article)
    text = f"{'PMID' if url else 'ID'} {article.pmid}: {article.title}" + (f" ({facts})" if facts else "")
    text += f" {url}" if url else f" [{article.source}]"
    return text + (f" (quote found in the {where})" if status == "ok" else f" ({status})")


def render_json(parsed: ParsedReport, claim: str | None = None, meta: Mapping[str, object] | None = None) -> str:
    """The report schema as JSON, with the parse problems (and the claim and meta when given)."""
    data: dict[str, object] = {}
    if claim is not None:
        data["claim"] = claim
    data["report"] = parsed.report.model_dump(mode="json")
    data["problems"] = list(parsed.problems)
    data["ok"] = parsed.ok
    if meta is not None:
        data["meta"] = dict(meta)
    return json.dumps(data, ensure_ascii=False, indent=2, default=str)


# -- HTML -------------------------------------------------------------------------------------------

_EMPTY = '<span class="empty">(empty)</span>'
_BADGES = {Label.SUPPORTED: "supported", Label.REFUTED: "refuted", Label.NEI: "nei"}

_CSS = """
body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1d2330;background:#f6f7f9;margin:0}
main{max-width:880px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 8px}h2{font-size:17px;margin:28px 0 10px;border-bottom:1px solid #dde1e7}
.claim{font-size:17px;background:#fff;border-left:4px solid #4a6fa5;padding:10px 14px;margin:8px 0 14px}
.badge{display:inline-block;padding:4px 12px;border-radius:12px;font-weight:700;color:#fff;letter-spacing:.03em}
.badge.supported{background:#2e7d32}.badge.refuted{background:#c62828}.badge.nei{background:#8d6e00}
.badge.none{background:#555}
.item{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:12px 14px;margin:10px 0}
.item.flagged{border-color:#c62828;background:#fff6f6}
.id{font-weight:700}.meta-line{color:#5b6472;font-size:13px}
.flag{display:inline-block;color:#fff;background:#c62828;border-radius:4px;padding:1px 8px;font-size:13px;margin:4px 4px 0 0}
.found{display:inline-block;color:#2e7d32;font-size:13px;margin-top:4px}
blockquote{margin:8px 0;padding:4px 12px;border-left:3px solid #b0b8c4;color:#333;white-space:pre-wrap}
.context,.abstract,dd{white-space:pre-wrap}
.abstract{font-size:14px;color:#333}details{margin-top:6px}summary{cursor:pointer;color:#4a6fa5}
mark{background:#ffe066;padding:0 1px}
dt{font-weight:700;margin-top:8px}dd{margin:2px 0 0 0}
.problems li{color:#8a1c1c}.empty{color:#5b6472;font-style:italic}
footer{margin-top:32px;color:#5b6472;font-size:12px;border-top:1px solid #dde1e7;padding-top:8px}
footer span{margin-right:14px}
"""


def render_html(
    report: Report,
    ledger: Mapping[str, Article],
    claim: str,
    problems: Sequence[str] = (),
    meta: Mapping[str, object] | None = None,
) -> str:
    """A self-contained page: claim, conclusion badge, evidence with each quote checked against its paper."""
    e = html.escape
    label = report.conclusion
    badge = (
        f'<span class="badge {_BADGES[label]}">{e(label.display)}</span>'
        if label is not None
        else '<span class="badge none">NO CONCLUSION</span>'
    )
    body = [
        "<header><h1>BioCheck report</h1>",
        f'<p class="claim">{e(claim)}</p>',
        f"<p>Conclusion: {badge}</p></header>",
        _evidence_html("Supporting evidence", report.supporting, ledger),
        _evidence_html("Refuting evidence", report.refuting, ledger),
        _summary_html(report),
    ]
    if problems:
        body.append('<section class="problems"><h2>Parse problems</h2><ul>')
        body += [f"<li>{e(p)}</li>" for p in problems]
        body.append("</ul></section>")
    if meta:
        body.append(
            "<footer>"
            + "".join(f"<span>{e(str(k))}: {e(_meta_value(v))}</span>" for k, v in meta.items())
            + "</footer>"
        )
    title = claim if len(claim) <= 80 else claim[:79] + "…"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>BioCheck: {e(title)}</title><style>{_CSS}</style></head>\n"
        "<body><main>\n" + "\n".join(body) + "\n</main></body></html>\n"
    )


def _meta_value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _highlight(text: str, span: tuple[int, int] | None) -> str:
    """`text` escaped, with `span` in <mark> (escaping each piece keeps the offsets right)."""
    e = html.escape
    if span is None:
        return e(text)
    a, b = span
    return f"{e(text[:a])}<mark>{e(text[a:b])}</mark>{e(text[b:])}"


def _evidence_html(title: str, items: Sequence[EvidenceItem], ledger: Mapping[str, Article]) -> str:
    out = [f"<section><h2>{html.escape(title)}</h2>"]
    if not items:
        out.append('<p class="empty">None</p>')
    out += [_item_html(item, ledger) for item in items]
    out.append("</section>")
    return "\n".join(out)


def _item_html(item: EvidenceItem, ledger: Mapping[str, Article]) -> str:
    e = html.escape
    status, where, span = check_item(item, ledger)
    article = ledger.get(item.pmid)
    url = pubmed_url(article) if article is not None else None
    pmid = e(item.pmid) if item.pmid else "(no PMID)"
    ident = f'PMID <a href="{e(url)}">{pmid}</a>' if url else f"{'ID' if article is not None else 'PMID'} {pmid}"
    head = [f'<div><span class="id">{ident}</span>']
    if article is not None:
        head.append(f" {_highlight(article.title, span if where == 'title' else None)}")
        facts = " · ".join(e(str(x)) for x in (article.journal, article.year) if x)
        source = "" if url else e(article.source)
        if facts or source:
            head.append(f'<div class="meta-line">{" · ".join(x for x in (facts, source) if x)}</div>')
    head.append("</div>")
    flagged = status != "ok"
    lines = [f'<article class="item{" flagged" if flagged else ""}">', *head]
    lines.append(
        f'<span class="flag">{e(status)}</span>'
        if flagged
        else f'<span class="found">quote found in the {e(where)}</span>'
    )
    quote = e(item.quote) if item.quote else '<span class="empty">(no quote)</span>'
    lines.append(f"<blockquote>{quote}</blockquote>")
    if item.context:
        lines.append(f'<p class="context">{e(item.context)}</p>')
    if article is not None and article.abstract:
        abstract = _highlight(article.abstract, span if where == "abstract" else None)
        lines.append(f'<details open><summary>Abstract</summary><p class="abstract">{abstract}</p></details>')
    lines.append("</article>")
    return "\n".join(lines)


def _summary_html(report: Report) -> str:
    e = html.escape
    out = ["<section><h2>Summary</h2><dl>"]
    for key, title in SUMMARY_TITLES.items():
        value = getattr(report.summary, key)
        out.append(f"<dt>{e(title)}</dt><dd>{e(value) if value else _EMPTY}</dd>")
    out.append("</dl></section>")
    return "\n".join(out)
