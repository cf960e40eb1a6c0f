"""A local fake of NCBI E-utilities (esearch.fcgi, efetch.fcgi) for tests and benchmarks.

It serves genuine-shaped XML (eSearchResult, PubmedArticleSet with the real DOCTYPE lines) from a
small in-memory corpus, records every request (monotonic time, endpoint, parameters), injects
faults on demand, and can enforce NCBI's rate limit (counting requests beyond N in any 1-second
sliding window as violations, and optionally answering them with 429 as NCBI does).

    with FakeEutils(max_per_second=3) as server:
        server.inject("status", status=503, times=2)
        client = EntrezClient(base_url=server.url)
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field
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


@dataclass
class FakeArticle:
    pmid: str
    title: str
    # str: one plain AbstractText; list of (label, text): a structured abstract; None: no Abstract
    abstract: str | list[tuple[str, str]] | None
    year: int | None = 2020
    journal: str = "Journal of Evidence Tests"
    mesh: list[str] = field(default_factory=list)
    medline_date: str | None = None  # e.g. "1998 Dec-1999 Jan", used instead of Year

    def text(self) -> str:
        parts = [self.title, " ".join(self.mesh)]
        if isinstance(self.abstract, str):
            parts.append(self.abstract)
        elif self.abstract:
            parts.extend(t for _, t in self.abstract)
        return " ".join(parts).lower()


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
) -> bytes:
    if error is not None:
        return (ESEARCH_HEAD + f"<eSearchResult><ERROR>{escape(error)}</ERROR></eSearchResult>\n").encode()
    id_list = "<IdList>\n" + "".join(f"<Id>{i}</Id>\n" for i in ids) + "</IdList>" if ids else "<IdList/>"
    xml = (
        f"<eSearchResult><Count>{count}</Count><RetMax>{len(ids) if ids else 0}</RetMax><RetStart>0</RetStart>"
        f"{id_list}<TranslationSet/><QueryTranslation>{escape(translation)}</QueryTranslation>"
    )
    if not_found:
        xml += "<ErrorList>" + "".join(f"<PhraseNotFound>{escape(p)}</PhraseNotFound>" for p in not_found)
        xml += "</ErrorList>"
    if warnings:
        xml += "<WarningList>" + "".join(f"<OutputMessage>{escape(w)}</OutputMessage>" for w in warnings)
        xml += "</WarningList>"
    return (ESEARCH_HEAD + xml + "</eSearchResult>\n").encode()


def _article_xml(a: FakeArticle) -> str:
    date = f"<MedlineDate>{escape(a.medline_date)}</MedlineDate>" if a.medline_date else ""
    if a.year is not None and not a.medline_date:
        date = f"<Year>{a.year}</Year><Month>Jan</Month>"
    if a.abstract is None:
        abstract = ""
    elif isinstance(a.abstract, str):
        abstract = f"<Abstract><AbstractText>{escape(a.abstract)}</AbstractText></Abstract>"
    else:
        parts = "".join(
            f"<AbstractText Label={quoteattr(label)} NlmCategory={quoteattr(label)}>{escape(text)}</AbstractText>"
            for label, text in a.abstract
        )
        abstract = f"<Abstract>{parts}</Abstract>"
    mesh = ""
    if a.mesh:
        heads = "".join(
            f'<MeshHeading><DescriptorName UI="D{i:06d}" MajorTopicYN="N">{escape(m)}</DescriptorName></MeshHeading>'
            for i, m in enumerate(a.mesh)
        )
        mesh = f"<MeshHeadingList>{heads}</MeshHeadingList>"
    # The title may hold inline markup (<i>...</i>) as NCBI's does, so it is not escaped.
    return (
        '<PubmedArticle><MedlineCitation Status="MEDLINE" Owner="NLM">'
        f'<PMID Version="1">{a.pmid}</PMID>'
        '<Article PubModel="Print"><Journal><ISSN IssnType="Print">0000-0000</ISSN>'
        f'<JournalIssue CitedMedium="Print"><Volume>1</Volume><PubDate>{date}</PubDate></JournalIssue>'
        f"<Title>{escape(a.journal)}</Title></Journal>"
        f"<ArticleTitle>{a.title}</ArticleTitle>{abstract}<Language>eng</Language>"
        '<PublicationTypeList><PublicationType UI="D016428">Journal Article</PublicationType></PublicationTypeList>'
        "</Article>"
        "<MedlineJournalInfo><Country>England</Country><MedlineTA>Test J</MedlineTA>"
        "<NlmUniqueID>0000000</NlmUniqueID></MedlineJournalInfo>"
        f"{mesh}</MedlineCitation>"
        "<PubmedData><PublicationStatus>ppublish</PublicationStatus><ArticleIdList>"
        f'<ArticleId IdType="pubmed">{a.pmid}</ArticleId></ArticleIdList></PubmedData></PubmedArticle>\n'
    )


def pubmed_xml(articles: list[FakeArticle], deleted: list[str] = ()) -> bytes:
    """A PubmedArticleSet document (efetch reply or baseline/update file)."""
    body = "".join(_article_xml(a) for a in articles)
    if deleted:
        body += "<DeleteCitation>" + "".join(f'<PMID Version="1">{p}</PMID>' for p in deleted) + "</DeleteCitation>"
    return (PUBMED_HEAD + "<PubmedArticleSet>\n" + body + "</PubmedArticleSet>\n").encode()


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
        times = sorted(r.time for r in self.requests)
        best, lo = 0, 0
        for hi, t in enumerate(times):
            while t - times[lo] > window:
                lo += 1
            best = max(best, hi - lo + 1)
        return best

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

    def search(self, term: str, retmax: int) -> tuple[list[str], int, str, list[str]]:
        """A tiny AND search over title/abstract/MeSH; returns ids, count, translation, not-found terms."""
        tokens = list(dict.fromkeys(_tokens(term)))
        texts = {pmid: a.text() for pmid, a in self.corpus.items()}
        present = [t for t in tokens if any(re.search(rf"\b{t}\b", x) for x in texts.values())]
        missing = [t for t in tokens if t not in present]
        translation = " AND ".join(f'"{t}"[All Fields]' for t in (present or tokens))
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
        return esearch_xml(ids, count, translation, retmax, not_found=missing, warnings=warnings)

    def _efetch(self, params: dict[str, str]) -> bytes:
        ids = [i.strip() for i in params.get("id", "").split(",") if i.strip()]
        if self.fake.efetch_reverse:
            ids.reverse()
        return pubmed_xml([self.fake.corpus[i] for i in ids if i in self.fake.corpus])
