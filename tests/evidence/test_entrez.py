"""The entrez backend against a local fake E-utilities server; PubMed XML parsing; baseline files.

No test here measures wall-clock time. The rate limiter and the retry backoff take their clocks
and sleeps as arguments: the tests drive them with a virtual clock (time moves only when someone
sleeps) and check the schedule they produce, from the limiter's own grant stamps. Real throughput
under real time is a benchmark (bench/entrez_throughput.py, bench/ratelimit_wallclock.py).
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import io
import logging
import multiprocessing
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from itertools import pairwise

import pytest

from biocheck.evidence import ratelimit
from biocheck.evidence.article_xml import MissingDTDError, XMLParseError, iter_pubmed_records, parse_efetch
from biocheck.evidence.baseline import iter_baseline
from biocheck.evidence.entrez import EntrezClient
from biocheck.evidence.ratelimit import RateLimiter, requests_per_second, shared_limiter
from biocheck.evidence.store import EvidenceStore
from biocheck.evidence.transport import EutilsTransport, RetryPolicy, parse_retry_after, redact
from biocheck.evidence.types import SearchError
from tests.helpers.fake_eutils import CORPUS, FakeArticle, FakeEutils, max_in_window, pubmed_xml

KEY = "sekrit-KEY-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path_factory):
    for name in ("NCBI_API_KEY", "NCBI_EMAIL", "NCBI_TOOL", "BIOCHECK_EUTILS_URL", "BIOCHECK_RATELIMIT_DIR"):
        monkeypatch.delenv(name, raising=False)
    # The limiter shares its state through the user's cache dir by default: never the real ~/.cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


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


_yield = functools.partial(time.sleep, 0)  # bound now: a test replaces time.sleep to catch real sleeps


class VirtualClock:
    """Seconds that pass only when someone sleeps (thread-safe): `sleep(d)` moves the clock d ahead."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.reads += 1
            # a limiter that sleeps some other way would spin on a clock that never moves
            assert self.reads < 100_000, "virtual time never moves: is the injected sleep used?"
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(seconds, 0.0)
        _yield()  # let other threads run, as a real sleep would

    async def async_sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += max(seconds, 0.0)
        await asyncio.sleep(0)

    def recording_sleep(self, log: list[float]):
        """A sleep that also writes down each wait (the transport's backoff)."""

        def sleep(seconds: float) -> None:
            log.append(seconds)
            self.sleep(seconds)

        return sleep


class FixedJitter(random.Random):
    """A jitter source that always picks the same point `frac` of the range it is asked for."""

    def __init__(self, frac: float) -> None:
        super().__init__(0)
        self.frac = frac
        self.asked: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.asked.append((a, b))
        return a + self.frac * (b - a)


def virtual_limiter(rate: float, clock: VirtualClock, grants: list[float]) -> RateLimiter:
    return RateLimiter(rate, clock=clock, sleep=clock.sleep, async_sleep=clock.async_sleep, on_grant=grants.append)


def assert_schedule(grants: list[float], interval: float, rate: float) -> None:
    """Every two grants at least `interval` apart, and no 1-second window holding more than `rate`."""
    times = sorted(grants)
    assert all(b - a >= interval - 1e-9 for a, b in pairwise(times)), [round(b - a, 4) for a, b in pairwise(times)]
    assert max_in_window(times, 1.0) <= rate


# ---------------------------------------------------------------------------- happy path


def test_search_returns_articles_in_esearch_order_with_all_fields(server, monkeypatch):
    monkeypatch.setenv("NCBI_EMAIL", "dev@example.org")
    server.efetch_reverse = True  # efetch order must not leak into the result
    expected_ids, count, translation, _ = server.search("aspirin", 3)
    when = datetime(2025, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)

    with make_client(server, now=lambda: when) as client:
        result = client.search("aspirin", n=3)

    assert [a.pmid for a in result.articles] == expected_ids == ["31000001", "31000004", "31000005"]
    assert result.backend == "entrez" and result.query == "aspirin"
    assert result.total == count == 3
    assert result.translation == translation and "[MeSH Terms]" in translation  # NCBI's mapping, kept
    assert result.searched_at == "2025-03-01T12:30:05+00:00"  # the client's clock, to the second, UTC

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


def test_searched_at_defaults_to_the_current_utc_time():
    with FakeEutils() as server, make_client(server) as client:
        searched = datetime.fromisoformat(client.search("coffee", n=1).searched_at)
    assert searched.utcoffset() == timedelta(0) and searched.microsecond == 0


def test_inline_markup_is_removed_from_titles(server):
    with make_client(server) as client:
        (article,) = client.fetch(["31000003"])
    assert article.title == "Statin therapy and LDL cholesterol: a meta-analysis."
    assert article.abstract.startswith("OBJECTIVE: To quantify")


def test_markup_and_mathml_in_abstracts_arrive_as_inline_text(server):
    with make_client(server) as client:
        vo2, copd = client.fetch(["31000009", "31000010"])
    assert vo2.title == "Maximal oxygen uptake and the lactate threshold in trained runners."
    assert vo2.abstract.startswith("Maximal oxygen uptake ( V\u0307O2max ) was measured in 14 trained runners.")
    assert "threshold LEmin predicted" in vo2.abstract and "(r = 0.91; P < 0.001)" in vo2.abstract
    assert "CO2 output exceeded 4 L·min-1 at V\u0307O2max." in vo2.abstract
    assert copd.title == "Carbon dioxide retention in chronic obstructive pulmonary disease: the role of oxygen therapy."
    assert copd.abstract == (
        "BACKGROUND: Oxygen therapy can raise the arterial partial pressure of CO2 (PaCO2) in hypercapnic patients. "
        "RESULTS: PaCO2 rose by 1.2 kPa at an FIO2 of 0.5; all changes reversed within 30 min (r2 = 0.64, ptrend < 0.01). "
        "CONCLUSIONS: Titrated oxygen to a saturation of 88-92% avoids hypercapnia in most patients."
    )  # CopyrightInformation and AuthorList are not abstract text


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
    pytest.param("status", "esearch", {"status": 504}, id="504"),
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
    clock, grants, backoffs = VirtualClock(), [], []
    limiter = virtual_limiter(10, clock, grants)
    server.inject("status", endpoint="esearch", status=429, retry_after="1")
    with make_client(server, backoff_base=0.01, limiter=limiter, sleep=clock.recording_sleep(backoffs)) as client:
        result = client.search("coffee", n=1)
    assert [a.pmid for a in result.articles] == ["31000007"]
    refused, retried = server.requests_to("esearch")
    assert (refused.status, retried.status) == (429, 200)
    assert backoffs == [1.0]  # backoff alone would be <= 0.01 s
    assert grants[1] - grants[0] >= 1.0 - 1e-9  # the retry's slot came a full Retry-After later


def test_retry_after_as_an_http_date_counts_from_the_clients_clock(server):
    when = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    clock, backoffs = VirtualClock(), []
    server.inject("status", endpoint="esearch", status=503,
                  retry_after=format_datetime(when + timedelta(seconds=3), usegmt=True))
    with make_client(server, backoff_base=0.01, now=lambda: when, limiter=virtual_limiter(10, clock, []),
                     sleep=clock.recording_sleep(backoffs)) as client:
        client.search("coffee", n=1)
    assert backoffs == [3.0]


def test_retry_after_parsing():
    now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("2") == 2.0 and parse_retry_after(" 1.5 ") == 1.5 and parse_retry_after("-4") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None and parse_retry_after("") is None
    in_30s = format_datetime(now + timedelta(seconds=30), usegmt=True)  # "Sat, 01 Mar 2025 12:00:30 GMT"
    assert parse_retry_after(in_30s, now=now) == 30.0
    assert parse_retry_after(in_30s, now=now + timedelta(seconds=40)) == 0.0  # already past: no wait
    assert parse_retry_after("Sat, 01 Mar 2025 12:00:30 -0000", now=now) == 30.0  # no zone: read as UTC


# ---------------------------------------------------------------------------- backoff schedule


def test_retry_policy_delay_is_exponential_capped_jittered_and_at_least_retry_after():
    policy = RetryPolicy(backoff_base=0.5, backoff_max=3.0)
    top, bottom = FixedJitter(1.0), FixedJitter(0.0)
    for k in range(1, 7):
        full = min(policy.backoff_max, policy.backoff_base * 2 ** (k - 1))
        assert policy.delay(k, None, top) == full
        assert policy.delay(k, None, bottom) == full * 0.5
        assert policy.delay(k, 10.0, top) == 10.0  # Retry-After wins when longer
        assert policy.delay(k, 0.1, top) == full  # ... and never shortens the backoff
    assert set(top.asked) == {(0.5, 1.0)}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_backoff_waits_double_per_attempt_with_jitter_up_to_the_cap(server, seed):
    base, cap, attempts = 0.5, 3.0, 6
    clock, backoffs = VirtualClock(), []
    server.inject("status", endpoint="esearch", status=503, times=100)
    with make_client(server, max_attempts=attempts, backoff_base=base, backoff_max=cap, rng=random.Random(seed),
                     limiter=virtual_limiter(10, clock, []), sleep=clock.recording_sleep(backoffs)) as client:
        with pytest.raises(SearchError, match=f"{attempts} attempts"):
            client.search("coffee")
    assert len(backoffs) == attempts - 1 and len(server.requests) == attempts
    for k, wait in enumerate(backoffs, start=1):
        full = min(cap, base * 2 ** (k - 1))
        assert full * 0.5 <= wait <= full, (k, wait)


def test_backoff_waits_follow_the_formula_exactly_with_fixed_jitter(server):
    base, cap, attempts = 0.5, 3.0, 6
    clock, backoffs, jitter = VirtualClock(), [], FixedJitter(1.0)
    server.inject("status", endpoint="esearch", status=500, times=100)
    with make_client(server, max_attempts=attempts, backoff_base=base, backoff_max=cap, rng=jitter,
                     limiter=virtual_limiter(10, clock, []), sleep=clock.recording_sleep(backoffs)) as client:
        with pytest.raises(SearchError):
            client.search("coffee")
    assert backoffs == [min(cap, base * 2 ** (k - 1)) for k in range(1, attempts)]
    assert len(jitter.asked) == attempts - 1


@pytest.mark.parametrize(("status", "defers"), [(429, True), (503, False)])
def test_a_429_holds_back_every_caller_of_the_shared_limiter_a_503_does_not(server, status, defers):
    clock, grants = VirtualClock(), []
    limiter = virtual_limiter(10, clock, grants)
    others: list[float] = []

    def backoff(seconds: float) -> None:
        others.append(limiter.try_acquire())  # another caller asks for a slot while this one backs off
        clock.sleep(seconds)

    server.inject("status", endpoint="esearch", status=status)
    jitter = FixedJitter(1.0)
    with make_client(server, backoff_base=1.0, rng=jitter, limiter=limiter, sleep=backoff) as client:
        assert [a.pmid for a in client.search("coffee", n=1).articles] == ["31000007"]
    delay = RetryPolicy(backoff_base=1.0).delay(1, None, FixedJitter(1.0))
    assert delay > limiter.interval  # so the two cases below are told apart
    if defers:
        assert others == [pytest.approx(delay)]  # held back for the whole backoff
    else:
        assert others == [pytest.approx(limiter.interval)]  # only the usual spacing
    assert len(grants) == 3  # refused esearch, its retry, efetch: the other caller got nothing


def test_attempts_are_bounded_then_a_clear_search_error(server):
    server.inject("status", endpoint="esearch", status=503, times=100)
    with make_client(server, max_attempts=3) as client, pytest.raises(SearchError) as err:
        client.search("aspirin")
    assert len(server.requests_to("esearch")) == 3 and not server.requests_to("efetch")
    message = str(err.value)
    assert message.startswith("PubMed esearch failed after 3 attempts") and "HTTP 503" in message
    assert message.endswith(": retry later, set NCBI_API_KEY for a higher rate limit, or use the replay backend offline")


def test_timeouts_are_bounded_too(server):
    server.inject("slow", endpoint="efetch", delay=1.0, times=100)
    with make_client(server, max_attempts=2, timeout=0.2) as client, pytest.raises(SearchError, match="no response within 0.2 s"):
        client.search("coffee")
    assert len(server.requests_to("efetch")) == 2


def test_a_retry_after_beyond_the_cap_fails_at_once(server):
    clock, backoffs = VirtualClock(), []
    server.inject("status", endpoint="esearch", status=429, retry_after="3600")
    with make_client(server, limiter=virtual_limiter(10, clock, []), sleep=clock.recording_sleep(backoffs)) as client:
        with pytest.raises(SearchError, match="Retry-After") as err:
            client.search("coffee")
    assert len(server.requests_to("esearch")) == 1 and backoffs == []
    message = str(err.value)
    cap = RetryPolicy().max_retry_after  # the client's default
    assert message.startswith(f"PubMed esearch asked us to wait 3600 s (Retry-After), more than the {cap:.0f} s allowed")
    assert message.endswith("; NCBI is throttling this client, try again later or set NCBI_API_KEY")  # how to fix it


@pytest.mark.parametrize(("retry_after", "waits"), [("5", True), ("5.5", False)])
def test_a_retry_after_up_to_the_cap_is_waited_for(server, retry_after, waits):
    clock, backoffs = VirtualClock(), []
    server.inject("status", endpoint="esearch", status=429, retry_after=retry_after)
    with make_client(server, max_retry_after=5.0, limiter=virtual_limiter(10, clock, []),
                     sleep=clock.recording_sleep(backoffs)) as client:
        if waits:
            assert [a.pmid for a in client.search("coffee", n=1).articles] == ["31000007"]
        else:
            with pytest.raises(SearchError, match="more than the 5 s allowed"):
                client.search("coffee", n=1)
    assert backoffs == ([float(retry_after)] if waits else [])
    assert len(server.requests_to("esearch")) == (2 if waits else 1)


@pytest.mark.parametrize(
    ("fault", "options", "match"),
    [
        ("status", {"status": 400}, "PubMed esearch refused the request with HTTP 400"),
        ("status", {"status": 403}, "PubMed esearch refused the request with HTTP 403"),
        ("status", {"status": 404}, "PubMed esearch refused the request with HTTP 404"),
        ("status", {"status": 501}, "PubMed esearch refused the request with HTTP 501"),
        ("error", {"message": "Invalid query syntax near ')'"}, "PubMed esearch rejected the request: Invalid query syntax"),
    ],
)
def test_client_errors_are_not_retried(server, fault, options, match):
    server.inject(fault, endpoint="esearch", **options)
    with make_client(server) as client, pytest.raises(SearchError, match=match) as err:
        client.search("aspirin")
    assert len(server.requests) == 1
    if fault == "status":  # what to check
        assert str(err.value).endswith("; check the query and the NCBI_API_KEY / BIOCHECK_EUTILS_URL settings")


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
    assert result.translation == server.search("aspirin", 5)[2]
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


@pytest.mark.parametrize(("api_key", "rate", "calls_each"), [(None, 3, 2), (KEY, 10, 3)], ids=["3/s", "10/s-key"])
def test_eight_threads_get_an_evenly_spaced_schedule(server, api_key, rate, calls_each):
    clock, grants = VirtualClock(), []
    limiter = virtual_limiter(requests_per_second(api_key), clock, grants)
    assert limiter.rate == rate
    with make_client(server, api_key=api_key, limiter=limiter) as client:
        got = _hammer(server, client, callers=8, calls_each=calls_each)
    total = 8 * calls_each
    pmids = list(server.corpus)
    assert sorted(got) == sorted(pmids[(i + j) % len(pmids)] for i in range(8) for j in range(calls_each))
    assert len(server.requests) == total == len(grants)  # one slot per request, nothing retried
    assert_schedule(grants, limiter.interval, rate)
    assert grants[-1] - grants[0] >= (total - 1) * limiter.interval - 1e-6  # the callers really were held back


def test_asyncio_callers_share_the_limit(server):
    clock, grants = VirtualClock(), []
    limiter = virtual_limiter(10, clock, grants)
    with make_client(server, limiter=limiter) as client:

        async def main() -> list:
            return await asyncio.gather(*(client.asearch("aspirin", n=2) for _ in range(8)))

        results = asyncio.run(main())
    assert all([a.pmid for a in r.articles] == ["31000001", "31000004"] for r in results)
    assert len(server.requests) == 16 == len(grants)
    assert_schedule(grants, limiter.interval, 10)


def test_acquire_async_waits_on_the_loop_and_spaces_the_tasks():
    clock, grants = VirtualClock(), []
    limiter = virtual_limiter(3, clock, grants)

    async def main() -> list[float]:
        return await asyncio.gather(*(limiter.acquire_async() for _ in range(7)))

    waited = asyncio.run(main())
    assert len(grants) == 7 and waited.count(0.0) < 7  # some tasks had to wait (time moves only when they do)
    assert_schedule(grants, limiter.interval, 3)


def _process_caller(url: str, state_dir: str, start, done) -> None:
    """Child process: 4 threads x 3 fetches through the machine-wide limiter; sends back its grant stamps."""
    import os

    os.environ["BIOCHECK_RATELIMIT_DIR"] = state_dir
    stamps: list[float] = []
    with EntrezClient(base_url=url, api_key=KEY) as client:
        client.limiter.on_grant = stamps.append  # called under the state file's flock
        start.wait()
        pmids = ["31000001", "31000002", "31000003"]
        with ThreadPoolExecutor(4) as pool:
            got = list(pool.map(lambda i: [client.fetch([p])[0].pmid for p in pmids], range(4)))
    done.put((sum(len(g) for g in got), stamps))


def test_processes_share_the_limit_through_the_state_dir(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    with FakeEutils() as server:
        start, done = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_process_caller, args=(server.url, str(tmp_path), start, done)) for _ in range(2)]
        for p in procs:
            p.start()
        replies = [done.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(30)
        assert [n for n, _ in replies] == [12, 12] and len(server.requests) == 24  # nothing retried
    stamps = [t for _, own in replies for t in own]
    assert [len(own) for _, own in replies] == [12, 12]  # each process took its own slots ...
    assert_schedule(stamps, RateLimiter(10).interval, 10)  # ... from one machine-wide schedule
    assert len(list(tmp_path.glob("eutils-*.next"))) == 1 and KEY not in str(list(tmp_path.iterdir()))


def _cli_like_caller(query_set: list[str], store: str, ready, start, done) -> None:
    """Child process: the `biocheck search --backend entrez` path (config -> tool -> queries), with no
    BIOCHECK_RATELIMIT_DIR; sends back its grant stamps (taken under the limiter's lock)."""
    from biocheck.evidence.search import SearchConfig, search_tool

    tool = search_tool(SearchConfig(backend="entrez", store=store, max_results=2))
    stamps: list[float] = []
    tool.backend.backend.limiter.on_grant = stamps.append
    ready.put(str(tool.backend.backend.limiter.state_file))
    start.wait()
    errors = [out.error for out in map(tool.run, query_set) if out.error]
    done.put((errors, stamps))


def test_parallel_processes_share_the_limit_by_default(tmp_path, monkeypatch):
    """Four `biocheck search --backend entrez` processes at once stay within NCBI's limit together,
    with nothing configured: the limiter's state lives in the user's cache dir."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    ctx = multiprocessing.get_context("spawn")
    queries = [["aspirin", "vitamin", "coffee"], ["metformin", "statin", "oxygen"],
               ["aspirin cancer", "vitamin influenza", "coffee mortality"], ["cholesterol", "diabetes", "runners"]]
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
        ready, start, done = ctx.Queue(), ctx.Barrier(len(queries)), ctx.Queue()
        procs = [ctx.Process(target=_cli_like_caller, args=(q, str(tmp_path / f"ev{i}.sqlite"), ready, start, done))
                 for i, q in enumerate(queries)]
        for p in procs:
            p.start()
        state_files = {ready.get(timeout=120) for _ in procs}
        replies = [done.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(30)
        assert len(server.requests) == 2 * 3 * len(queries)  # esearch + efetch per query, nothing retried
    assert [errors for errors, _ in replies] == [[]] * len(queries)
    stamps = [t for _, own in replies for t in own]
    assert len(stamps) == len(server.requests)  # every request took a slot ...
    assert_schedule(stamps, RateLimiter(10).interval, 10)  # ... from one schedule for the user
    assert state_files == {str(next((home / ".cache" / "biocheck").glob("eutils-*.next")))}


def test_large_n_fetches_details_in_batches_of_200():
    corpus = [FakeArticle(f"4{i:07d}", f"Zinc trial {i}", f"Zinc was given daily in trial {i}.") for i in range(450)]
    with FakeEutils(corpus=corpus) as server, make_client(server) as client:
        result = client.search("zinc", n=450)
        esearch, efetch = server.requests_to("esearch"), server.requests_to("efetch")
    assert esearch[0].params["retmax"] == "450" and result.total == 450
    batches = [r.params["id"].split(",") for r in efetch]
    assert [len(b) for b in batches] == [200, 200, 50]
    assert [p for b in batches for p in b] == [a.pmid for a in result.articles]  # esearch order, each id once
    assert len(set(a.pmid for a in result.articles)) == 450


@pytest.mark.parametrize("n", [0, 10_001])
def test_n_beyond_what_pubmed_returns_is_refused_without_a_request(server, n):
    with make_client(server) as client, pytest.raises(SearchError, match="10,000"):
        client.search("aspirin", n=n)
    assert server.requests == []


@pytest.mark.parametrize("url", ["notaurl", "ftp://eutils.example.org/", "http://[::1", "http://", "https:///eutils/",
                                 "http://host:99999999/"])
def test_a_bad_eutils_url_is_refused_naming_the_variable(server, monkeypatch, url):
    from biocheck.io import InputError

    monkeypatch.setenv("BIOCHECK_EUTILS_URL", url)
    with pytest.raises(InputError, match=r"^BIOCHECK_EUTILS_URL=") as err:
        EntrezClient()
    assert "\n" not in str(err.value) and "is not an http(s) URL" in str(err.value)  # says what is expected
    with pytest.raises(InputError, match=r"^base_url="):
        EntrezClient(base_url=url)


def test_a_bad_eutils_url_never_echoes_a_key(monkeypatch):
    from biocheck.io import InputError

    monkeypatch.setenv("BIOCHECK_EUTILS_URL", f"ftp://host/?api_key={KEY}")
    monkeypatch.setenv("NCBI_API_KEY", KEY)
    with pytest.raises(InputError) as err:
        EntrezClient()
    assert KEY not in str(err.value)


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
    limiter.defer(1)  # a shorter hold-off never shortens a longer one
    assert limiter.try_acquire() == pytest.approx(5.0)


def test_a_request_exactly_one_interval_later_is_granted_and_stamped():
    clock, grants = [100.0], []
    limiter = RateLimiter(4, slack=0.0, clock=lambda: clock[0], on_grant=grants.append)  # interval 0.25: exact
    assert limiter.try_acquire() == 0.0
    clock[0] += limiter.interval
    assert limiter.try_acquire() == 0.0  # on the dot: granted ...
    assert limiter.try_acquire() == limiter.interval  # ... and stamped: the next one waits a full interval
    assert grants == [100.0, 100.0 + limiter.interval]


def test_acquire_sleeps_through_the_injected_sleep_and_reports_the_wait(monkeypatch):
    def real_sleep(seconds: float) -> None:
        raise AssertionError("the limiter slept for real instead of through its injected sleep")

    monkeypatch.setattr(time, "sleep", real_sleep)
    clock, grants = VirtualClock(), []
    limiter = virtual_limiter(4, clock, grants)
    assert limiter.acquire() == 0.0
    assert limiter.acquire() == pytest.approx(limiter.interval)
    assert grants[1] - grants[0] == pytest.approx(limiter.interval)


def test_limiter_rejects_a_non_positive_rate():
    with pytest.raises(ValueError, match="rate must be positive"):
        RateLimiter(0)


def test_shared_state_file_boundary_defer_and_two_limiters(tmp_path):
    wall, grants = [1_700_000_000.0], []
    state = tmp_path / "eutils-test.next"
    one = RateLimiter(4, slack=0.0, state_file=state, wall_clock=lambda: wall[0], on_grant=grants.append)
    two = RateLimiter(4, slack=0.0, state_file=state, wall_clock=lambda: wall[0])  # another process, in effect
    assert one.try_acquire() == 0.0 and ratelimit.read_state(state).next == wall[0] + one.interval
    assert two.try_acquire() == one.interval  # the slot is taken machine-wide
    wall[0] += one.interval
    assert two.try_acquire() == 0.0  # on the dot: granted ...
    assert one.try_acquire() == one.interval  # ... and stamped in the file
    two.defer(10.0)
    assert one.try_acquire() == 10.0
    two.defer(1.0)  # never shortens a longer hold-off
    assert one.try_acquire() == 10.0
    assert grants == [1_700_000_000.0]  # `one` was granted once; `two`'s grant is not its stamp


def test_shared_state_far_in_the_future_or_unreadable_is_reset(tmp_path):
    wall = [1_700_000_000.0]
    state = tmp_path / "eutils-test.next"
    limiter = RateLimiter(4, slack=0.0, state_file=state, wall_clock=lambda: wall[0])
    stale = ratelimit._STALE_AFTER
    state.write_text(repr(wall[0] + stale))
    assert limiter.try_acquire() == stale  # a long hold-off, up to the limit, is honoured
    state.write_text(repr(wall[0] + stale + 1))
    assert limiter.try_acquire() == 0.0  # beyond it: a clock jump, start afresh
    assert ratelimit.read_state(state).next == wall[0] + limiter.interval
    state.write_text("not a number")
    wall[0] += limiter.interval
    assert limiter.try_acquire() == 0.0 and ratelimit.read_state(state).next == wall[0] + limiter.interval


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
    assert redact(text, None) == 'POST https://x/esearch.fcgi?api_key=***&term=a {"api-key":"***"}'
    assert redact(f"invalid key {KEY}.", KEY) == "invalid key ***."  # unlabelled: only the known key can go


def test_the_transport_redacts_its_own_key_wherever_it_appears():
    # An error text may hold the key without an `api_key=` label (an echoed body, a proxy's message).
    identity = {"api_key": KEY, "tool": "biocheck", "email": ""}
    transport = EutilsTransport("http://x", identity, RateLimiter(10), timeout=1.0, policy=RetryPolicy())
    try:
        assert transport.redact(f"key {KEY} refused") == "key *** refused"
    finally:
        transport.close()


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
