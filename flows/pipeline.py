"""Prefect flow `biocheck-pipeline`: every stage of dvc.yaml, in DVC's order, with the DVC remote around it.

dvc pull (orchestrate.dvc_remote) -> data (fetch, prepare, validate) -> evidence -> train (model, judges, warm
start, reward audit, train and select for each reward variant) -> evaluate (metric table artifact) -> dvc push,
only after success. The areas and their stages are read from dvc.yaml through DVC's own graph
(biocheck/orchestration/plan.py), so a stage added there runs with no flow edited. Each step is a sub-flow or
task of flows/tasks.py running its DVC stage, so DVC skips what is up to date.
Training runs in-process, or, with orchestrate.train_deployment set, as that Prefect deployment (the `gpu`
work pool), waited for. `python flows/pipeline.py [params.yaml]` runs it without a Prefect server
(a temporary local one), or on the server PREFECT_API_URL names. Its stages log to MLflow as one pipeline
run: BIOCHECK_PIPELINE_ID (this flow run's id) reaches every stage, which nests its run under that pipeline's
parent run (biocheck.tracking).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402
from prefect.exceptions import ObjectNotFound  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from biocheck import tracking  # noqa: E402
from biocheck.io import InputError  # noqa: E402
from biocheck.orchestration import dvc, entry, plan  # noqa: E402
from biocheck.orchestration.artifacts import publish_summary, scores_lines, stage_lines  # noqa: E402
from biocheck.pipeline import evaluate_config, orchestrate_config  # noqa: E402
from biocheck.wiring import params_of  # noqa: E402
from flows.data import data_flow  # noqa: E402
from flows.evidence import evidence_flow  # noqa: E402
from flows.tasks import main, pull_task, push_task, run_stages  # noqa: E402
from flows.train import train_flow  # noqa: E402


@flow(name="biocheck-pipeline", log_prints=True)
def pipeline_flow(params: str = "params.yaml", root: str = ".", pull: bool = True, push: bool = True) -> dict:
    """Run every stage that is not up to date, in dvc.yaml's order; pull outputs from the DVC remote first
    and push them after success (`pull`/`push`, when orchestrate.dvc_remote is set)."""
    # secrets blanked in this run's log lines and in any error leaving it; the stages' MLflow runs nested
    with (entry.redacted(), tracking.in_pipeline(str(flow_run.id or uuid.uuid4())),  # (no flow run: called as a function)
          tracking.in_flow_run(flow_run.id)):
        path = dvc.params_file(root, params)
        root, params = str(path.parent), str(path)
        cfg = orchestrate_config(params_of(path))
        areas = plan.areas(dvc.pipeline(root))  # a dvc.yaml DVC cannot read fails before anything runs
        remote = cfg.dvc_remote
        if remote and (pull or push):
            dvc.check_remote(root, remote)  # a missing remote fails now, not after hours of training
        out: dict = {}
        if remote and pull:
            out["pull"] = pull_task(root, remote)
        out["data"] = data_flow(params=params, root=root)
        out["evidence"] = evidence_flow(params=params, root=root)
        out["train"] = train_step(params, root, cfg.train_deployment, areas["train"])
        out["evaluate"] = run_stages(areas["evaluate"], root)
        if remote and push:
            push_task(root, remote)
            out["push"] = remote
        _publish(out, path)
        return out


def _publish(out: dict, params: Path) -> None:
    """The run's summary artifact: each stage ran or up to date, the evaluation's headline, the MLflow runs."""
    ran = {k: v for area in ("data", "evidence", "train", "evaluate") for k, v in (out.get(area) or {}).items()}
    metrics = params.parent / evaluate_config(params_of(params)).metrics_path
    scores = scores_lines(json.loads(metrics.read_text())) if metrics.is_file() else []
    publish_summary("pipeline-summary", "Pipeline", [*stage_lines(ran), "", *scores])


def train_step(params: str, root: str, deployment: str | None, stages: list[str]) -> dict:
    """The training flow in-process, or as `deployment` (FLOW/DEPLOYMENT) on its work pool, waited for; then
    `stages` (the train area) must be up to date here.

    The deployment's worker must share this project directory: DVC records what it ran in dvc.lock here.
    """
    if deployment is None:
        return train_flow(params=params, root=root)
    try:
        # the deployment's stages nest their MLflow runs under this pipeline's parent runs too
        parameters = {"params": params, "root": root, "pipeline_id": tracking.pipeline_id()}
        run = run_deployment(name=deployment, parameters=parameters, timeout=None)
    except ObjectNotFound:
        raise InputError(f"orchestrate.train_deployment: no Prefect deployment {deployment!r}: create it "
                         "(`prefect deploy` with prefect.yaml) or set orchestrate.train_deployment: null to "
                         "train in-process") from None
    state = run.state
    if state is None or not state.is_completed():
        raise InputError(f"training deployment {deployment} ended "
                         f"{state.name if state else 'without a state'} (flow run {run.id}): "
                         f"{(state.message if state else '') or 'see that run'}; rerun the pipeline to resume")
    stale = dvc.status(root, stages)
    if stale:
        raise InputError(f"training deployment {deployment} completed, but {', '.join(sorted(stale))} are not up "
                         f"to date in {root}: its worker must run in this project directory (a shared file "
                         "system), or set orchestrate.train_deployment: null to train here")
    return {"deployment": deployment, "flow_run": str(run.id), "state": state.name}


if __name__ == "__main__":
    main(pipeline_flow)
