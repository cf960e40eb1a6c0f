"""`biocheck evidence refresh` against the fake E-utilities server: what changed, what failed, the rate limit.

Expected answers come from the fake's own search over its (changed) corpus, never typed in. The rate
limit is checked from the limiter's grant stamps (its `on_grant` hook), not by timing requests.
"""

from __future__ import annotations

import json
import sqlite3
from itertools import pairwise
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evidence.ratelimit import shared_limiter
from biocheck.evidence.refresh import (
    NOT_TRIED,
    RefreshConfig,
    RefreshError,
    recorded_queries,
    refresh,
    refresh_queries,
)
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.evidence.store import EvidenceStore
from tests.helpers import cli as cli_errors
from tests.helpers.fake_eutils import FakeEutils, max_in_window
from tests.helpers.paths import REPO
from tests.helpers.refresh import (
    KEY,
    NEW,
    QUERIES,
    RETRACTED,
    N,
    publish_and_retract,
    record,
    refresh_env,  # noqa: F401 (autouse here: no NCBI settings of the developer, no tracking)
)

runner = CliRunner()


@pytest.fixture
def server(monkeypatch):
    with FakeEutils() as fake:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", fake.url)
        yield fake


def config(tmp_path: Path, **kw) -> RefreshConfig:
    search = SearchConfig(backend="entrez", store=tmp_path / "ev.sqlite", max_results=N,
                          **{k: kw.pop(k) for k in ("max_attempts",) if k in kw})
    return RefreshConfig(search=search, report_path=tmp_path / "reports" / "refresh.json",
                         metrics_path=tmp_path / "metrics" / "refresh.json", progress=False, **kw)


def rows(store: Path) -> list[tuple]:
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT query, backend, total, result_ids, searched_at FROM queries ORDER BY id").fetchall()


def esearch_terms(server: FakeEutils) -> list[str]:
    return [r.params["term"] for r in server.requests_to("esearch")]


# --------------------------------------------------------------------------- what changed


def test_refresh_records_added_and_removed_papers_and_replay_answers_anew(server, tmp_path):
    before = record(tmp_path / "ev.sqlite", QUERIES)
    assert NEW.pmid not in before["aspirin"] and RETRACTED in before["aspirin"]
    publish_and_retract(server)
    expected = {q: server.search(q, N)[0] for q in QUERIES}  # PubMed's answers now
    searched = len(server.requests_to("esearch"))

    cfg = config(tmp_path)
    report = refresh(cfg)

    # every recorded query went to PubMed again, none was answered from the store
    assert esearch_terms(server)[searched:] == QUERIES
    by_query = {c["query"]: c for c in report["queries"]}
    assert list(by_query) == QUERIES
    for q in QUERIES:
        c = by_query[q]
        assert c["old_ids"] == before[q] and c["new_ids"] == expected[q] and c["error"] is None
        assert c["added"] == [p for p in expected[q] if p not in before[q]]
        assert c["removed"] == [p for p in before[q] if p not in expected[q]]
        assert c["changed"] is (expected[q] != before[q])
    assert NEW.pmid in by_query["aspirin"]["added"] and by_query["aspirin"]["removed"] == [RETRACTED]
    assert by_query["vitamin d"]["changed"] is False  # untouched by the new paper
    assert by_query["aspirin"]["total_after"] == len(server.search("aspirin", 10_000)[0])

    # the report and the metrics on disk are what refresh returned
    assert json.loads(cfg.report_path.read_text()) == report
    metrics = json.loads(cfg.metrics_path.read_text())
    assert metrics == report["summary"]
    assert metrics["queries"] == len(QUERIES) and metrics["errors"] == 0
    assert metrics["changed"] == sum(expected[q] != before[q] for q in QUERIES) >= 2
    assert metrics["new_papers"] == 1 and metrics["added"] == sum(NEW.pmid in expected[q] for q in QUERIES)

    # replay (store only, never the network) now gives the new answers
    requests = len(server.requests)
    replay = search_tool(SearchConfig(backend="replay", store=tmp_path / "ev.sqlite", max_results=N))
    assert {q: [r["pmid"] for r in replay(q)] for q in QUERIES} == expected
    assert len(server.requests) == requests


def test_recorded_queries_are_the_pubmed_ones_oldest_first_and_limit_takes_the_first(server, tmp_path):
    from biocheck.evidence.types import Article, SearchResult

    record(tmp_path / "ev.sqlite", QUERIES)
    with EvidenceStore(tmp_path / "ev.sqlite") as store:  # a row another backend recorded is not PubMed's
        store.put(SearchResult(query="local only", backend="local",
                               articles=[Article(pmid="9", title="t", source="corpus:scifact")]))
    assert recorded_queries(config(tmp_path)) == QUERIES
    assert recorded_queries(config(tmp_path, limit=2)) == QUERIES[:2]
    report = refresh(config(tmp_path, limit=2))
    assert [c["query"] for c in report["queries"]] == QUERIES[:2]


# --------------------------------------------------------------------------- failures


def test_a_failing_query_is_recorded_and_keeps_its_answer_while_the_others_refresh(server, tmp_path):
    before = record(tmp_path / "ev.sqlite", QUERIES)
    old_rows = rows(tmp_path / "ev.sqlite")
    publish_and_retract(server)
    # PubMed rejects the next esearch (the first query's) outright: not retried, not fatal to the run
    server.inject("error", endpoint="esearch", message="Invalid query syntax near aspirin")
    report = refresh(config(tmp_path))

    failed, *rest = report["queries"]
    assert failed["query"] == QUERIES[0] and "Invalid query syntax" in failed["error"]
    assert failed["new_ids"] is None and failed["changed"] is False and failed["old_ids"] == before[QUERIES[0]]
    assert rows(tmp_path / "ev.sqlite")[0] == old_rows[0]  # its stored answer is untouched
    assert all(c["error"] is None and c["new_ids"] == server.search(c["query"], N)[0] for c in rest)
    assert report["summary"]["errors"] == 1 and report["summary"]["refreshed"] == len(QUERIES) - 1


def test_all_queries_failing_is_an_error_and_changes_nothing(server, tmp_path):
    record(tmp_path / "ev.sqlite", QUERIES)
    old_rows = rows(tmp_path / "ev.sqlite")
    searched = len(server.requests_to("esearch"))
    server.inject("status", status=503, times=1000)  # NCBI is down
    cfg = config(tmp_path, max_attempts=1, give_up_after=3)
    with pytest.raises(RefreshError, match=rf"none of the {len(QUERIES)} .*3 tried, all failed.*unchanged.*HTTP 503"):
        refresh(cfg)
    assert rows(tmp_path / "ev.sqlite") == old_rows
    assert not cfg.report_path.exists() and not cfg.metrics_path.exists()
    # it gave up after the first three queries instead of waiting out every one
    assert len(server.requests_to("esearch")) - searched == 3


def test_not_tried_queries_are_reported_as_such(server, tmp_path):
    record(tmp_path / "ev.sqlite", QUERIES)
    server.inject("status", status=503, times=2)
    changes = refresh_queries(config(tmp_path, max_attempts=1, give_up_after=2), QUERIES)
    assert [c.error.startswith(NOT_TRIED) for c in changes] == [False, False, True, True, True]
    assert "HTTP 503" in changes[2].error


def test_one_early_failure_does_not_stop_the_run(server, tmp_path):
    record(tmp_path / "ev.sqlite", QUERIES)
    server.inject("status", status=503, times=1)
    changes = refresh_queries(config(tmp_path, max_attempts=1, give_up_after=2), QUERIES)
    assert [c.error is None for c in changes] == [False, True, True, True, True]


def test_a_store_without_pubmed_queries_has_nothing_to_refresh(evidence, tmp_path):
    cfg, _ = evidence  # the corpus index and an empty-of-queries store
    with pytest.raises(Exception, match="nothing to refresh: the evidence store .* has no PubMed queries"):
        recorded_queries(RefreshConfig(search=SearchConfig(backend="entrez", store=cfg.store)))


# --------------------------------------------------------------------------- the rate limit


def test_refresh_keeps_ncbis_rate_limit(server, tmp_path):
    record(tmp_path / "ev.sqlite", QUERIES)
    limiter = shared_limiter(urlsplit(server.url).netloc, KEY)  # the one every client of this host+key uses
    stamps: list[float] = []
    requests = len(server.requests)
    limiter.on_grant = stamps.append
    try:
        refresh(config(tmp_path))
    finally:
        limiter.on_grant = None
    assert len(stamps) == len(server.requests) - requests == 2 * len(QUERIES)  # every request took a slot
    assert all(b - a >= limiter.interval - 1e-9 for a, b in pairwise(stamps))
    assert max_in_window(stamps, 1.0) <= limiter.rate == 10


# --------------------------------------------------------------------------- the command


def workdir(tmp_path: Path, monkeypatch, **search) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"]["store"] = str(tmp_path / "ev.sqlite")
    params["search"].update(max_results=N, **search)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def one_error_line(r, *needles: str) -> str:
    assert r.exit_code == 1, r.output
    return cli_errors.one_error_line(r, *needles)


def test_cli_refreshes_writes_the_report_and_logs_to_mlflow(server, tmp_path, monkeypatch):
    import mlflow

    from biocheck.tracking import tracking_uri

    monkeypatch.setenv("BIOCHECK_TRACKING", "on")
    record(tmp_path / "ev.sqlite", QUERIES)
    publish_and_retract(server)
    workdir(tmp_path, monkeypatch)
    r = runner.invoke(app, ["evidence", "refresh", "--no-progress", "--limit", "3"])
    assert r.exit_code == 0, r.output
    report = json.loads((tmp_path / "reports" / "evidence_refresh.json").read_text())
    assert [c["query"] for c in report["queries"]] == QUERIES[:3]
    s = report["summary"]
    assert f"refreshed {s['refreshed']} of 3 PubMed queries: {s['changed']} changed" in r.output
    assert json.loads((tmp_path / "metrics" / "evidence_refresh.json").read_text()) == s

    mlflow.set_tracking_uri(tracking_uri())
    run = mlflow.search_runs(experiment_names=["biocheck-data"], filter_string="tags.stage = 'evidence-refresh'",
                             order_by=["start_time DESC"], output_format="list")[0]
    assert run.data.metrics["changed"] == s["changed"] and run.data.metrics["queries"] == 3
    assert run.data.params["limit"] == "3"
    assert KEY not in json.dumps(run.data.params)


def test_cli_help_explains_the_command():
    r = runner.invoke(app, ["evidence", "refresh", "--help"])
    assert r.exit_code == 0
    for needle in ("--limit", "--no-progress", "--params", "entrez", "evidence_refresh.json", "rate"):
        assert needle in r.output, needle


def test_cli_empty_store(evidence, tmp_path, monkeypatch):
    cfg, _ = evidence
    workdir(tmp_path, monkeypatch)
    params = yaml.safe_load((tmp_path / "params.yaml").read_text())
    params["evidence"]["store"] = str(cfg.store)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    one_error_line(runner.invoke(app, ["evidence", "refresh"]), "nothing to refresh", str(cfg.store),
                   "search.backend: entrez")


def test_cli_missing_store(tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    one_error_line(runner.invoke(app, ["evidence", "refresh"]), "nothing to refresh", "no evidence store")
    assert not (tmp_path / "ev.sqlite").exists()  # looking did not create one


def test_cli_damaged_store(tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    (tmp_path / "ev.sqlite").write_bytes(b"this is not SQLite at all " * 200)
    one_error_line(runner.invoke(app, ["evidence", "refresh"]), "ev.sqlite", "damaged")


def test_cli_ncbi_unreachable(server, tmp_path, monkeypatch):
    record(tmp_path / "ev.sqlite", QUERIES)
    old_rows = rows(tmp_path / "ev.sqlite")
    url = server.url
    server.stop()  # nothing listens there any more
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", url)
    workdir(tmp_path, monkeypatch, max_attempts=1)
    one_error_line(runner.invoke(app, ["evidence", "refresh", "--no-progress"]), "none of the 5",
                   "connection error", "unchanged")
    assert rows(tmp_path / "ev.sqlite") == old_rows


def test_cli_bad_limit(tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    one_error_line(runner.invoke(app, ["evidence", "refresh", "--limit", "0"]), "--limit 0")
