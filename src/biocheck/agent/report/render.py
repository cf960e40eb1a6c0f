"""A report for people: Markdown, JSON, or a self-contained HTML page that checks every quote.

The HTML page needs nothing from the network (inline CSS, no scripts). It is written by the Jinja2
templates in templates/ with autoescape on: abstracts, model output, queries and claims are untrusted,
and every one of them is escaped where the template prints it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import quote as url_quote

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from biocheck.agent.report.parse_fields import SUMMARY_TITLES
from biocheck.agent.report.quotes import find_quote
from biocheck.agent.report.schema import EvidenceItem, ParsedReport, Report
from biocheck.agent.report.writer import format_report
from biocheck.evidence.types import Article
from biocheck.labels import Label


class Search(Protocol):
    """One search of an episode as its trace records it (the agent's QueryRecord): query, hits or error."""

    query: str
    pmids: list[str]
    n_results: int
    error: str | None


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


def render_markdown(report: Report, ledger: Mapping[str, Article] | None = None, claim: str | None = None,
                    queries: Sequence[Search] | None = None) -> str:
    """The canonical report text, headed by the claim; with a ledger, a Sources list checks each quote; with
    the episode's `queries`, a Searches list gives each query and its hits in order."""
    parts: list[str] = []
    if claim is not None:
        parts += ["# BioCheck report", "", f"**Claim:** {claim}", ""]
    parts.append(format_report(report).rstrip("\n"))
    if ledger is not None:
        parts += ["", "## Sources"]
        for title, items in (("Supporting", report.supporting), ("Refuting", report.refuting)):
            for n, item in enumerate(items, 1):
                parts.append(f"- {title} {n}: {_source_line(item, ledger)}")
    if queries is not None:
        parts += ["", "## Searches", *_search_lines(queries, ledger or {})]
    return "\n".join(parts) + "\n"


def _search_lines(queries: Sequence[Search], ledger: Mapping[str, Article]) -> list[str]:
    if not queries:
        return ["None: the agent answered without searching."]
    lines = []
    for n, s in enumerate(search_views(queries, ledger), 1):
        lines.append(f"{n}. {_code(s.query)} -> " + (f"error: {s.error}" if s.error else f"{s.n} hit{'' if s.n == 1 else 's'}"))
        for h in s.hits:
            tail = f" {h.url}" if h.url else f" [{h.source}]" if h.source else ""
            name = "ID" if h.source and not h.url else "PMID"
            lines.append(f"   - {name} {h.pmid}" + (f": {h.title}" if h.title else "") + tail)
    return lines


def _code(text: str) -> str:
    """`text` as one Markdown code span on one line, whatever backticks or line breaks the model put in it."""
    text = " ".join(text.split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


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

# Autoescape on for every template: what a model, a paper or a user wrote is never markup.
_ENV = Environment(loader=PackageLoader("biocheck.agent.report", "templates"),
                   autoescape=select_autoescape(enabled_extensions=("html.jinja",), default=True),
                   undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
_BADGES = {Label.SUPPORTED: "supported", Label.REFUTED: "refuted", Label.NEI: "nei"}
TITLE_CHARS = 80  # the page title shows the start of a long claim


def render_html(
    report: Report,
    ledger: Mapping[str, Article],
    claim: str,
    problems: Sequence[str] = (),
    meta: Mapping[str, object] | None = None,
    queries: Sequence[Search] | None = None,
) -> str:
    """A self-contained page: claim, conclusion badge, evidence with each quote checked against its paper,
    and, given the episode's `queries`, the searches the agent made (None: no Searches section)."""
    label = report.conclusion
    title = claim if len(claim) <= TITLE_CHARS else claim[: TITLE_CHARS - 1] + "…"
    return _ENV.get_template("report.html.jinja").render(
        title=title, claim=claim, badge=_BADGES[label] if label is not None else None,
        label=label.display if label is not None else "",
        supporting=[_item_view(i, ledger) for i in report.supporting],
        refuting=[_item_view(i, ledger) for i in report.refuting],
        summary=[(t, getattr(report.summary, key)) for key, t in SUMMARY_TITLES.items()],
        searches=search_views(queries, ledger) if queries is not None else None,
        problems=list(problems), meta=[(str(k), _meta_value(v)) for k, v in (meta or {}).items()])


def searches_html(queries: Sequence[Search], ledger: Mapping[str, Article]) -> Markup:
    """The Searches section alone (escaped markup), for a page that shows an episode without its report."""
    return Markup(_ENV.get_template("searches.html.jinja").render(searches=search_views(queries, ledger)))


@dataclass(frozen=True)
class Hit:
    pmid: str
    title: str  # "" when the paper is not in the ledger
    url: str | None  # PubMed's page, for a real PMID only
    source: str | None  # the ledger's source (None: not in the ledger)


@dataclass(frozen=True)
class SearchView:
    """What the pages show of one search: the query, its hit count or its error, each hit."""

    query: str
    n: int
    error: str
    hits: list[Hit]


def search_views(queries: Sequence[Search], ledger: Mapping[str, Article]) -> list[SearchView]:
    out = []
    for q in queries:
        hits = [Hit(pmid, a.title, pubmed_url(a), a.source) if (a := ledger.get(pmid)) else Hit(pmid, "", None, None)
                for pmid in q.pmids]
        out.append(SearchView(q.query, q.n_results, q.error or "", hits))
    return out


def _meta_value(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _item_view(item: EvidenceItem, ledger: Mapping[str, Article]) -> dict[str, object]:
    """One evidence item as the template shows it: the quote's check, its paper, where the quote was found."""
    status, where, span = check_item(item, ledger)
    article = ledger.get(item.pmid)
    url = pubmed_url(article) if article is not None else None
    meta_line = ""
    if article is not None:
        facts = " · ".join(str(x) for x in (article.journal, article.year) if x)
        meta_line = " · ".join(x for x in (facts, "" if url else article.source) if x)
    return {"pmid": item.pmid or "(no PMID)", "url": url, "article": article, "meta_line": meta_line,
            "status": status, "where": where, "span": span, "flagged": status != "ok", "quote": item.quote,
            "context": item.context}
