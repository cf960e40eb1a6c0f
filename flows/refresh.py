"""Prefect flow `biocheck-evidence-refresh`: `biocheck evidence refresh` in shards on Dask.

The recorded PubMed queries are split into `orchestrate.shards` contiguous shards; a sub-flow maps one
task per shard over the Dask task runner that `orchestrate:` names (a LocalCluster of
`orchestrate.dask_workers` processes by default, an existing cluster by address); one task then merges
the shards' results in order and writes the report and metrics and logs them to MLflow, exactly as the
serial command does. The report equals a serial run's: each query is refreshed once, and the store
(SQLite, WAL) takes writes from many processes.

NCBI's rate limit holds across the workers of one machine (they share the limiter's flock'd file). On a
cluster of several hosts each host has its own limiter and SQLite must not sit on a network file
system: refresh on one host (the default LocalCluster), or give each host its own NCBI_API_KEY and
store.

A store with no PubMed query to re-run (a profile that searches the local index, search.backend: local) makes
the flow run complete with nothing refreshed and a warning saying why: the nightly schedule has nothing to do
that night, which is not a failure. (The standalone script, asked by hand, says so in one error line.)

After a successful refresh the store is committed to DVC (`dvc commit evidence`) when the params' folder is a
DVC project, so the scheduled pipeline's `dvc push` carries it. The entrypoint of the
`evidence-refresh-nightly` deployment; standalone: `python flows/refresh.py [params.yaml]` (a failure prints
one line and exits 1).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
from pathlib import Path

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from biocheck import tracking
from biocheck.evaluate.shards import split
from biocheck.evidence.refresh import (
    NothingToRefresh,
    QueryChange,
    RefreshConfig,
    recorded_queries,
    refresh_queries,
    summarize,
)
from biocheck.orchestration import dvc, entry
from biocheck.orchestration.artifacts import publish_summary
from biocheck.orchestration.dask import task_runner
from biocheck.pipeline import orchestrate_config, refresh_stage
from biocheck.wiring import params_of, refresh_config

STAGE = "evidence"  # the DVC stage whose `persist` output is the evidence store (dvc.yaml)


# A refresh must always ask PubMed: no task reuses an earlier result.
@task(name="refresh-queries", cache_policy=NO_CACHE)
def queries_task(params: str, limit: int | None) -> list[str]:
    """The recorded PubMed queries; none (and a warning) when the store holds none."""
    try:
        return recorded_queries(refresh_config(params_of(params), limit=limit))
    except NothingToRefresh as e:
        entry.run_logger().warning("%s; this run refreshes nothing", e)
        return []


@task(name="refresh-shard", cache_policy=NO_CACHE)
@entry.quiet_failures
def shard_task(cfg: RefreshConfig, queries: list[str]) -> list[QueryChange]:
    # Runs on a Dask worker: its own E-utilities client (the machine-wide rate limit) and store connection.
    return refresh_queries(cfg, queries)


@task(name="refresh-report", cache_policy=NO_CACHE)
def report_task(params: str, changes: list[QueryChange], limit: int | None) -> dict:
    return refresh_stage(params, progress=False, changes=changes, limit=limit)


@task(name="dvc-commit-evidence", cache_policy=NO_CACHE)
def commit_task(params: str, store: str) -> bool:
    """Record the refreshed store as the evidence stage's output (dvc.lock and the DVC cache) when the params'
    folder is a DVC project, so `dvc status` stays clean and a `dvc push` carries it; True if committed.

    Only when the store is all that changed in that stage: with changed inputs, committing would mark the
    stage done without running it, so that is left to `dvc repro evidence` (a warning says so).
    """
    logger = entry.run_logger()
    root, path = Path(params).resolve().parent, Path(store).resolve()
    try:
        dvc.project(root)
    except dvc.DvcError:
        logger.info("%s is not a DVC project: nothing to commit to DVC", root)
        return False
    # DVC hashes the one file: fold SQLite's write-ahead log into it (mode=rw: never create a store)
    with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=rw", uri=True)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    changed = dvc.status(root, [STAGE]).get(STAGE, [])
    if changed == [{"changed outs": {os.path.relpath(path, root): "modified"}}]:
        dvc.commit(root, STAGE, logger=logger)
        return True
    if changed:
        logger.warning("DVC stage %s in %s is not up to date apart from the store (%s): not committing the "
                       "refresh; `dvc repro %s` records both", STAGE, root, changed, STAGE)
    else:
        logger.info("DVC stage %s in %s is unchanged (the store %s is not its output): nothing to commit",
                    STAGE, root, store)
    return False


@flow(name="biocheck-evidence-refresh-shards")
def shards_flow(cfg: RefreshConfig, parts: list[list[str]]) -> list[list[QueryChange]]:
    """One task per shard, on the task runner the caller gives (`with_options`)."""
    with entry.redacted():  # secrets blanked in this run's log lines and in any error leaving it
        return shard_task.map(unmapped(cfg), parts).result()


@flow(name="biocheck-evidence-refresh", log_prints=True)
def refresh_flow(params: str = "params.yaml", limit: int | None = None) -> dict:
    """Re-run the PubMed queries recorded in the evidence store (the first `limit`) through live E-utilities,
    in shards on Dask, then commit the store to DVC (see commit_task); returns the change report
    (reports/evidence_refresh.json)."""
    # secrets blanked in this run's log lines and in any error leaving it; its MLflow run tagged with this run
    with entry.redacted(), tracking.in_flow_run(flow_run.id):
        p = params_of(params)
        cfg = refresh_config(p, progress=False)
        cfg.search.store = cfg.search.store.resolve()  # a worker started in another folder opens the same file
        orchestrate = orchestrate_config(p)
        queries = queries_task(params, limit)
        if not queries:  # nothing recorded: no report (an earlier one stays), no DVC commit
            _publish(summarize([]), "No PubMed query is recorded in the evidence store: nothing to refresh.")
            return {"summary": summarize([]), "queries": []}
        parts = split(queries, orchestrate.shards)
        # The runner comes from params, so it is set at call time (a deployment runs this flow as it is).
        results = shards_flow.with_options(task_runner=task_runner(orchestrate))(cfg, parts)
        report = report_task(params, [change for part in results for change in part], limit)
        committed = commit_task(params, str(cfg.search.store))
        _publish(report["summary"], f"Report: `{report.get('report_path')}`; the store "
                                    f"{'committed to DVC' if committed else 'not committed to DVC (see the log)'}.")
        return report


def _publish(summary: dict, note: str) -> None:
    """The run's summary artifact: the refresh's counts and its MLflow run."""
    publish_summary("evidence-refresh-summary", "Evidence refresh",
                    [note, "", *(f"- {k.replace('_', ' ')}: {v}" for k, v in summary.items())])


def main(argv: list[str]) -> int:
    params = argv[1] if len(argv) > 1 else "params.yaml"

    def body() -> None:
        recorded_queries(refresh_config(params_of(params), limit=1))  # fail in one line before starting Prefect
        s = refresh_flow(params)["summary"]
        print(f"refreshed {s['refreshed']} of {s['queries']} queries: {s['changed']} changed, {s['errors']} failed",
              file=sys.stderr)

    return entry.run(body, interrupted="interrupted; the queries refreshed so far are kept in the store, no "
                                       "report was written")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
