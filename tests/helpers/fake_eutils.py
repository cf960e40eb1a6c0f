"""A local fake of NCBI E-utilities (esearch.fcgi, efetch.fcgi) for tests and benchmarks.

It serves genuine-shaped XML from a small in-memory corpus, in the shapes NCBI's answers have
(checked against real replies): eSearchResult with a TranslationSet that maps terms to MeSH, the
QueryTranslation built from it, and QueryKey/WebEnv when asked for `usehistory=y`; a pretty-printed
PubmedArticleSet with the real DOCTYPE line, AuthorList, CopyrightInformation, and titles and
abstracts carrying NCBI's inline markup (<i>, <b>, <u>, <sub>, <sup>, pretty-printed MathML).
It records every request (monotonic time, endpoint, parameters), injects faults on demand, and can
enforce NCBI's rate limit (counting requests beyond N in any 1-second sliding window as violations,
and optionally answering them with 429 as NCBI does).

    with FakeEutils(max_per_second=3) as server:
        server.inject("status", status=503, times=2)
        client = EntrezClient(base_url=server.url)
"""

from __future__ import annotations

import json
import re
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from html import unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import parse_qsl, urlsplit
from xml.sax.saxutils import escape, quoteattr

ESEARCH_HEAD = (
    '<?xml version="1.0" encoding="UTF-8" ?>\n'
    '<!DOCTYPE eSearchResult PUBLIC "-//NLM//DTD esearch 20060628//EN" '
    '"https://eutils.ncbi.nlm.nih.gov/eutils/dtd/20060628/esearch.dtd">\n'
)
PUBMED_HEAD = (
    '<?xml version="1.0" ?>\n'
    '<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" '
    '"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n'
)

FAULT_KINDS = ("status", "slow", "truncate", "disconnect", "html", "empty", "phrase_not_found", "error")


_TAG = re.compile(r"<[^<>]+>")


@dataclass
class FakeArticle:
    """One PubMed record. `title` and abstract texts are XML fragments as NCBI sends them: inline
    markup (<i>, <sub>, MathML) is written as is, a literal "<" or "&" as &lt; / &amp;."""

    pmid: str
    title: str
    # str: one plain AbstractText; list of (label, text): a structured abstract; None: no Abstract
    abstract: str | list[tuple[str, str]] | None
    year: int | None = 2020
    journal: str = "Journal of Evidence Tests"
    mesh: list[str] = field(default_factory=list)
    medline_date: str | None = None  # e.g. "1998 Dec-1999 Jan", used instead of Year
    authors: list[tuple[str, str]] = field(default_factory=lambda: [("Tester", "Ada")])  # (last, fore)
    copyright: str | None = None  # <CopyrightInformation> at the end of <Abstract>

    def text(self) -> str:
        """Plain lower-case text for the fake's search (tags dropped, entities decoded)."""
        parts = [self.title, " ".join(self.mesh)]
        if isinstance(self.abstract, str):
            parts.append(self.abstract)
        elif self.abstract:
            parts.extend(t for _, t in self.abstract)
        return unescape(_TAG.sub(" ", " ".join(parts))).lower()


MATHML_VO2MAX = """<mml:math xmlns:mml="http://www.w3.org/1998/Math/MathML">
                        <mml:msub>
                            <mml:mrow>
                                <mml:mover>
                                    <mml:mrow>
                                        <mml:mi>V</mml:mi>
                                    </mml:mrow>
                                    <mml:mo>.</mml:mo>
                                </mml:mover>
                                <mml:mi>O</mml:mi>
                            </mml:mrow>
                            <mml:mrow>
                                <mml:mn>2</mml:mn>
                                <mml:mi>m</mml:mi>
                                <mml:mi>a</mml:mi>
                                <mml:mi>x</mml:mi>
                            </mml:mrow>
                        </mml:msub>
                        <mml:mtext> </mml:mtext>
                    </mml:math>"""  # V-dot O2max, laid out as PubMed's own XML lays it out


CORPUS: list[FakeArticle] = [
    FakeArticle(
        "31000001",
        "Aspirin for the primary prevention of cardiovascular events in older adults.",
        [
            ("BACKGROUND", "Aspirin is widely used for primary prevention of cardiovascular disease."),
            ("METHODS", "We randomly assigned 19114 older adults to aspirin 100 mg daily or placebo."),
            ("RESULTS", "Aspirin did not reduce cardiovascular events and increased major hemorrhage."),
            ("CONCLUSIONS", "Low-dose aspirin did not lower cardiovascular risk in older adults."),
        ],
        year=2018,
        journal="The New England journal of medicine",
        mesh=["Aspirin", "Cardiovascular Diseases", "Aged", "Primary Prevention"],
    ),
    FakeArticle(
        "31000002",
        "Vitamin D supplementation and prevention of type 2 diabetes.",
        "Vitamin D supplementation at 4000 IU per day did not significantly lower the risk of diabetes "
        "among persons at high risk for type 2 diabetes.",
        year=2019,
        journal="The New England journal of medicine",
        mesh=["Vitamin D", "Diabetes Mellitus, Type 2", "Dietary Supplements"],
    ),
    FakeArticle(
        "31000003",
        "Statin therapy and <i>LDL</i> cholesterol: a meta-analysis.",
        [
            ("OBJECTIVE", "To quantify the effect of statin therapy on LDL cholesterol and cardiovascular events."),
            ("DESIGN", "Meta-analysis of 26 randomised trials."),
            ("RESULTS", "Each 1 mmol/L reduction in LDL cholesterol reduced major vascular events by 22%."),
        ],
        year=2010,
        journal="Lancet (London, England)",
        mesh=["Hydroxymethylglutaryl-CoA Reductase Inhibitors", "Cholesterol, LDL", "Cardiovascular Diseases"],
    ),
    FakeArticle(
        "31000004",
        "Aspirin and colorectal cancer incidence: long-term follow-up of randomised trials.",
        "Daily aspirin for five years or longer reduced the long-term incidence of colorectal cancer.",
        year=2010,
        journal="Lancet (London, England)",
        mesh=["Aspirin", "Colorectal Neoplasms"],
    ),
    FakeArticle(
        "31000005",
        "Editorial: the aspirin question.",
        None,  # editorials often have no abstract
        year=None,
        medline_date="2019 Dec-2020 Jan",
        journal="BMJ (Clinical research ed.)",
        mesh=["Aspirin"],
    ),
    FakeArticle(
        "31000006",
        "Vitamin D and influenza: a randomised trial in schoolchildren.",
        "Vitamin D3 supplementation during winter reduced the incidence of influenza A in schoolchildren.",
        year=2010,
        journal="The American journal of clinical nutrition",
        mesh=["Vitamin D", "Influenza, Human", "Child"],
    ),
    FakeArticle(
        "31000007",
        "Coffee consumption and mortality.",
        "Coffee drinking was inversely associated with total and cause-specific mortality.",
        year=2012,
        journal="The New England journal of medicine",
        mesh=["Coffee", "Mortality"],
    ),
    FakeArticle(
        "31000008",
        "Metformin and cancer risk in diabetes: a cohort study.",
        [("PURPOSE", "Metformin may lower cancer risk."), ("FINDINGS", "Metformin use was associated with a lower cancer incidence.")],
        year=2009,
        journal="Diabetes care",
        mesh=["Metformin", "Neoplasms", "Diabetes Mellitus, Type 2"],
    ),
    # Inline markup as NCBI sends it: MathML, <sub>/<sup>/<i> in the abstract, an escaped "<".
    FakeArticle(
        "31000009",
        "Maximal oxygen uptake and the lactate threshold in <i>trained</i> runners.",
        f"Maximal oxygen uptake ( {MATHML_VO2MAX} ) was measured in 14 trained runners. The lactate threshold "
        "LE<sub>min</sub> predicted the velocity at the maximal lactate steady state (<i>r</i> = 0.91; "
        "<i>P</i> &lt; 0.001), and CO<sub>2</sub> output exceeded 4 L·min<sup>-1</sup> at "
        f"{MATHML_VO2MAX}.",
        year=2018,
        journal="Frontiers in physiology",
        mesh=["Oxygen Consumption", "Running", "Lactic Acid"],
        authors=[("Runner", "Iker"), ("Pacer", "Ane")],
    ),
    FakeArticle(
        "31000010",
        "Carbon dioxide retention in <b>chronic</b> obstructive pulmonary disease: the role of <u>oxygen</u> therapy.",
        [
            ("BACKGROUND", "Oxygen therapy can raise the arterial partial pressure of CO<sub>2</sub> "
             "(P<sub>a</sub>CO<sub>2</sub>) in hypercapnic patients."),
            ("RESULTS", "P<sub>a</sub>CO<sub>2</sub> rose by 1.2 kPa at an F<sub>I</sub>O<sub>2</sub> of 0.5; "
             "<b>all</b> changes reversed within 30 min (r<sup>2</sup> = 0.64, p<sub>trend</sub> &lt; 0.01)."),
            ("CONCLUSIONS", "Titrated oxygen to a saturation of 88-92% avoids <u>hypercapnia</u> in <i>most</i> patients."),
        ],
        year=2021,
        journal="Respiratory tests",
        mesh=["Pulmonary Disease, Chronic Obstructive", "Hypercapnia", "Oxygen Inhalation Therapy"],
        copyright="© 2021 The Authors. Published by Test Press Ltd. All rights reserved.",
    ),
]


def _tokens(term: str) -> list[str]:
    term = re.sub(r"\[[^\]]*\]", " ", term.lower())  # field tags like [tiab], [mesh]
    words = re.findall(r"[a-z0-9]+", term)
    return [w for w in words if w not in ("and", "or", "not")]


def esearch_xml(
    ids: list[str],
    count: int,
    translation: str,
    retmax: int,
    not_found: list[str] = (),
    warnings: list[str] = (),
    error: str | None = None,
    translations: list[tuple[str, str]] = (),
    history: tuple[str, str] | None = None,
) -> bytes:
    """An eSearchResult laid out as NCBI's (one line, ids one per line, Translation padded with spaces).

    `translations`: (From, To) pairs of the TranslationSet; `history`: (QueryKey, WebEnv).
    """
    if error is not None:
        return (ESEARCH_HEAD + f"<eSearchResult><ERROR>{escape(error)}</ERROR></eSearchResult>\n").encode()
    id_list = "<IdList>\n" + "".join(f"<Id>{i}</Id>\n" for i in ids) + "</IdList>" if ids else "<IdList/>"
    keys = f"<QueryKey>{history[0]}</QueryKey><WebEnv>{escape(history[1])}</WebEnv>" if history else ""
    tset = "".join(
        f"<Translation>     <From>{escape(a)}</From>     <To>{escape(b)}</To>    </Translation>" for a, b in translations
    )
    tset = f"<TranslationSet>{tset}</TranslationSet>" if tset else "<TranslationSet/>"
    xml = (
        f"<eSearchResult><Count>{count}</Count><RetMax>{len(ids) if ids else 0}</RetMax><RetStart>0</RetStart>"
        f"{keys}{id_list}{tset}<QueryTranslation>{escape(translation)}</QueryTranslation>"
    )
    if not_found:
        xml += "<ErrorList>" + "".join(f"<PhraseNotFound>{escape(p)}</PhraseNotFound>" for p in not_found)
        xml += "</ErrorList>"
    if warnings:
        xml += "<WarningList>" + "".join(f"<OutputMessage>{escape(w)}</OutputMessage>" for w in warnings)
        xml += "</WarningList>"
    return (ESEARCH_HEAD + xml + "</eSearchResult>\n").encode()


def _lines(depth: int, *lines: str) -> list[str]:
    return [" " * (4 * depth) + line for line in lines]


def _article_xml(a: FakeArticle) -> str:
    """One PubmedArticle, indented four spaces per level as efetch's are."""
    if a.medline_date:
        date = _lines(6, f"<MedlineDate>{escape(a.medline_date)}</MedlineDate>")
    else:
        date = _lines(6, f"<Year>{a.year}</Year>", "<Month>Jan</Month>") if a.year is not None else []
    abstract: list[str] = []
    if a.abstract is not None:
        parts = [(None, a.abstract)] if isinstance(a.abstract, str) else a.abstract
        abstract = _lines(3, "<Abstract>")
        for label, text in parts:  # texts are XML fragments (markup kept), see FakeArticle
            attrs = f" Label={quoteattr(label)} NlmCategory={quoteattr(label)}" if label else ""
            abstract += _lines(4, f"<AbstractText{attrs}>{text}</AbstractText>")
        if a.copyright:
            abstract += _lines(4, f"<CopyrightInformation>{escape(a.copyright)}</CopyrightInformation>")
        abstract += _lines(3, "</Abstract>")
    authors: list[str] = []
    if a.authors:
        authors = _lines(3, '<AuthorList CompleteYN="Y">')
        for last, fore in a.authors:
            authors += _lines(4, '<Author ValidYN="Y">')
            authors += _lines(5, f"<LastName>{escape(last)}</LastName>", f"<ForeName>{escape(fore)}</ForeName>",
                              f"<Initials>{escape(fore[:1])}</Initials>")
            authors += _lines(4, "</Author>")
        authors += _lines(3, "</AuthorList>")
    mesh: list[str] = []
    if a.mesh:
        mesh = _lines(2, "<MeshHeadingList>")
        for i, m in enumerate(a.mesh):
            mesh += _lines(3, "<MeshHeading>")
            mesh += _lines(4, f'<DescriptorName UI="D{i:06d}" MajorTopicYN="N">{escape(m)}</DescriptorName>')
            mesh += _lines(3, "</MeshHeading>")
        mesh += _lines(2, "</MeshHeadingList>")
    lines = [
        *_lines(0, "<PubmedArticle>"),
        *_lines(1, '<MedlineCitation Status="MEDLINE" Owner="NLM">'),
        *_lines(2, f'<PMID Version="1">{a.pmid}</PMID>', '<Article PubModel="Print">'),
        *_lines(3, "<Journal>"),
        *_lines(4, '<ISSN IssnType="Print">0000-0000</ISSN>', '<JournalIssue CitedMedium="Print">'),
        *_lines(5, "<Volume>1</Volume>", "<PubDate>"),
        *date,
        *_lines(5, "</PubDate>"),
        *_lines(4, "</JournalIssue>", f"<Title>{escape(a.journal)}</Title>"),
        *_lines(3, "</Journal>", f"<ArticleTitle>{a.title}</ArticleTitle>"),
        *abstract,
        *authors,
        *_lines(3, "<Language>eng</Language>", "<PublicationTypeList>"),
        *_lines(4, '<PublicationType UI="D016428">Journal Article</PublicationType>'),
        *_lines(3, "</PublicationTypeList>"),
        *_lines(2, "</Article>", "<MedlineJournalInfo>"),
        *_lines(3, "<Country>England</Country>", "<MedlineTA>Test J</MedlineTA>", "<NlmUniqueID>0000000</NlmUniqueID>"),
        *_lines(2, "</MedlineJournalInfo>"),
        *mesh,
        *_lines(1, "</MedlineCitation>", "<PubmedData>"),
        *_lines(2, "<PublicationStatus>ppublish</PublicationStatus>", "<ArticleIdList>"),
        *_lines(3, f'<ArticleId IdType="pubmed">{a.pmid}</ArticleId>'),
        *_lines(2, "</ArticleIdList>"),
        *_lines(1, "</PubmedData>"),
        *_lines(0, "</PubmedArticle>"),
    ]
    return "\n".join(lines) + "\n"


def pubmed_xml(articles: list[FakeArticle], deleted: list[str] = ()) -> bytes:
    """A PubmedArticleSet document (efetch reply or baseline/update file)."""
    body = "".join(_article_xml(a) for a in articles)
    if deleted:
        body += "<DeleteCitation>\n" + "".join(f'    <PMID Version="1">{p}</PMID>\n' for p in deleted)
        body += "</DeleteCitation>\n"
    return (PUBMED_HEAD + "<PubmedArticleSet>\n" + body + "</PubmedArticleSet>\n").encode()


def max_in_window(times: list[float], window: float = 1.0) -> int:
    """Most of `times` in any `window`-second span (closed on both ends: strictest)."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] > window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@dataclass
class Fault:
    kind: str
    endpoint: str | None = None  # "esearch" | "efetch" | None (any)
    status: int = 503
    retry_after: str | None = None
    delay: float = 2.0
    message: str = "Search Backend failed: internal error"
    times: int = 1


@dataclass
class RecordedRequest:
    time: float  # time.monotonic() on arrival
    endpoint: str  # "esearch" | "efetch" | other path
    params: dict[str, str]
    status: int = 200
    fault: str | None = None


class FakeEutils:
    """Threaded fake E-utilities server on 127.0.0.1 (random port)."""

    def __init__(
        self,
        corpus: list[FakeArticle] | None = None,
        max_per_second: int | None = None,
        reject_over_limit: bool = False,
        latency: float = 0.0,
    ) -> None:
        self.corpus = {a.pmid: a for a in (corpus if corpus is not None else CORPUS)}
        self.max_per_second = max_per_second
        self.reject_over_limit = reject_over_limit
        self.latency = latency  # added to every answer, like a real network round trip
        self.efetch_reverse = False  # answer efetch in reverse id order (clients must reorder)
        self.history = False  # send QueryKey/WebEnv even without usehistory=y
        self.violations = 0
        self._requests: list[RecordedRequest] = []
        self._recent: deque[float] = deque()
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FakeEutils:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._httpd.block_on_close = False  # keep-alive connections must not stall shutdown
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/entrez/eutils/"

    # ------------------------------------------------------------------ control & inspection

    def inject(self, kind: str, times: int = 1, endpoint: str | None = None, **options) -> None:
        """Make the next `times` matching requests fail as `kind` (see FAULT_KINDS)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; choose from {FAULT_KINDS}")
        with self._lock:
            self._faults.append(Fault(kind=kind, endpoint=endpoint, times=times, **options))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_to(self, endpoint: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.endpoint == endpoint]

    def max_in_window(self, window: float = 1.0) -> int:
        """Most requests seen in any `window`-second span (closed on both ends: strictest)."""
        return max_in_window([r.time for r in self.requests], window)

    # ------------------------------------------------------------------ request handling

    def _arrive(self, endpoint: str, params: dict[str, str]) -> tuple[RecordedRequest, Fault | None, bool]:
        now = time.monotonic()
        with self._lock:
            record = RecordedRequest(now, endpoint, params)
            self._requests.append(record)
            over = False
            if self.max_per_second is not None:
                self._recent.append(now)
                while now - self._recent[0] > 1.0:
                    self._recent.popleft()
                if len(self._recent) > self.max_per_second:
                    self.violations += 1
                    over = True
            fault = None
            for f in self._faults:
                if f.times > 0 and f.endpoint in (None, endpoint):
                    f.times -= 1
                    fault = f
                    record.fault = f.kind
                    break
            self._faults = [f for f in self._faults if f.times > 0]
            return record, fault, over

    def translations(self, term: str) -> list[tuple[str, str]]:
        """The TranslationSet: each search word that names a MeSH heading of the corpus, as NCBI maps it."""
        headings = {m.lower() for a in self.corpus.values() for m in a.mesh}
        return [(t, f'"{t}"[MeSH Terms] OR "{t}"[All Fields]') for t in dict.fromkeys(_tokens(term)) if t in headings]

    def search(self, term: str, retmax: int) -> tuple[list[str], int, str, list[str]]:
        """A tiny AND search over title/abstract/MeSH; returns ids, count, translation, not-found terms.

        The translation is NCBI's: a word with a MeSH mapping becomes its `To` in parentheses.
        """
        tokens = list(dict.fromkeys(_tokens(term)))
        texts = {pmid: a.text() for pmid, a in self.corpus.items()}
        present = [t for t in tokens if any(re.search(rf"\b{t}\b", x) for x in texts.values())]
        missing = [t for t in tokens if t not in present]
        mapped = dict(self.translations(term))
        parts = [f"({mapped[t]})" if t in mapped else f'"{t}"[All Fields]' for t in (present or tokens)]
        translation = " AND ".join(parts) if len(parts) > 1 else parts[0].removeprefix("(").removesuffix(")")
        if not present:
            return [], 0, translation, missing
        scores = {
            pmid: sum(len(re.findall(rf"\b{t}\b", x)) for t in present)
            for pmid, x in texts.items()
            if all(re.search(rf"\b{t}\b", x) for t in present)
        }
        ranked = sorted(scores, key=lambda p: (-scores[p], p))
        return ranked[:retmax], len(ranked), translation, missing


class _Handler(BaseHTTPRequestHandler):
    fake: FakeEutils
    protocol_version = "HTTP/1.1"  # keep-alive, as NCBI serves

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._handle(dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True)))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length).decode()
        params = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        params.update(parse_qsl(body, keep_blank_values=True))
        self._handle(params)

    def _handle(self, params: dict[str, str]) -> None:
        fake = self.fake
        endpoint = urlsplit(self.path).path.rsplit("/", 1)[-1].removesuffix(".fcgi")
        record, fault, over = fake._arrive(endpoint, params)
        if fake.latency:
            time.sleep(fake.latency)
        try:
            if over and fake.reject_over_limit:
                limit = str(fake.max_per_second)
                body = json.dumps({"error": "API rate limit exceeded", "count": limit, "limit": limit}).encode()
                record.status = 429
                self._send(429, body, "application/json")
            elif fault is not None and fault.kind in ("status", "slow", "html", "truncate", "disconnect"):
                self._send_fault(fault, record, endpoint, params)
            elif endpoint == "esearch":
                self._send(200, self._esearch(params, fault))
            elif endpoint == "efetch":
                self._send(200, self._efetch(params))
            else:
                record.status = 404
                self._send(404, b"unknown E-utility", "text/plain")
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): fine
            self.close_connection = True

    def _send(self, status: int, body: bytes, ctype: str = "text/xml; charset=UTF-8", headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _send_fault(self, fault: Fault, record: RecordedRequest, endpoint: str, params: dict[str, str]) -> None:
        normal = self._esearch(params, None) if endpoint == "esearch" else self._efetch(params)
        if fault.kind == "status":
            record.status = fault.status
            headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
            # Like NCBI's, the error body names the caller's key: clients must not echo it anywhere.
            body = json.dumps({"error": "API rate limit exceeded" if fault.status == 429 else "error",
                               "api-key": params.get("api_key", "127.0.0.1")})
            self._send(fault.status, body.encode(), "application/json", headers)
        elif fault.kind == "slow":
            time.sleep(fault.delay)
            self._send(200, normal)
        elif fault.kind == "html":
            self._send(200, b"<html><body><h1>502 Proxy Error</h1></body></html>", "text/html")
        elif fault.kind == "truncate":  # a complete HTTP answer whose XML is cut short
            self._send(200, normal[: len(normal) // 2])
        elif fault.kind == "disconnect":  # the connection drops mid-body
            self.send_response(200)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(normal)))
            self.end_headers()
            self.wfile.write(normal[: len(normal) // 2])
            self.wfile.flush()
            self.close_connection = True

    def _esearch(self, params: dict[str, str], fault: Fault | None) -> bytes:
        term = params.get("term", "")
        retmax = int(params.get("retmax", "20"))
        if fault is not None and fault.kind == "error":
            return esearch_xml([], 0, "", retmax, error=fault.message)
        if not term.strip():
            return esearch_xml([], 0, "", retmax, error="Empty term and query_key - nothing todo")
        ids, count, translation, missing = self.fake.search(term, retmax)
        if fault is not None and fault.kind == "empty":
            return esearch_xml([], 0, translation, retmax)
        if fault is not None and fault.kind == "phrase_not_found":
            return esearch_xml([], 0, translation, retmax, not_found=_tokens(term), warnings=["No items found."])
        warnings = ["No items found."] if not ids else []
        history = None
        if params.get("usehistory") == "y" or self.fake.history:
            history = ("1", f"MCID_{zlib.crc32(term.encode()):012d}")
        return esearch_xml(ids, count, translation, retmax, not_found=missing, warnings=warnings,
                           translations=self.fake.translations(term) if ids else [], history=history)

    def _efetch(self, params: dict[str, str]) -> bytes:
        ids = [i.strip() for i in params.get("id", "").split(",") if i.strip()]
        if self.fake.efetch_reverse:
            ids.reverse()
        return pubmed_xml([self.fake.corpus[i] for i in ids if i in self.fake.corpus])
