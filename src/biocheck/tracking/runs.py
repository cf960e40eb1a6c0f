"""Runs: a stage's run in its purpose's experiment (nested under its pipeline's parent run, or in an outer run),
the pipeline parent runs, and how to find a run again (run links, UI urls, a Prefect flow run's runs)."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from biocheck.secrets import redact
from biocheck.tracking.artifacts import use_project_artifacts
from biocheck.tracking.config import DEFAULT_UI, PARENT_NAME_ENV, STAGES, UI_URL_ENV
from biocheck.tracking.logs import flatten, mlflow_key
from biocheck.tracking.provenance import common_tags, pipeline_id
from biocheck.tracking.store import (
    STORE,
    Unavailable,
    current,
    enabled,
    ensure_experiment,
    experiment,
    guard,
    http_defaults,
    quiet_artifact_progress,
    tracking_uri,
)

log = logging.getLogger(__name__)


def _start(stage: str, params: Mapping[str, Any] | None, tags: Mapping[str, Any] | None, run_name: str | None,
           parent: str | None, pipeline_parent_run: bool = True) -> tuple[Any, str | None]:
    """(the active run, the pipeline parent's id when this run nests under one). A run whose `parent` is the
    active run (an evaluation's `eval <system> <dataset>` inside `evaluate`) starts nested in it."""
    uri = tracking_uri()
    why = STORE.problem(uri)
    if why:
        raise Unavailable(why)
    http_defaults()
    quiet_artifact_progress()
    import mlflow

    mlflow.set_tracking_uri(uri)
    use_project_artifacts()
    exp_id = mlflow.set_experiment(experiment_id=ensure_experiment(experiment(stage),
                                                                      STAGES[stage.split('@')[0]])).experiment_id
    all_tags = {**common_tags(stage), **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
    pipeline_parent, pid = None, pipeline_id()
    if pid is not None:
        all_tags["pipeline_id"] = pid
        if parent is None and pipeline_parent_run:
            parent = pipeline_parent = _pipeline_parent(exp_id, pid, all_tags)
    if parent is not None:
        all_tags["mlflow.parentRunId"] = parent
    name, clean = redact(run_name or stage), {k: redact(v) for k, v in all_tags.items()}
    outer = mlflow.active_run()
    nested = outer is not None and parent == outer.info.run_id
    active = mlflow.start_run(experiment_id=exp_id, run_name=name, tags=clean, nested=nested)
    try:
        if params:  # redact before the cut: half a key would no longer match
            mlflow.log_params({mlflow_key(k): redact(v)[:500] for k, v in flatten(params).items()})
    except Exception:
        mlflow.end_run("FAILED")
        raise
    return active, pipeline_parent


@contextlib.contextmanager
def run(stage: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None,
        run_name: str | None = None, parent: str | None = None, nest_in_pipeline: bool = True) -> Iterator[Any]:
    """An MLflow run of `stage` (a DVC stage name such as `train@eg_grpo`, or `check`) in its purpose's
    experiment, named `run_name` (default: the stage), with the common tags plus `tags`. It nests under
    `parent` (a run id), else under this pipeline's parent run when the stage runs in one (unless
    `nest_in_pipeline` is False: then it only carries the pipeline's tag); a `parent` that is the active run
    (`with run(...) as outer`) nests this run inside it. The run is RUNNING while the body runs and ends
    FINISHED, FAILED when the body raises, KILLED on Ctrl-C. Yields the run, or None when tracking is off or
    fails (then one warning line; the body runs either way)."""
    experiment(stage)  # an unknown stage is a bug to fix, not a tracking failure to warn about
    if not enabled():
        yield None
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline machines: no phone-home attempts
    active = pipeline_parent = None
    try:
        active, pipeline_parent = _start(stage, params, tags, run_name, parent, nest_in_pipeline)
    except Exception as e:  # noqa: BLE001 (a tracking failure must never cost the stage's results)
        STORE.give_up(f"starting the {stage} run", e)
    status = "FINISHED"
    try:
        yield active
    except BaseException as e:
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        raise
    finally:
        if active is not None:
            with guard(f"ending the {stage} run"):
                import mlflow

                mlflow.end_run(status)
                if pipeline_parent is not None:  # the pipeline's run ends with its latest stage, as it ended
                    mlflow.MlflowClient().set_terminated(pipeline_parent, status)


def _pipeline_parent(exp_id: str, pid: str, tags: Mapping[str, str]) -> str:
    """The id of pipeline `pid`'s parent run in this experiment, created by the first stage that needs it.

    Two stages starting at once may both create one: the earliest wins, the other is deleted."""
    from mlflow import MlflowClient

    client = MlflowClient()
    query = f"tags.pipeline_id = '{pid}' and tags.kind = 'pipeline'"

    def parents(experiment_ids: list[str]) -> list[Any]:
        runs = client.search_runs(experiment_ids, filter_string=query, max_results=50)
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    found = parents([exp_id])
    if not found:
        other = [e.experiment_id for name in current().config.experiments.values()
                 if (e := client.get_experiment_by_name(name)) is not None and e.experiment_id != exp_id]
        earlier = parents(other) if other else []  # the same pipeline's parent elsewhere: the same name
        name = (earlier[0].info.run_name if earlier else os.environ.get(PARENT_NAME_ENV)
                or f"pipeline {datetime.datetime.now():%Y-%m-%d %H:%M}")
        keep = ("profile", "git_commit", "git_dirty", "study", "prefect_flow_run")
        mine = client.create_run(exp_id, run_name=name, tags={
            **{k: redact(tags[k]) for k in keep if k in tags}, "pipeline_id": pid, "kind": "pipeline"})
        found = parents([exp_id])
        for r in found[1:]:
            if r.info.run_id == mine.info.run_id:
                client.delete_run(mine.info.run_id)
    parent = found[0].info.run_id
    client.update_run(parent, status="RUNNING")
    return parent


def version_model_id(version: Any) -> str | None:
    """The logged model (`m-...`) a registry version was created from: its `model_id`, else its source
    `models:/m-...` (MLflow's SQL registry keeps only the source); None for a version registered from a folder."""
    source = str(getattr(version, "source", "") or "")
    found = getattr(version, "model_id", None) or (source.removeprefix("models:/") if source.startswith("models:/m-")
                                                     else None)
    return found if found and "/" not in found else None


def run_link(run: Any) -> dict[str, str]:
    """How to find `run` again: `runs:/<id>` (MLflow APIs) and the path in `mlflow ui`."""
    return {"run_uri": f"runs:/{run.info.run_id}",
            "run_link": f"#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"}


def ui_url(experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI: on the tracking server when the URI is one, else where `mlflow ui`
    serves the SQLite store by default ($BIOCHECK_MLFLOW_UI to say another address)."""
    uri = tracking_uri()
    base = uri if uri.lower().startswith(("http://", "https://")) else os.environ.get(UI_URL_ENV) or DEFAULT_UI
    parts = urllib.parse.urlsplit(base.rstrip("/"))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host  # never a user or password in a link
    return redact(f"{parts.scheme}://{netloc}{parts.path}/#/experiments/{experiment_id}/runs/{run_id}")


def flow_run_links(flow_run_id: str) -> list[dict[str, str]]:
    """The MLflow runs a Prefect flow run logged (tag `prefect_flow_run`), the top ones only (a run whose
    parent is also listed is left out): [{experiment, name, run_uri, url}], oldest first. Empty when tracking
    is off or the store cannot be read (never raises: a link is not worth failing a flow for)."""
    if not enabled() or STORE.problem(tracking_uri()):
        return []
    try:
        import mlflow

        mlflow.set_tracking_uri(tracking_uri())
        client = mlflow.MlflowClient()
        names = {e.experiment_id: e.name for e in client.search_experiments()}
        value = str(flow_run_id).replace("'", "")
        runs = client.search_runs(list(names), filter_string=f"tags.prefect_flow_run = '{value}'",
                                  order_by=["attributes.start_time ASC"], max_results=500)
    except Exception as e:  # noqa: BLE001
        log.warning("MLflow runs of flow run %s not found: %s", flow_run_id, redact(str(e)))
        return []
    ids = {r.info.run_id for r in runs}
    return [{"experiment": names.get(r.info.experiment_id, r.info.experiment_id), "name": r.info.run_name or "",
             "run_uri": f"runs:/{r.info.run_id}", "url": ui_url(r.info.experiment_id, r.info.run_id)}
            for r in runs if r.data.tags.get("mlflow.parentRunId") not in ids]

