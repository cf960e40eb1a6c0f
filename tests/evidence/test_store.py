"""The evidence store: round trips, idempotence, atomicity, concurrency; write-through caching."""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from biocheck.evidence import store as store_mod
from biocheck.evidence.cache import CachedSearch
from biocheck.evidence.entrez import EntrezClient
from biocheck.evidence.store import EvidenceStore, normalize_query
from biocheck.evidence.types import Article, SearchResult
from tests.helpers.fake_eutils import FakeEutils

WORKERS = 8
QUERIES_PER_WORKER = 20


def article(pmid: str, source: str = "entrez", **kw) -> Article:
    return Article(
        pmid=pmid,
        title=kw.pop("title", f"Title {pmid}"),
        abstract=kw.pop("abstract", f"METHODS: study {pmid}. RESULTS: it worked."),
        year=kw.pop("year", 2020),
        journal=kw.pop("journal", "J Test"),
        mesh=kw.pop("mesh", ["Humans", f"Topic {pmid}"]),
        source=source,
    )


def result(query: str, pmids: list[str], backend: str = "entrez", source: str = "entrez") -> SearchResult:
    return SearchResult(
        query=query,
        backend=backend,
        articles=[article(p, source) for p in pmids],
        translation=f'"{query}"[All Fields]',
        searched_at="2025-01-02T03:04:05+00:00",
        total=len(pmids) * 10,
    )


def raw_rows(path: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def assert_consistent(path: Path) -> None:
    """No corruption, no duplicates, every query's ids resolve to article rows."""
    assert raw_rows(path, "PRAGMA integrity_check") == [("ok",)]
    assert raw_rows(path, "SELECT namespace, pmid FROM articles GROUP BY namespace, pmid HAVING COUNT(*) > 1") == []
    assert raw_rows(path, "SELECT norm, backend FROM queries GROUP BY norm, backend HAVING COUNT(*) > 1") == []
    known = {p for (p,) in raw_rows(path, "SELECT pmid FROM articles")}
    for (ids,) in raw_rows(path, "SELECT result_ids FROM queries"):
        assert set(json.loads(ids)) <= known


@pytest.fixture(autouse=True)
def _private_cache_dir(monkeypatch, tmp_path_factory):
    """The entrez client's rate-limit state file goes to the user's cache dir: never the real ~/.cache."""
    monkeypatch.delenv("BIOCHECK_RATELIMIT_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture
def store(tmp_path):
    with EvidenceStore(tmp_path / "evidence") as s:
        yield s


# ---------------------------------------------------------------------------- basics


def test_put_then_get_round_trips_in_stored_order(store):
    answer = result("Aspirin AND stroke", ["3", "1", "2"])
    assert store.put(answer) is True
    got = store.get("  aspirin   and STROKE ", "entrez")
    assert got == answer  # every field, articles in the backend's order
    assert store.get("aspirin and stroke", "local") is None  # keyed by backend too
    assert store.get("aspirin", "entrez") is None
    assert store.path.name == "evidence.sqlite" and store.path.parent.name == "evidence"


def test_database_is_in_wal_mode(store):
    assert raw_rows(store.path, "PRAGMA journal_mode") == [("wal",)]


def test_normalisation_lowercases_and_collapses_whitespace():
    assert normalize_query("  Vitamin\tD \n and  COVID ") == "vitamin d and covid"


def test_puts_are_idempotent_and_keep_first_seen(store):
    first = result("statins", ["10", "11"])
    assert store.put(first) is True
    seen = dict(raw_rows(store.path, "SELECT pmid, first_seen FROM articles"))
    assert store.put(first) is False  # same query again: no second row
    updated = first.model_copy(update={"articles": [article("10", abstract="corrected abstract"), article("11")]})
    store.put(updated)

    assert raw_rows(store.path, "SELECT COUNT(*) FROM queries") == [(1,)]
    assert raw_rows(store.path, "SELECT COUNT(*) FROM articles") == [(2,)]
    assert store.articles(["10"])[0].abstract == "corrected abstract"  # content refreshed
    assert dict(raw_rows(store.path, "SELECT pmid, first_seen FROM articles")) == seen
    assert_consistent(store.path)


def test_replace_overwrites_the_stored_answer(store):
    store.put(result("coffee", ["1"]))
    assert store.put(result("Coffee", ["2", "3"]), replace=True) is True
    assert [a.pmid for a in store.get("coffee", "entrez").articles] == ["2", "3"]
    assert raw_rows(store.path, "SELECT COUNT(*) FROM queries") == [(1,)]


def test_ids_of_different_corpora_do_not_collide(store):
    store.put(result("q", ["42"]))
    store.put(result("q", ["42"], backend="local", source="corpus:scifact"))
    assert store.articles(["42"])[0].source == "entrez"
    assert store.articles(["42"], namespace="corpus:scifact")[0].source == "corpus:scifact"
    assert store.get("q", "local").articles[0].source == "corpus:scifact"
    mixed = result("m", ["1"]).model_copy(update={"articles": [article("1"), article("2", "corpus:scifact")]})
    with pytest.raises(ValueError, match="namespaces"):
        store.put(mixed)


def test_empty_results_are_stored_too(store):
    store.put(SearchResult(query="zzyzx", backend="entrez", translation='"zzyzx"[All Fields]', total=0))
    got = store.get("zzyzx", "entrez")
    assert got is not None and got.articles == [] and got.total == 0


def test_articles_iteration_and_stats(store):
    store.put(result("a", ["1", "2"]))
    store.put(result("b", ["2", "3"]))
    store.put_articles([article("4", "baseline:pubmed25n0001.xml.gz", abstract="")])
    assert [a.pmid for a in store.articles(["3", "missing", "1"])] == ["3", "1"]
    assert [a.pmid for a in store.iter_articles(batch=2)] == ["1", "2", "3", "4"]
    assert [a.pmid for a in store.iter_articles("corpus:none")] == []
    stats = store.stats()
    assert stats["queries"] == 2 and stats["articles"] == 4
    assert stats["articles_by_namespace"] == {"pubmed": 4} and stats["articles_without_abstract"] == 1
    assert stats["size_bytes"] > 0


# ---------------------------------------------------------------------------- atomicity


def test_an_exception_mid_transaction_leaves_no_partial_record(store, monkeypatch):
    def fail(conn, articles, seen):
        conn.execute("INSERT INTO articles (namespace, pmid, title, abstract, mesh, source, first_seen)"
                     " VALUES ('pubmed', '1', 't', 'a', '[]', 'entrez', 'x')")
        raise RuntimeError("injected failure after the query row and one article")

    monkeypatch.setattr(store_mod, "_upsert_articles", fail)
    with pytest.raises(RuntimeError, match="injected"):
        store.put(result("aspirin", ["1", "2"]))
    monkeypatch.undo()

    assert store.get("aspirin", "entrez") is None
    assert raw_rows(store.path, "SELECT COUNT(*) FROM queries") == [(0,)]
    assert raw_rows(store.path, "SELECT COUNT(*) FROM articles") == [(0,)]
    assert store.put(result("aspirin", ["1", "2"])) is True  # no transaction or lock left behind
    assert [a.pmid for a in store.get("aspirin", "entrez").articles] == ["1", "2"]


def _crash_mid_put(path: str) -> None:
    """Child process: write the query row and one article, then die without committing."""
    s = EvidenceStore(path)

    def die(conn, articles, seen):
        conn.execute("INSERT INTO articles (namespace, pmid, title, abstract, mesh, source, first_seen)"
                     " VALUES ('pubmed', '1', 't', 'a', '[]', 'entrez', 'x')")
        os._exit(3)

    store_mod._upsert_articles = die
    s.put(result("aspirin", ["1", "2"]))


def test_a_process_killed_mid_transaction_leaves_no_partial_record(tmp_path):
    path = tmp_path / "evidence.sqlite"
    EvidenceStore(path).close()
    child = multiprocessing.get_context("spawn").Process(target=_crash_mid_put, args=(str(path),))
    child.start()
    child.join(60)
    assert child.exitcode == 3
    with EvidenceStore(path) as s:
        assert s.get("aspirin", "entrez") is None
        assert s.stats()["queries"] == 0 and s.stats()["articles"] == 0
        assert s.put(result("aspirin", ["1", "2"])) is True  # the dead writer's lock is gone
    assert_consistent(path)


# ---------------------------------------------------------------------------- concurrency


def _pool_pmids(worker: int, q: int) -> list[str]:
    # Overlapping article sets across workers: the same pmids are upserted concurrently.
    return [str(100 + (worker * 3 + q + k) % 40) for k in range(5)]


def _write_many(path: str, worker: int, start=None, shared: EvidenceStore | None = None) -> list[str]:
    """Write QUERIES_PER_WORKER results (each also read back); return any error messages."""
    errors: list[str] = []
    s = shared or EvidenceStore(path)
    if start is not None:
        start.wait()
    try:
        for q in range(QUERIES_PER_WORKER):
            pmids = _pool_pmids(worker, q)
            query = f"worker {worker} query {q}"
            s.put(result(query, pmids))
            s.put(result(f"shared query {q}", pmids))  # every worker races on these rows
            got = s.get(query.upper(), "entrez")
            if got is None or [a.pmid for a in got.articles] != pmids:
                errors.append(f"worker {worker}: read back {got!r} for {query!r}")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        errors.append(f"worker {worker}: {type(exc).__name__}: {exc}")
    finally:
        if shared is None:
            s.close()
    return errors


def _process_worker(path: str, worker: int, start, results) -> None:
    results.put(_write_many(path, worker, start))


def _check_after_concurrent_writes(path: Path) -> None:
    assert_consistent(path)
    expected_queries = WORKERS * QUERIES_PER_WORKER + QUERIES_PER_WORKER
    assert raw_rows(path, "SELECT COUNT(*) FROM queries") == [(expected_queries,)]
    expected_pmids = {p for w in range(WORKERS) for q in range(QUERIES_PER_WORKER) for p in _pool_pmids(w, q)}
    assert {p for (p,) in raw_rows(path, "SELECT pmid FROM articles")} == expected_pmids
    assert raw_rows(path, "SELECT COUNT(*) FROM articles") == [(len(expected_pmids),)]


def test_eight_threads_write_one_store_without_locks_or_duplicates(tmp_path):
    # One EvidenceStore shared by all threads: each thread gets its own connection.
    path = tmp_path / "evidence.sqlite"
    shared = EvidenceStore(path)
    start = threading.Barrier(WORKERS)
    errors: list[str] = []
    threads = [
        threading.Thread(target=lambda w=w: errors.extend(_write_many(str(path), w, start, shared)))
        for w in range(WORKERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(shared._connections) == WORKERS + 1  # the opening thread's and one per worker
    shared.close()
    assert errors == []
    _check_after_concurrent_writes(path)


def test_eight_processes_write_one_store_without_locks_or_duplicates(tmp_path):
    # The file does not exist yet: the processes also race to create the schema and enable WAL.
    path = tmp_path / "evidence.sqlite"
    ctx = multiprocessing.get_context("spawn")
    start, results = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [ctx.Process(target=_process_worker, args=(str(path), w, start, results)) for w in range(WORKERS)]
    for p in procs:
        p.start()
    errors = [e for _ in procs for e in results.get(timeout=120)]
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0] * WORKERS
    assert errors == []  # in particular no "database is locked"
    _check_after_concurrent_writes(path)


# ---------------------------------------------------------------------------- write-through cache


def test_second_identical_search_makes_zero_requests(tmp_path, monkeypatch):
    monkeypatch.delenv("NCBI_API_KEY", raising=False)
    with (
        FakeEutils() as server,
        EvidenceStore(tmp_path) as store,
        EntrezClient(base_url=server.url, api_key="k-123456") as client,
    ):
        cached = CachedSearch(client, store)
        first = cached.search("vitamin d", n=2)
        assert len(server.requests) == 2  # esearch + efetch
        again = cached.search("vitamin d", n=2)
        variant = cached.search("  Vitamin   D ", n=1)
        assert len(server.requests) == 2  # answered from the store
        assert again == first and variant.articles == first.articles[:1]
        assert (cached.hits, cached.misses) == (2, 1)

        more = cached.search("vitamin d", n=5)  # the stored answer may be complete already
        assert len(server.requests) == 2 and more.articles == first.articles  # total == 2

        cached.search("aspirin", n=1)
        cached.search("aspirin", n=3)  # needs more than was stored: asks PubMed again
        assert len(server.requests) == 6
        assert [a.pmid for a in store.get("aspirin", "entrez").articles] == ["31000001", "31000004", "31000005"]


class _StubBackend:
    name = "local"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def search(self, query: str, n: int = 5) -> SearchResult:
        self.calls.append(query)
        return SearchResult(query=query, backend="local", articles=[article("7")])


def test_replay_seam_reads_recorded_answers_and_writes_nothing(store):
    store.put(result("recorded", ["1", "2"]))
    local = _StubBackend()
    replay = CachedSearch(local, store, name="entrez", write=False)
    assert [a.pmid for a in replay.search("Recorded", n=2).articles] == ["1", "2"]
    assert local.calls == []
    assert [a.pmid for a in replay.search("unseen claim").articles] == ["7"]
    assert local.calls == ["unseen claim"]
    assert store.get("unseen claim", "entrez") is None and store.get("unseen claim", "local") is None
