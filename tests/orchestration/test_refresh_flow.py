"""The Prefect flow `biocheck-evidence-refresh`: shards on a 2-worker Dask LocalCluster give the serial result.

Slow (about a minute here): Prefect's temporary server takes ~20 s to start and each Dask worker process
imports biocheck and Prefect before its first shard.
"""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from biocheck.evidence.refresh import RefreshConfig, refresh
from biocheck.evidence.search import SearchConfig
from biocheck.evidence.store import EvidenceStore
from biocheck.orchestration import dvc
from tests.helpers.fake_eutils import FakeEutils
from tests.helpers.paths import REPO
from tests.helpers.refresh import (
    QUERIES,
    N,
    publish_and_retract,
    record,
    refresh_env,  # noqa: F401 (autouse: no NCBI settings of the developer, no tracking)
)

MORE = ["aspirin cancer", "vitamin influenza", "oxygen", "diabetes"]  # nine queries: uneven shards


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


def copy_store(src: Path, dest: Path) -> None:
    with sqlite3.connect(src) as a, sqlite3.connect(dest) as b:
        a.backup(b)  # WAL included


def write_params(tmp_path: Path, store: Path, **orchestrate) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"]["store"] = str(store)
    params["search"]["max_results"] = N
    params["orchestrate"].update(dask_address=None, **orchestrate)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def shard_runs() -> int:
    """Completed `refresh-shard` task runs recorded by the (test) Prefect server."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import TaskRunFilter, TaskRunFilterName

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(task_run_filter=TaskRunFilter(name=TaskRunFilterName(like_="refresh-shard")))
    return sum(r.name.startswith("refresh-shard-") and r.state is not None and r.state.is_completed() for r in runs)


@pytest.mark.slow
def test_the_sharded_flow_gives_the_serial_result(prefect_harness, tmp_path, monkeypatch):
    import flows.refresh
    from flows.refresh import refresh_flow

    monkeypatch.delenv("BIOCHECK_DASK_ADDRESS", raising=False)
    runners = []  # the task runner the flow asked for, from orchestrate: in params
    real = flows.refresh.task_runner
    monkeypatch.setattr(flows.refresh, "task_runner", lambda cfg: runners.append(real(cfg)) or runners[-1])
    queries = QUERIES + MORE
    with FakeEutils() as server:
        monkeypatch.setenv("BIOCHECK_EUTILS_URL", server.url)  # the Dask workers inherit the environment
        record(tmp_path / "serial.sqlite", queries)
        copy_store(tmp_path / "serial.sqlite", tmp_path / "flow.sqlite")
        publish_and_retract(server)

        serial = refresh(RefreshConfig(search=SearchConfig(backend="entrez", store=tmp_path / "serial.sqlite",
                                                           max_results=N),
                                       report_path=tmp_path / "serial.json", metrics_path=None, progress=False))
        searched = len(server.requests_to("esearch"))
        monkeypatch.chdir(tmp_path)
        flowed = refresh_flow(str(write_params(tmp_path, tmp_path / "flow.sqlite", shards=4, dask_workers=2)))
        flow_terms = [r.params["term"] for r in server.requests_to("esearch")[searched:]]

    assert serial["summary"]["changed"] >= 2  # there was something to find
    assert flowed["queries"] == serial["queries"] and flowed["summary"] == serial["summary"]
    assert sorted(flow_terms) == sorted(queries)  # each query refreshed once, by some shard
    assert shard_runs() == 4  # orchestrate.shards tasks ...
    [runner] = runners  # ... on a Dask LocalCluster of orchestrate.dask_workers processes
    assert type(runner).__name__ == "DaskTaskRunner" and runner.cluster_kwargs["n_workers"] == 2
    # the flow's merge task wrote the report and the metrics, once, whole
    assert json.loads((tmp_path / "reports" / "evidence_refresh.json").read_text())["queries"] == serial["queries"]
    assert json.loads((tmp_path / "metrics" / "evidence_refresh.json").read_text()) == serial["summary"]
    # both stores now hold the same answers
    with EvidenceStore(tmp_path / "serial.sqlite") as a, EvidenceStore(tmp_path / "flow.sqlite") as b:
        for q in queries:
            assert [x.pmid for x in a.get(q, "entrez").articles] == [x.pmid for x in b.get(q, "entrez").articles]


@pytest.mark.slow
def test_a_scheduled_run_with_nothing_recorded_completes_having_refreshed_nothing(prefect_harness, evidence, tmp_path):
    """The nightly deployment on a profile that searches the local index: no PubMed query in the store, so the
    run completes, says why, and writes no report (the script by hand: one error line, below)."""
    from flows.refresh import refresh_flow

    cfg, _ = evidence  # a store with articles but no PubMed queries
    params = write_params(tmp_path, cfg.store)
    state = refresh_flow(str(params), return_state=True)
    assert state.is_completed(), state.message
    assert state.result() == {"summary": {"queries": 0, "refreshed": 0, "changed": 0, "added": 0, "removed": 0,
                                          "new_papers": 0, "errors": 0}, "queries": []}
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # run logs reach the server in batches: send them now
    with get_client(sync_client=True) as client:  # the run's own log, as the Prefect UI shows it
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[state.state_details.flow_run_id])))
    assert any(log.message.startswith("nothing to refresh: the evidence store") and
               log.message.endswith("this run refreshes nothing") for log in logs), [log.message for log in logs]
    assert not (tmp_path / "reports").exists() and not (tmp_path / "metrics").exists()


def test_standalone_script_fails_in_one_line(evidence, tmp_path):
    cfg, _ = evidence  # a store with articles but no PubMed queries
    params = write_params(tmp_path, cfg.store)
    r = subprocess.run([sys.executable, str(REPO / "flows" / "refresh.py"), str(params)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: nothing to refresh"), r.stderr
    assert "Traceback" not in r.stderr + r.stdout


# --- the refreshed store committed to DVC (the flow's last task, as a function: no Prefect, no NCBI) ------

STORE = "data/evidence/evidence.sqlite"  # params.yaml's evidence.store, the evidence stage's `persist` output
BUILD = ("import pathlib, sqlite3\npathlib.Path('data/evidence').mkdir(parents=True, exist_ok=True)\n"
         f"db = sqlite3.connect('{STORE}')\ndb.execute('PRAGMA journal_mode = WAL')\n"
         "db.execute('CREATE TABLE IF NOT EXISTS queries (q TEXT)')\ndb.execute(\"INSERT INTO queries VALUES ('built')\")\n"
         "db.commit()\ndb.close()\n")


@pytest.fixture
def dvc_project(tmp_path) -> Path:
    """A DVC project whose `evidence` stage built the store (a small SQLite file), recorded in dvc.lock."""
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".dvc").mkdir()
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / "build.py").write_text(BUILD)
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"evidence": {
        "cmd": "python build.py", "deps": ["build.py"], "outs": [{STORE: {"persist": True}}]}}}))
    (root / "params.yaml").write_text((REPO / "params.yaml").read_text())
    assert dvc.repro("evidence", root).ran
    return root.resolve()


def _cached(root: Path) -> list[str]:
    """The rows of the store as DVC's cache holds it (the copy a `dvc push` uploads)."""
    [out] = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["evidence"]["outs"]
    cached = root / ".dvc" / "cache" / "files" / "md5" / out["md5"][:2] / out["md5"][2:]
    with sqlite3.connect(f"file:{cached}?mode=ro", uri=True) as db:
        return [q for (q,) in db.execute("SELECT q FROM queries")]


def test_the_refreshed_store_is_committed_when_the_params_folder_is_a_dvc_project(dvc_project):
    from flows.refresh import commit_task

    store = dvc_project / STORE
    writer = sqlite3.connect(store)  # a refresh's answer, still in the write-ahead log (a connection stays open)
    writer.execute("INSERT INTO queries VALUES ('refreshed')")
    writer.commit()
    try:
        assert commit_task.fn(str(dvc_project / "params.yaml"), str(store)) is True
    finally:
        writer.close()
    assert dvc.status(dvc_project) == {}  # clean: the pipeline's next `dvc repro` reruns nothing
    assert _cached(dvc_project) == ["built", "refreshed"]  # what `dvc push` carries


def test_no_commit_outside_a_dvc_project_or_when_the_stage_has_other_changes(dvc_project, tmp_path, caplog):
    from flows.refresh import commit_task

    elsewhere = tmp_path / "plain"
    elsewhere.mkdir()
    shutil.copy2(dvc_project / STORE, elsewhere / "ev.sqlite")
    with caplog.at_level(logging.INFO, logger="biocheck.flows"):
        assert commit_task.fn(str(elsewhere / "params.yaml"), str(elsewhere / "ev.sqlite")) is False
        assert "is not a DVC project: nothing to commit" in caplog.text

        assert commit_task.fn(str(dvc_project / "params.yaml"), str(dvc_project / STORE)) is False  # unchanged
        assert "is unchanged" in caplog.text

        lock = (dvc_project / "dvc.lock").read_text()
        with sqlite3.connect(dvc_project / STORE) as db:
            db.execute("INSERT INTO queries VALUES ('refreshed')")
        (dvc_project / "build.py").write_text(BUILD + "# a new way to build the store\n")
        assert commit_task.fn(str(dvc_project / "params.yaml"), str(dvc_project / STORE)) is False
        assert "not committing the refresh; `dvc repro evidence` records both" in caplog.text
    assert (dvc_project / "dvc.lock").read_text() == lock  # the stage is still due to run
    assert "changed deps" in str(dvc.status(dvc_project)["evidence"])
