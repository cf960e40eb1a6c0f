"""Damaged evidence files and leftovers: one clear error (what, where, how to fix), never a traceback.

A garbage or truncated evidence store, a damaged index directory, and the staging folder a killed
`evidence build` leaves behind; through the library, the search backends and the CLI.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evidence.build import build_evidence
from biocheck.evidence.local import LocalIndex
from biocheck.evidence.search import SearchConfig, open_backend, search_tool
from biocheck.evidence.store import EvidenceStore
from biocheck.evidence.types import Article, SearchError, SearchResult
from biocheck.io import InputError
from tests.helpers.fake_eutils import FakeEutils

runner = CliRunner()
REBUILD = "biocheck evidence build"


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path_factory):
    for name in ("NCBI_API_KEY", "BIOCHECK_EUTILS_URL", "BIOCHECK_RATELIMIT_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))  # never the real ~/.cache


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


def no_tracebacks(caplog) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


# --- the evidence store ------------------------------------------------------------------------------


def make_store(path: Path) -> Path:
    with EvidenceStore(path) as store:
        for q in range(40):
            arts = [Article(pmid=str(q * 100 + i), title=f"Aspirin trial {q} {i}", abstract="aspirin " * 200,
                            source="entrez") for i in range(20)]
            store.put(SearchResult(query=f"aspirin {q}", backend="entrez", articles=arts))
    return path


def damage_file(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "random":
        path.write_bytes(random.Random(0).randbytes(len(data)))
    elif how == "half":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbled":  # header intact, pages in the middle overwritten
        cut = len(data) // 3
        path.write_bytes(data[:cut] + random.Random(1).randbytes(len(data) // 3) + data[2 * cut :])
    else:
        raise ValueError(how)


STORE_DAMAGE = ["random", "half", "garbled"]


@pytest.mark.parametrize("how", STORE_DAMAGE)
def test_a_damaged_store_is_one_clear_error_when_read(tmp_path, how):
    path = make_store(tmp_path / "evidence.sqlite")
    damage_file(path, how)
    with pytest.raises(SearchError) as err:
        with EvidenceStore(path) as store:
            store.stats()
            list(store.iter_articles())
    text = one_line(err.value)
    assert str(path) in text and "damaged" in text and REBUILD in text


@pytest.mark.parametrize("how", STORE_DAMAGE)
def test_replay_over_a_damaged_store_is_one_clear_error(tmp_path, how, caplog):
    path = make_store(tmp_path / "evidence.sqlite")
    damage_file(path, how)
    with pytest.raises(SearchError) as err:
        open_backend(SearchConfig(backend="replay", store=path))
    assert str(path) in one_line(err.value) and REBUILD in str(err.value)
    no_tracebacks(caplog)


@pytest.mark.parametrize("how", ["random", "half"])
def test_entrez_over_a_damaged_store_is_one_clear_error(tmp_path, how, monkeypatch, caplog):
    path = make_store(tmp_path / "evidence.sqlite")
    damage_file(path, how)
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
        with pytest.raises(SearchError) as err:
            search_tool(SearchConfig(backend="entrez", store=path)).run("aspirin")
        assert server.requests == []  # refused before asking NCBI anything
    assert str(path) in one_line(err.value) and "damaged" in str(err.value)
    no_tracebacks(caplog)


def test_damage_found_mid_search_is_an_error_text_without_a_traceback(tmp_path, monkeypatch, caplog):
    path = make_store(tmp_path / "evidence.sqlite")
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)
        tool = search_tool(SearchConfig(backend="entrez", store=path))  # opened while still intact
        damage_file(path, "random")
        out = tool.run("aspirin 3")
    assert out.results == [] and "damaged" in out.error and str(path) in out.error
    no_tracebacks(caplog)


def test_evidence_build_with_a_damaged_store_says_so_and_keeps_the_file(evidence):
    cfg, _ = evidence
    make_store(cfg.store)
    damage_file(cfg.store, "random")
    before = cfg.store.read_bytes()
    with pytest.raises(SearchError, match="damaged"):
        build_evidence(cfg)
    assert cfg.store.read_bytes() == before  # recorded evidence is never thrown away for the user


# --- the index directory -----------------------------------------------------------------------------


def segment_files(index_dir: Path, ext: str) -> list[Path]:
    found = sorted(p for p in index_dir.iterdir() if p.suffix == ext and len(p.stem) == 32)
    assert found, f"no {ext} file in {index_dir}"
    return found


def rewrite(path: Path, data: bytes) -> None:
    """Replace the file's contents as a new file (a new inode). Rewriting it in place would truncate a file
    that tantivy may still have memory-mapped in this process (the fixture's build): touching those pages
    then kills the whole test run with SIGBUS, which is not the damage under test."""
    tmp = path.with_name(path.name + ".damaged")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def damage_index(index_dir: Path, how: str) -> None:
    if how == "missing-meta":
        (index_dir / "meta.json").unlink()
    elif how == "garbled-meta":
        rewrite(index_dir / "meta.json", b"\x00\xff garbage")
    elif how == "garbled-biocheck-meta":
        rewrite(index_dir / "biocheck_index.json", b"{\"format\": \xff")
    elif how == "missing-segment-file":
        segment_files(index_dir, ".term")[0].unlink()
    elif how.startswith("missing:"):  # a file tantivy opens only when a search needs it (positions: phrases)
        segment_files(index_dir, how.split(":")[1])[0].unlink()
    elif how.startswith(("truncated", "garbled")):
        kind, ext = how.split(":")
        for f in segment_files(index_dir, ext):
            data = bytearray(f.read_bytes())
            if kind == "truncated":
                rewrite(f, bytes(data[: len(data) // 2]))
            else:  # bytes in the middle overwritten, the file's footer intact
                rnd = random.Random(0)
                for i in range(len(data) // 4, len(data) // 2):
                    data[i] = rnd.randrange(256)
                rewrite(f, bytes(data))
    else:
        raise ValueError(how)


INDEX_DAMAGE = ["missing-meta", "garbled-meta", "garbled-biocheck-meta", "missing-segment-file", "missing:.pos",
                "missing:.fieldnorm", "truncated:.idx",
                "truncated:.store", "garbled:.idx", "garbled:.store", "garbled:.term", "garbled:.pos",
                "garbled:.fieldnorm", "garbled:.fast"]


@pytest.fixture
def index_dir(tmp_path) -> Path:
    path = tmp_path / "index"
    papers = [Article(pmid=str(1000 + i), title=f"Aspirin trial {i}", abstract="methylation of DNA " * (1 + i % 7),
                      mesh=["Aspirin"] if i % 2 else [], source="t") for i in range(400)]
    LocalIndex.build(papers, path=path)
    return path


@pytest.mark.parametrize("how", INDEX_DAMAGE)
def test_a_damaged_index_is_one_clear_error(index_dir, how, caplog):
    damage_index(index_dir, how)
    with pytest.raises(SearchError) as err:
        open_backend(SearchConfig(index_dir=index_dir)).search("aspirin OR methylat*", n=50)
    text = one_line(err.value)
    assert str(index_dir) in text and REBUILD in text
    no_tracebacks(caplog)


@pytest.mark.parametrize("ext", [".pos", ".fast", ".store"])
def test_a_missing_index_file_is_named_when_the_index_opens(index_dir, ext):
    victim = segment_files(index_dir, ext)[0].name
    damage_index(index_dir, f"missing:{ext}")
    with pytest.raises(SearchError) as err:
        LocalIndex.open(index_dir, verify=False)  # found without reading a byte of the segments
    assert victim in one_line(err.value) and REBUILD in str(err.value)


def test_a_damaged_index_is_still_a_value_error_for_older_callers(index_dir):
    damage_index(index_dir, "garbled:.idx")
    with pytest.raises(ValueError, match="rebuild"):
        LocalIndex.open(index_dir)


def test_a_damaged_index_is_replaced_by_a_rebuild(index_dir):
    (index_dir / "biocheck_index.json").unlink()  # not even our marker file is left
    damage_index(index_dir, "missing-segment-file")
    LocalIndex.build([Article(pmid="1", title="Zinc", abstract="Zinc.", source="t")], path=index_dir)
    assert len(LocalIndex.open(index_dir)) == 1


# --- `evidence stats` --------------------------------------------------------------------------------


def test_evidence_stats_reports_missing_parts_and_refuses_damaged_ones(evidence):
    from biocheck.evidence.build import evidence_stats

    cfg, _ = evidence
    stats = evidence_stats(cfg.index_dir, cfg.store)
    assert stats["index"]["docs"] > 0 and "queries" in stats["store"]
    missing = evidence_stats(cfg.index_dir.with_name("none"), cfg.store.with_name("none.sqlite"))
    assert "error" in missing["index"] and "error" in missing["store"]
    assert not cfg.store.with_name("none.sqlite").exists()  # looking does not create a store
    damage_file(cfg.store, "random")
    with pytest.raises((SearchError, InputError)) as err:
        evidence_stats(cfg.index_dir, cfg.store)
    assert str(cfg.store) in one_line(err.value) and REBUILD in str(err.value)


def test_evidence_stats_refuses_a_damaged_index(evidence):
    from biocheck.evidence.build import evidence_stats

    cfg, _ = evidence
    damage_index(cfg.index_dir, "garbled:.store")
    with pytest.raises((SearchError, InputError)) as err:
        evidence_stats(cfg.index_dir, cfg.store)
    assert str(cfg.index_dir) in one_line(err.value) and REBUILD in str(err.value)


# --- the CLI -------------------------------------------------------------------------------------------


def cli_fails_in_one_line(args: list[str], *needles: str) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code != 0 and isinstance(r.exception, SystemExit), repr(r.exception)  # handled, not a crash
    assert len(r.output.strip().splitlines()) == 1, r.output
    for needle in needles:
        assert needle in r.output.replace("\n", ""), r.output


@pytest.mark.parametrize("backend", ["local", "replay", "entrez"])
def test_cli_search_over_damaged_evidence_is_one_line(evidence_workdir, backend, monkeypatch):
    index_dir, store = evidence_workdir / "index", evidence_workdir / "ev.sqlite"
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", "http://127.0.0.1:9/entrez/eutils/")  # never reached
    damage_index(index_dir, "garbled:.term")
    damage_file(store, "half")
    cli_fails_in_one_line(["search", "aspirin", "--backend", backend], "damaged")


@pytest.mark.parametrize("part", ["store", "index"])
def test_cli_evidence_stats_over_damaged_evidence_is_one_line(evidence_workdir, part):
    if part == "store":
        damage_file(evidence_workdir / "ev.sqlite", "random")
    else:
        damage_index(evidence_workdir / "index", "garbled:.idx")
    cli_fails_in_one_line(["evidence", "stats"], REBUILD)


# --- a killed `evidence build` -------------------------------------------------------------------------


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def staging(index_dir: Path, pid: int) -> Path:
    folder = index_dir.with_name(f".{index_dir.name}.building-{pid}")
    folder.mkdir()
    (folder / "half-written.idx").write_bytes(b"x" * 1000)
    return folder


PAPER = [Article(pmid="1", title="Zinc", abstract="Zinc.", source="t")]


def test_a_rebuild_removes_what_a_dead_build_left(tmp_path):
    index_dir = tmp_path / "index"
    leftover = staging(index_dir, dead_pid())
    LocalIndex.build(PAPER, path=index_dir)
    assert not leftover.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_running_builds_folder_is_left_alone(tmp_path):
    index_dir = tmp_path / "index"
    alive = staging(index_dir, os.getppid())  # a live process, as a concurrent build would be
    LocalIndex.build(PAPER, path=index_dir)
    assert alive.exists() and (alive / "half-written.idx").exists()


def _build_forever(index_dir: str, ready: str) -> None:
    def papers():
        yield Article(pmid="1", title="Zinc", abstract="Zinc.", source="t")
        Path(ready).write_text("staging exists")
        time.sleep(600)  # killed here, mid-build

    LocalIndex.build(papers(), path=Path(index_dir))


def test_a_killed_build_is_cleaned_up_by_the_next_one_not_by_a_concurrent_one(tmp_path):
    index_dir, ready = tmp_path / "index", tmp_path / "ready"
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_build_forever, args=(str(index_dir), str(ready)))
    child.start()
    try:
        for _ in range(6000):  # wait (up to 5 minutes on busy cores) for the child to be mid-build
            if ready.exists() or not child.is_alive():
                break
            time.sleep(0.05)
        assert ready.exists(), "the child build never started"
        running = index_dir.with_name(f".index.building-{child.pid}")
        assert running.is_dir()
        LocalIndex.build(PAPER, path=index_dir)  # a concurrent build: the running one's folder stays
        assert running.is_dir()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert running.is_dir()  # killed: its folder is left behind ...
    LocalIndex.build(PAPER, path=index_dir)  # ... until the next build
    assert not running.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "ready"]
    assert json.loads((index_dir / "biocheck_index.json").read_text())["built_docs"] == 1


def test_a_stale_folder_whose_pid_was_reused_is_removed_when_its_lock_is_free(tmp_path, caplog):
    index_dir = tmp_path / "index"
    reused = staging(index_dir, os.getppid())  # pid alive again (reused), but the lock says no build holds it
    reused.with_name(reused.name + ".lock").write_text("")
    with caplog.at_level(logging.INFO):
        LocalIndex.build(PAPER, path=index_dir)
    assert not reused.exists() and not reused.with_name(reused.name + ".lock").exists()


@pytest.mark.parametrize("how", ["garbled:.idx", "garbled:.store", "garbled:.term"])
def test_without_the_check_damage_found_mid_search_is_still_a_search_error(index_dir, how, caplog):
    damage_index(index_dir, how)
    with pytest.raises(SearchError) as err:  # a tantivy error or a Rust panic, never a crash
        LocalIndex.open(index_dir, verify=False).search("aspirin OR methylat*", n=400)
    assert str(index_dir) in one_line(err.value) and REBUILD in str(err.value)
    no_tracebacks(caplog)
