"""The agent's search_pubmed contract over every backend, the replay backend, and `evidence build`."""

from __future__ import annotations

import gzip
import json
import re
import socket

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evidence.build import EvidenceConfig, build_evidence
from biocheck.evidence.search import SearchConfig, SearchTool, open_backend, search_tool
from biocheck.evidence.store import EvidenceStore
from biocheck.evidence.types import SearchError
from biocheck.io import InputError
from tests.helpers.builders import CORPUS
from tests.helpers.fake_eutils import CORPUS as PUBMED
from tests.helpers.fake_eutils import FakeEutils, pubmed_xml

KEYS = {"pmid", "title", "abstract"}


@pytest.fixture(autouse=True)
def _no_ncbi_env(monkeypatch, tmp_path_factory):
    for name in ("NCBI_API_KEY", "NCBI_EMAIL", "BIOCHECK_EUTILS_URL", "BIOCHECK_RATELIMIT_DIR"):
        monkeypatch.delenv(name, raising=False)
    # The rate limiter's state file goes to the user's cache dir by default: keep it out of ~/.cache.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}/entrez/eutils/"


def test_local_tool_returns_the_contract_in_rank_order(evidence):
    cfg, stats = evidence
    assert stats["index"]["docs"] == len(CORPUS)
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
    results = tool('(vitamin OR aspirin) AND (fracture* OR bleeding)')
    assert [r["pmid"] for r in results] == ["101", "103"] or [r["pmid"] for r in results] == ["103", "101"]
    assert all(set(r) >= KEYS for r in results)
    assert results[0]["abstract"].startswith(("Vitamin D", "Aspirin"))
    assert tool('"hip fractures"[tiab]')[0]["pmid"] == "101"
    bm25 = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, mode="bm25"))
    assert bm25("does coffee cause atrial fibrillation")[0]["pmid"] == "105"


@pytest.mark.parametrize("query, expect", [
    ("aspirin AND (bleeding", "parenthes"),
    ("", "Empty query"),
    ("   ", "Empty query"),
    ("aspirin[zz]", "tag"),
])
def test_bad_queries_come_back_as_text_not_exceptions(evidence, query, expect):
    cfg, _ = evidence
    out = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))(query)
    assert isinstance(out, str) and expect.lower() in out.lower()


def test_backend_crash_is_an_error_text():
    class Broken:
        def search(self, query, n=5):
            raise RuntimeError("disk on fire")
    out = SearchTool(Broken()).run("aspirin")
    assert out.results == [] and out.error.startswith("Search failed (RuntimeError)")


def test_n_is_clamped_to_the_budget(evidence):
    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store, max_results=2))
    results = tool("aspirin OR coffee OR statin OR vitamin", n=50)
    assert isinstance(results, list) and len(results) == 2
    assert len(tool.run("aspirin OR coffee OR statin", n="x").results) == 2


def test_missing_index_is_a_clear_error(tmp_path):
    with pytest.raises(SearchError, match="biocheck evidence build"):
        open_backend(SearchConfig(index_dir=tmp_path / "none"))


def test_entrez_tool_has_the_same_shape_and_records_answers(tmp_path, monkeypatch):
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
        monkeypatch.setenv("NCBI_API_KEY", "k" * 36)  # 10/s keeps the test quick
        tool = search_tool(SearchConfig(backend="entrez", store=tmp_path / "ev.sqlite", max_results=3))
        results = tool("aspirin")
        assert 1 <= len(results) <= 3 and all(set(r) >= KEYS for r in results)
        assert {"year", "journal", "mesh"} & set(results[0])
        before = len(server.requests)
        assert tool("  ASPIRIN ") == results  # normalised repeat: answered by the store
        assert len(server.requests) == before
    with EvidenceStore(tmp_path / "ev.sqlite") as store:
        assert "k" * 36 not in json.dumps(store.stats()) and store.stats()["queries"] == 1


def test_replay_answers_recorded_queries_and_falls_back_to_stored_abstracts(tmp_path, monkeypatch):
    store_path = tmp_path / "ev.sqlite"
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
        monkeypatch.setenv("NCBI_API_KEY", "k" * 36)
        live = search_tool(SearchConfig(backend="entrez", store=store_path))
        recorded = live("aspirin")
        live("coffee mortality")
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", closed_port_url())  # replay must never touch the network
    before = EvidenceStore(store_path).stats()
    replay = search_tool(SearchConfig(backend="replay", store=store_path))
    out = replay.run("Aspirin")
    assert out.error is None and out.results == recorded and out.backend == "entrez"
    fallback = replay.run("coffee[tiab]")  # never asked live: the local engine over stored abstracts
    assert fallback.error is None and fallback.backend == "local"
    assert [r["pmid"] for r in fallback.results] == ["31000007"]
    assert replay.run("metformin").results == []  # not stored anywhere: nothing, and no request
    assert EvidenceStore(store_path).stats() == before  # replay writes nothing


def test_evidence_build_ingests_baseline_files(tmp_path):
    plain = tmp_path / "pubmed25n0001.xml"
    plain.write_bytes(pubmed_xml(PUBMED[:4]))
    zipped = tmp_path / "pubmed25n0002.xml.gz"
    zipped.write_bytes(gzip.compress(pubmed_xml(PUBMED[4:])))
    cfg = EvidenceConfig(corpus=None, baseline=[str(tmp_path / "pubmed25n000*.xml*")], index_dir=tmp_path / "idx",
                         store=tmp_path / "ev.sqlite", metrics_path=None, progress=False)
    stats = build_evidence(cfg)
    assert stats["index"]["docs"] == len(PUBMED) and stats["baseline_files"] == 2
    assert stats["index"]["docs_with_mesh"] == len(PUBMED)
    assert stats["store"]["articles"] == len(PUBMED)
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
    assert tool('"Colorectal Neoplasms"[mh]')[0]["pmid"] == "31000004"  # real MeSH from the XML
    replay = search_tool(SearchConfig(backend="replay", store=cfg.store))
    assert replay("metformin[ti]")[0]["pmid"] == "31000008"


def test_evidence_build_rejects_missing_inputs(tmp_path):
    with pytest.raises(InputError, match="no file matches"):
        build_evidence(EvidenceConfig(corpus=None, baseline=[str(tmp_path / "nope*.xml")], metrics_path=None))
    with pytest.raises(InputError, match="biocheck data prepare"):
        build_evidence(EvidenceConfig(corpus=tmp_path / "none.jsonl", index_dir=tmp_path / "i",
                                      store=tmp_path / "s.sqlite", metrics_path=None))


def test_failed_rebuild_keeps_the_previous_index(evidence, tmp_path):
    cfg, _ = evidence
    cfg.corpus.write_text(cfg.corpus.read_text() + "{not json\n")
    with pytest.raises(InputError, match="corpus.jsonl:6"):
        build_evidence(cfg)
    assert search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))("coffee")[0]["pmid"] == "105"


# --- CLI -------------------------------------------------------------------------------------------

runner = CliRunner()


@pytest.fixture
def workdir(evidence_workdir):
    return evidence_workdir


def test_cli_batch_json_one_line_per_query_in_order(workdir):
    (workdir / "q.txt").write_text('coffee\naspirin AND (bleeding\n"hip fractures"\nzzzznothing\n')
    r = runner.invoke(app, ["search", "--batch", "q.txt", "--json", "-n", "2"])
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["query"] for x in lines] == ["coffee", "aspirin AND (bleeding", '"hip fractures"', "zzzznothing"]
    assert lines[0]["results"][0]["pmid"] == "105" and lines[0]["error"] is None
    assert lines[1]["results"] == [] and "parenthes" in lines[1]["error"].lower()
    assert lines[2]["results"][0]["pmid"] == "101"
    assert lines[3] == {"query": "zzzznothing", "results": [], "error": None}


def test_cli_single_query(workdir):
    r = runner.invoke(app, ["search", "statin AND memory", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["results"][0]["pmid"] == "102"
    r = runner.invoke(app, ["search", "statin AND (memory"])
    assert r.exit_code == 1 and r.stdout == ""  # the error on stderr, as one `error:` line naming the query
    assert r.stderr.startswith("error: search 'statin AND (memory': ") and "parenthes" in r.stderr.lower()
    assert len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["search", "x", "--backend", "bing"])  # not among the choices: a usage error
    assert r.exit_code == 2 and "'bing' is not one of 'local', 'entrez', 'replay'" in r.output
    assert runner.invoke(app, ["search"]).exit_code == 2


# --- configuration values that cannot work ---------------------------------------------------------

# The bounds are the fields' types (bounds.py), checked where params.yaml's `search:` is read.
@pytest.mark.parametrize("key, value, says", [
    ("max_attempts", 0, "search.max_attempts must be >= 1, not 0"),
    ("max_attempts", -3, "search.max_attempts must be >= 1, not -3"),
    ("max_attempts", 1000, "search.max_attempts must be <= 20, not 1000"),
    ("timeout_s", -1, "search.timeout_s must be > 0, not -1"),
    ("timeout_s", 0, "search.timeout_s must be > 0, not 0"),
    ("timeout_s", float("nan"), "search.timeout_s must be > 0, not nan"),
    ("timeout_s", float("inf"), "search.timeout_s must be a finite number, not inf"),
    ("deadline_s", 0, "search.deadline_s must be > 0, not 0"),
    ("max_results", 0, "search.max_results must be >= 1, not 0"),
    ("max_results", 10_001, "search.max_results must be <= 10000, not 10001"),
    ("max_results", True, "search.max_results must be an int, not True"),
])
def test_search_config_refuses_values_that_cannot_work(key, value, says):
    from biocheck.wiring import search_config

    with pytest.raises(InputError) as err:
        search_config({"search": {key: value}})
    assert str(err.value).endswith(f"section 'search': {says}") and "\n" not in str(err.value), str(err.value)


def test_evidence_threads_are_bounded_by_tantivys_writer():
    from biocheck.wiring import evidence_config

    for value, says in ((0, "evidence.threads must be >= 1, not 0"), (64, "evidence.threads must be <= 8, not 64")):
        with pytest.raises(InputError) as err:
            evidence_config({"evidence": {"threads": value}})
        assert str(err.value).endswith(says), str(err.value)


@pytest.mark.parametrize("change, says", [
    ({"corpus_source": " "}, "evidence.corpus_source: ' ' must name the corpus"),
    ({"baseline": [3]}, "evidence.baseline: must be a list of file paths or globs, got [3]"),
    ({"baseline": {"a": 1}}, "evidence.baseline: must be a list of file paths or globs, got {'a': 1}"),
    ({"store": "ev/index/evidence.sqlite"}, "evidence.store: ev/index/evidence.sqlite is inside evidence.index_dir"),
    ({"corpus": "ev/index/c.jsonl"}, "evidence.corpus: ev/index/c.jsonl is inside evidence.index_dir"),
    ({"metrics_path": "ev/index"}, "evidence.metrics_path: ev/index is inside evidence.index_dir"),
])
def test_evidence_config_refuses_values_that_cannot_work(change, says):
    with pytest.raises(ValueError, match=f"^{re.escape(says)}"):
        EvidenceConfig(**{"index_dir": "ev/index", **change})


# --- large n ------------------------------------------------------------------------------------

def test_up_to_10000_papers_per_search_are_allowed():
    from biocheck.evidence import search as search_module

    assert search_module.MAX_N == 10_000 and SearchConfig(max_results=10_000).max_results == 10_000


def test_local_and_replay_answer_large_n(tmp_path):
    from biocheck.evidence.local import LocalIndex
    from biocheck.evidence.types import Article

    papers = [Article(pmid=str(40_000_000 + i), title=f"Zinc trial {i}", abstract="Zinc " * (1 + i % 5),
                      source="entrez") for i in range(1_500)]
    index_dir = tmp_path / "idx"
    LocalIndex.build(papers, path=index_dir)
    with EvidenceStore(tmp_path / "ev.sqlite") as store:
        store.put_articles(papers)
    for backend in ("local", "replay"):
        tool = search_tool(SearchConfig(backend=backend, index_dir=index_dir, store=tmp_path / "ev.sqlite",
                                        max_results=1_200))
        out = tool.run("zinc")
        assert out.error is None and len(out.results) == 1_200, backend
        assert len({r["pmid"] for r in out.results}) == 1_200


def test_cli_n_above_100(workdir):
    r = runner.invoke(app, ["search", "aspirin OR coffee", "--json", "-n", "150"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["error"] is None
    r = runner.invoke(app, ["search", "aspirin", "-n", "10001"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit) and "10000" in r.output


@pytest.mark.parametrize("url", ["notaurl", "ftp://eutils.example.org/", "http://[::1"])
def test_cli_refuses_a_bad_eutils_url_in_one_line(workdir, monkeypatch, url):
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", url)
    r = runner.invoke(app, ["search", "aspirin", "--backend", "entrez"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), repr(r.exception)  # not a crash
    assert "BIOCHECK_EUTILS_URL" in r.output
    assert len(r.output.strip().splitlines()) == 1, r.output
