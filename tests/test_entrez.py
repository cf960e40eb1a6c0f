"""The entrez backend against a local fake E-utilities server; PubMed XML parsing; baseline files."""

from __future__ import annotations

import asyncio
import gzip
import io
import logging
import multiprocessing
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from biocheck.pubmed.baseline import iter_baseline
from biocheck.pubmed.entrez import EntrezClient
from biocheck.pubmed.parse import MissingDTDError, XMLParseError, iter_pubmed_records, parse_efetch
from biocheck.pubmed.ratelimit import RateLimiter, shared_limiter
from biocheck.pubmed.store import EvidenceStore
from biocheck.pubmed.transport import parse_retry_after, redact
from biocheck.pubmed.types import SearchError
from tests.fake_eutils import CORPUS, FakeArticle, FakeEutils, pubmed_xml

KEY = "sekrit-KEY-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("NCBI_API_KEY", "NCBI_EMAIL", "NCBI_TOOL", "BIOCHECK_EUTILS_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    with FakeEutils() as fake:
        yield fake


def make_client(server: FakeEutils, **kw) -> EntrezClient:
    # A key gives 10 requests/s, which keeps the fault tests fast; backoff is shortened likewise.
    kw.setdefault("api_key", KEY)
    kw.setdefault("backoff_base", 0.02)
    kw.setdefault("timeout", 2.0)
    return EntrezClient(base_url=server.url, **kw)


# ---------------------------------------------------------------------------- happy path


def test_search_returns_articles_in_esearch_order_with_all_fields(server, monkeypatch):
    monkeypatch.setenv("NCBI_EMAIL", "dev@example.org")
    server.efetch_reverse = True  # efetch order must not leak into the result
    expected_ids, count, _, _ = server.search("aspirin", 3)
    before = datetime.now(UTC).replace(microsecond=0)

    with make_client(server) as client:
        result = client.search("aspirin", n=3)

    assert [a.pmid for a in result.articles] == expected_ids == ["31000001", "31000004", "31000005"]
    assert result.backend == "entrez" and result.query == "aspirin"
    assert result.total == count == 3
    assert result.translation == '"aspirin"[All Fields]'
    searched = datetime.fromisoformat(result.searched_at)
    assert searched.utcoffset() == timedelta(0) and before <= searched <= before + timedelta(minutes=1)

    esearch, efetch = server.requests_to("esearch"), server.requests_to("efetch")
    assert len(esearch) == 1 and len(efetch) == 1  # one batched efetch for all ids
    assert esearch[0].params.items() >= {"db": "pubmed", "term": "aspirin", "retmax": "3", "sort": "relevance"}.items()
    assert efetch[0].params["id"] == "31000001,31000004,31000005"
    assert efetch[0].params["db"] == "pubmed" and efetch[0].params["retmode"] == "xml"
    assert esearch[0].params["tool"] == "biocheck" and esearch[0].params["email"] == "dev@example.org"

    structured, plain, editorial = result.articles
    assert structured.abstract.startswith("BACKGROUND: Aspirin is widely used")
    assert " METHODS: We randomly assigned" in structured.abstract
    assert " CONCLUSIONS: Low-dose aspirin" in structured.abstract
    assert structured.year == 2018 and structured.journal == "The New England journal of medicine"
    assert structured.mesh == ["Aspirin", "Cardiovascular Diseases", "Aged", "Primary Prevention"]
    assert plain.abstract.startswith("Daily aspirin") and ":" not in plain.abstract.split()[0]
    # No abstract: kept with its title; the year comes from MedlineDate.
    assert editorial.abstract == "" and editorial.title == "Editorial: the aspirin question."
    assert editorial.year == 2019
    assert all(a.source == "entrez" for a in result.articles)


def test_inline_markup_is_removed_from_titles(server):
    with make_client(server) as client:
        (article,) = client.fetch(["31000003"])
    assert article.title == "Statin therapy and LDL cholesterol: a meta-analysis."
    assert article.abstract.startswith("OBJECTIVE: To quantify")


def test_fetch_keeps_requested_order_and_drops_unknown_ids(server, caplog):
    with make_client(server) as client:
        articles = client.fetch(["31000007", "99999999", "31000002", "31000007"])
    assert [a.pmid for a in articles] == ["31000007", "31000002"]
    assert "99999999" in caplog.text


def test_configuration_comes_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    monkeypatch.setenv("NCBI_TOOL", "biocheck-test")
    with EntrezClient() as client:
        assert client.base_url == server.url and client.limiter.rate == 10
        client.fetch(["31000001"])
    params = server.requests[-1].params
    assert params["api_key"] == KEY and params["tool"] == "biocheck-test"
    assert KEY not in repr(client)


# ---------------------------------------------------------------------------- faults and retries

FAULTS = [
    pytest.param("status", "esearch", {"status": 429, "retry_after": "0"}, id="429"),
    pytest.param("status", "esearch", {"status": 500}, id="500"),
    pytest.param("status", "efetch", {"status": 502}, id="502"),
    pytest.param("status", "efetch", {"status": 503}, id="503"),
    pytest.param("slow", "efetch", {"delay": 1.0}, id="timeout"),
    pytest.param("truncate", "esearch", {}, id="truncated-esearch"),
    pytest.param("truncate", "efetch", {}, id="truncated-efetch"),
    pytest.param("disconnect", "efetch", {}, id="connection-drop"),
    pytest.param("html", "esearch", {}, id="html-error-page"),
    pytest.param("error", "esearch", {"message": "Search Backend failed: temporarily unavailable"}, id="backend-error"),
]


@pytest.mark.parametrize(("kind", "endpoint", "options"), FAULTS)
def test_transient_faults_are_retried_to_the_correct_result(server, kind, endpoint, options):
    with make_client(server, timeout=0.4) as client:
        expected = client.search("vitamin d", n=5)
        seen = len(server.requests)
        server.inject(kind, endpoint=endpoint, **options)
        result = client.search("vitamin d", n=5)

    assert result.articles == expected.articles and len(result.articles) == 2
    assert (result.total, result.translation) == (expected.total, expected.translation)
    new = server.requests[seen:]
    assert [r.endpoint for r in new].count(endpoint) == 2  # the failed attempt and its retry
    assert len(new) == 3
    assert new[[r.endpoint for r in new].index(endpoint)].fault == kind


def test_retry_after_is_honoured(server):
    server.inject("status", endpoint="esearch", status=429, retry_after="1")
    with make_client(server, backoff_base=0.01) as client:
        result = client.search("coffee", n=1)
    assert [a.pmid for a in result.articles] == ["31000007"]
    refused, retried = server.requests_to("esearch")
    assert refused.status == 429
    assert retried.time - refused.time >= 0.99  # backoff alone would be ~0.01 s


def test_retry_after_parsing():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    when = (datetime.now(UTC) + timedelta(seconds=30)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert 25 <= parse_retry_after(when) <= 31


def test_attempts_are_bounded_then_a_clear_search_error(server):
    server.inject("status", endpoint="esearch", status=503, times=100)
    with make_client(server, max_attempts=3) as client, pytest.raises(SearchError) as err:
        client.search("aspirin")
    assert len(server.requests_to("esearch")) == 3 and not server.requests_to("efetch")
    message = str(err.value)
    assert "esearch" in message and "3 attempts" in message and "HTTP 503" in message
    assert "NCBI_API_KEY" in message  # says how to fix it


def test_timeouts_are_bounded_too(server):
    server.inject("slow", endpoint="efetch", delay=1.0, times=100)
    with make_client(server, max_attempts=2, timeout=0.2) as client, pytest.raises(SearchError, match="no response within 0.2 s"):
        client.search("coffee")
    assert len(server.requests_to("efetch")) == 2


def test_a_retry_after_beyond_the_cap_fails_at_once(server):
    server.inject("status", endpoint="esearch", status=429, retry_after="3600")
    with make_client(server) as client, pytest.raises(SearchError, match="Retry-After"):
        client.search("coffee")
    assert len(server.requests_to("esearch")) == 1


@pytest.mark.parametrize(
    ("fault", "options", "match"),
    [
        ("status", {"status": 400}, "HTTP 400"),
        ("error", {"message": "Invalid query syntax near ')'"}, "Invalid query syntax"),
    ],
)
def test_client_errors_are_not_retried(server, fault, options, match):
    server.inject(fault, endpoint="esearch", **options)
    with make_client(server) as client, pytest.raises(SearchError, match=match):
        client.search("aspirin")
    assert len(server.requests) == 1


def test_empty_query_is_refused_without_a_request(server):
    with make_client(server) as client, pytest.raises(SearchError, match="empty"):
        client.search("   ")
    assert server.requests == []


# ---------------------------------------------------------------------------- empty answers


def test_empty_idlist_is_an_empty_result_without_efetch(server):
    server.inject("empty", endpoint="esearch")
    with make_client(server) as client:
        result = client.search("aspirin")
    assert result.articles == [] and result.total == 0
    assert result.translation == '"aspirin"[All Fields]'
    assert not server.requests_to("efetch")


def test_phrase_not_found_is_an_empty_result_not_an_error(server, caplog):
    caplog.set_level(logging.INFO, logger="biocheck")
    with make_client(server) as client:
        result = client.search("zzyzx")
    assert result.articles == [] and result.total == 0
    assert result.translation == '"zzyzx"[All Fields]' and result.searched_at
    assert "phrase not found: zzyzx" in caplog.text
    assert not server.requests_to("efetch")


def test_partly_unknown_phrases_still_return_hits(server):
    with make_client(server) as client:
        result = client.search("coffee zzyzx")
    assert [a.pmid for a in result.articles] == ["31000007"]


# ---------------------------------------------------------------------------- rate limiting


def _hammer(server: FakeEutils, client: EntrezClient, callers: int, calls_each: int) -> list[str]:
    pmids = list(server.corpus)

    def caller(i: int) -> list[str]:
        return [client.fetch([pmids[(i + j) % len(pmids)]])[0].pmid for j in range(calls_each)]

    with ThreadPoolExecutor(callers) as pool:
        return [p for got in pool.map(caller, range(callers)) for p in got]


@pytest.mark.parametrize(("api_key", "rate", "calls_each"), [(None, 3, 1), (KEY, 10, 3)], ids=["3/s", "10/s-key"])
def test_eight_threads_never_exceed_the_rate(api_key, rate, calls_each):
    with FakeEutils(max_per_second=rate, reject_over_limit=True) as server:
        with make_client(server, api_key=api_key) as client:
            assert client.limiter.rate == rate
            t0 = time.monotonic()
            got = _hammer(server, client, callers=8, calls_each=calls_each)
            elapsed = time.monotonic() - t0
        total = 8 * calls_each
        assert len(got) == total and len(server.requests) == total  # nothing was refused or retried
        assert server.violations == 0 and server.max_in_window(1.0) <= rate
        assert elapsed >= (total - 1) / rate  # the callers really were held back


def test_asyncio_callers_share_the_limit():
    with FakeEutils(max_per_second=10, reject_over_limit=True) as server:
        with make_client(server) as client:

            async def main() -> list:
                return await asyncio.gather(*(client.asearch("aspirin", n=2) for _ in range(8)))

            results = asyncio.run(main())
        assert all([a.pmid for a in r.articles] == ["31000001", "31000004"] for r in results)
        assert len(server.requests) == 16
        assert server.violations == 0 and server.max_in_window(1.0) <= 10


def _process_caller(url: str, state_dir: str, start, done) -> None:
    """Child process: 4 threads x 3 fetches through the machine-wide limiter."""
    import os

    os.environ["BIOCHECK_RATELIMIT_DIR"] = state_dir
    with EntrezClient(base_url=url, api_key=KEY) as client:
        start.wait()
        pmids = ["31000001", "31000002", "31000003"]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda i: [client.fetch([p])[0].pmid for p in pmids], range(4)))
    done.put(sum(len(g) for g in got))


def test_processes_share_the_limit_through_the_state_dir(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with FakeEutils(max_per_second=10, reject_over_limit=True) as server:
        start, done = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_process_caller, args=(server.url, str(tmp_path), start, done)) for _ in range(2)]
        for p in procs:
            p.start()
        fetched = [done.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert fetched == [12, 12] and len(server.requests) == 24  # nothing refused, nothing retried
        assert server.violations == 0 and server.max_in_window(1.0) <= 10
    assert len(list(tmp_path.glob("eutils-*.next"))) == 1 and KEY not in str(list(tmp_path.iterdir()))


def test_one_limiter_per_host_and_key():
    assert shared_limiter("h:1", KEY) is shared_limiter("h:1", KEY)
    assert shared_limiter("h:1", KEY) is not shared_limiter("h:1", None)
    assert shared_limiter("h:1", None).rate == 3 and shared_limiter("h:1", KEY).rate == 10
    assert shared_limiter("h:1", None) is not shared_limiter("h:2", None)


def test_limiter_spaces_requests_evenly_from_when_they_actually_go():
    clock = [100.0]
    limiter = RateLimiter(10, slack=0.0, clock=lambda: clock[0])
    assert limiter.try_acquire() == 0.0
    assert limiter.try_acquire() == pytest.approx(0.1)  # too soon: wait, nothing granted
    clock[0] += 0.25  # the waiting caller woke late...
    assert limiter.try_acquire() == 0.0
    assert limiter.try_acquire() == pytest.approx(0.1)  # ...so the next one is spaced from then
    clock[0] += 10  # after an idle spell there is still no burst
    assert limiter.try_acquire() == 0.0 and limiter.try_acquire() == pytest.approx(0.1)
    limiter.defer(5)
    assert limiter.try_acquire() == pytest.approx(5.0)


# ---------------------------------------------------------------------------- secrets


def test_api_key_never_reaches_logs_errors_or_the_store(server, caplog, tmp_path):
    caplog.set_level(logging.DEBUG)  # every logger, httpx and httpcore included
    server.inject("status", endpoint="esearch", status=503)
    with make_client(server, max_attempts=2) as client:
        result = client.search("aspirin", n=2)  # succeeds after a logged retry
        server.inject("status", endpoint="esearch", status=429, retry_after="0", times=5)
        with pytest.raises(SearchError) as exhausted:
            client.search("coffee")
        server.clear_faults()
        server.inject("status", endpoint="esearch", status=400)  # body echoes the key, as NCBI's does
        with pytest.raises(SearchError) as refused:
            client.search("coffee")
        with EvidenceStore(tmp_path) as store:
            store.put(result)

    assert all(r.params.get("api_key") == KEY for r in server.requests)  # the key was in use
    assert "retrying" in caplog.text and "HTTP Request" in caplog.text
    assert KEY not in caplog.text
    for err in (exhausted.value, refused.value):
        assert KEY not in str(err) and KEY not in repr(err.args)
    assert "***" in str(refused.value)
    for path in tmp_path.iterdir():
        assert KEY.encode() not in path.read_bytes()


def test_redact_handles_urls_and_json():
    text = f'POST https://x/esearch.fcgi?api_key={KEY}&term=a {{"api-key":"{KEY}"}}'
    assert KEY not in redact(text, KEY) and KEY not in redact(text, None)


# ---------------------------------------------------------------------------- parsing and baseline files


def test_efetch_and_baseline_share_the_extraction(tmp_path):
    xml = pubmed_xml(CORPUS, deleted=["123"])
    plain = tmp_path / "pubmed25n0001.xml"
    plain.write_bytes(xml)
    zipped = tmp_path / "pubmed25n0002.xml.gz"
    zipped.write_bytes(gzip.compress(xml))

    from_efetch = parse_efetch(xml)
    from_plain = list(iter_baseline(plain))
    from_gzip = list(iter_baseline(zipped))

    assert [a.pmid for a in from_gzip] == [a.pmid for a in CORPUS]
    assert {a.source for a in from_plain} == {"baseline:pubmed25n0001.xml"}
    assert {a.source for a in from_gzip} == {"baseline:pubmed25n0002.xml.gz"}
    strip = [a.model_dump(exclude={"source"}) for a in from_efetch]
    assert [a.model_dump(exclude={"source"}) for a in from_plain] == strip
    assert [a.model_dump(exclude={"source"}) for a in from_gzip] == strip
    assert from_gzip[0].abstract.startswith("BACKGROUND: ") and from_gzip[4].abstract == ""


def test_baseline_is_streamed_not_loaded_whole():
    many = [FakeArticle(str(40000000 + i), f"Paper {i}", "Text " * 50) for i in range(500)]
    data = pubmed_xml(many)
    stream = io.BytesIO(data)
    records = iter_pubmed_records(stream, block_size=4096)
    first = next(records)
    assert str(first["MedlineCitation"]["PMID"]) == "40000000"
    assert stream.tell() < len(data) / 10  # the first record came long before the end of the file
    assert sum(1 for _ in records) == 499


def test_truncated_baseline_file_is_reported(tmp_path):
    path = tmp_path / "pubmed25n0003.xml.gz"
    data = pubmed_xml(CORPUS)
    path.write_bytes(gzip.compress(data[: len(data) - 200]))
    with pytest.raises(XMLParseError, match="pubmed25n0003"):
        list(iter_baseline(path))


def test_newer_pubmed_dtd_falls_back_to_the_bundled_one_and_no_dtd_is_downloaded():
    xml = pubmed_xml(CORPUS[:2])
    newer = xml.replace(b"pubmed_250101.dtd", b"pubmed_990101.dtd")
    assert [a.pmid for a in parse_efetch(newer)] == ["31000001", "31000002"]
    unknown = xml.replace(b"pubmed_250101.dtd", b"somethingelse_990101.dtd")
    with pytest.raises(MissingDTDError, match="downloads are disabled"):
        parse_efetch(unknown)


def test_threads_share_one_client_safely(server):
    # httpx.Client and the limiter are shared; every thread must get its own correct answer.
    queries = {"coffee": ["31000007"], "metformin": ["31000008"], "influenza": ["31000006"]}
    errors: list[BaseException] = []

    def run(q: str) -> None:
        try:
            assert [a.pmid for a in client.search(q).articles] == queries[q]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with make_client(server) as client:
        threads = [threading.Thread(target=run, args=(q,)) for q in list(queries) * 2]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
