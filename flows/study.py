"""Prefect flow `biocheck-study`: the study's units (study/dvc.yaml), here in sequence or spread over work pools.

Here (orchestrate.study_train_deployment and study_eval_deployment null): each unit is its DVC stage, one after
another, as `biocheck study run` does; DVC skips a finished unit, so a rerun goes on where a killed one stopped.

Spread: with a deployment set, every unit of that kind runs at once as a flow run of that deployment
(`biocheck-study-unit` on the gpu pool for training, the cpu pool for evaluation; prefect.yaml); the pool's
workers and concurrency limits decide how many run together. Each evaluation unit waits for its own training
unit only. The deployment's worker runs the unit's own function (what the stage's command runs) in the project
folder, which it must share with this flow (a shared file system, as for orchestrate.train_deployment); this
flow then records the unit in study/dvc.lock (`dvc commit`), one DVC command at a time: two `dvc repro` cannot run in one
project at once (DVC's lock), a unit's work can. The analysis runs here at the end (`dvc repro ...:analyze`).
A unit DVC already finds up to date is not sent anywhere.

Each unit runs as `dvc repro --single-item`: what the units read (data, index, judges, the shared start) must be
up to date first (the pipeline flow, or `biocheck study run`, which lets DVC bring it up to date).
`python flows/study.py [params.yaml]` runs it without a Prefect server (a temporary local one).
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow, task  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.deployments import run_deployment  # noqa: E402
from prefect.exceptions import ObjectNotFound  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from biocheck import tracking  # noqa: E402
from biocheck.io import InputError  # noqa: E402
from biocheck.orchestration import dvc, entry  # noqa: E402
from biocheck.orchestration.artifacts import publish_summary, stage_lines  # noqa: E402
from biocheck.pipeline import orchestrate_config  # noqa: E402
from biocheck.study.units import AUDIT_STAGE, STUDY_DVC, check_gate, evaluate_unit, stages, study_config, train_unit  # noqa: E402
from biocheck.wiring import params_of  # noqa: E402
from flows.tasks import TIMEOUT_S, main, run_stage  # noqa: E402

_DVC = threading.Lock()  # one DVC command at a time from this flow's threads: DVC locks the project


def _unit(stage: str) -> tuple[str, str | None, int | None]:
    """(kind, variant, seed) of a study stage name: train@eg_grpo-0 -> ("train", "eg_grpo", 0)."""
    name = stage.removeprefix(f"{STUDY_DVC}:")
    kind, _, key = name.partition("@")
    if not key:
        return kind, None, None
    variant, _, seed = key.rpartition("-")
    return kind, variant, int(seed)


def _status(root: str, stage: str) -> dict[str, Any]:
    with _DVC:
        return dvc.status(root, [stage])


@task(name="study-unit", task_run_name="{stage}", cache_policy=NO_CACHE, timeout_seconds=TIMEOUT_S["train"])
def unit_task(stage: str, root: str, deployment: str | None) -> dict[str, Any]:
    """One unit: its DVC stage here, or (deployment) its work there, then recorded in study/dvc.lock here."""
    if deployment is None or not _status(root, stage):
        with _DVC:  # here: up to date (DVC skips it), or a kind no deployment takes
            return run_stage(stage, root)
    try:
        run = run_deployment(name=deployment, parameters={"stage": stage, "root": root}, timeout=None)
    except ObjectNotFound:
        raise InputError(f"no Prefect deployment {deployment!r} (orchestrate.study_*_deployment): create it with "
                         "`prefect deploy --all` (prefect.yaml) or set it to null to run the units here") from None
    state = run.state
    if state is None or not state.is_completed():
        raise InputError(f"study unit {stage} ended {state.name if state else 'without a state'} on {deployment} "
                         f"(flow run {run.id}): {(state.message if state else '') or 'see that run'}; rerun the "
                         "study to go on (finished units are kept)")
    with _DVC:
        dvc.commit(root, stage, logger=entry.run_logger())
    if _status(root, stage):
        raise InputError(f"study unit {stage} completed on {deployment}, but {root} does not hold its outputs: the "
                         "deployment's worker must run in this project folder (a shared file system)")
    return {"stage": stage, "ran": True, "deployment": deployment, "flow_run": str(run.id)}


@flow(name="biocheck-study", log_prints=True)
def study_flow(params: str = "params.yaml", root: str = ".", ignore_gate: bool = False) -> dict[str, Any]:
    """The reward audit of the start and the study's gate (biocheck.study.units.check_gate: no training unless
    R_evidence varies in study.min_evidence_signal of the start's SUPPORTED and REFUTED groups; `ignore_gate`
    warns instead), then every unit of params.yaml `study:` (training, evaluation of each selected checkpoint
    and of the start), then the analysis: metrics/study.json, reports/study/index.html, MLflow `study <name>`."""
    with entry.redacted(), tracking.in_flow_run(flow_run.id):
        root = str(dvc.params_file(root, params).parent)
        p = params_of(Path(root) / params)
        cfg, orch = study_config(p), orchestrate_config(p)
        todo = stages(cfg)
        if "eg_grpo" in cfg.variants:
            with _DVC:
                run_stage(AUDIT_STAGE, root)
            check_gate(p, root, ignore=ignore_gate)
        if orch.study_train_deployment is None and orch.study_eval_deployment is None:
            out = {s: unit_task(s, root, None) for s in todo}  # here, in order
            _publish(out, cfg)
            return out
        futures: dict[str, Any] = {}
        for s in todo[:-1]:
            kind, variant, seed = _unit(s)
            deployment = orch.study_train_deployment if kind == "train" else orch.study_eval_deployment
            after = [futures[f"{STUDY_DVC}:train@{variant}-{seed}"]] if kind == "evaluate" else []
            futures[s] = unit_task.submit(s, root, deployment, wait_for=after)
        out = {s: f.result() for s, f in futures.items()}
        out[todo[-1]] = unit_task(todo[-1], root, None)  # the analysis, here, once every unit is recorded
        _publish(out, cfg)
        return out


def _publish(out: dict[str, Any], cfg: Any) -> None:
    """The run's summary artifact: each unit ran, was up to date or was sent (its flow run), and the MLflow
    runs (the analysis `analysis <name>`)."""
    sent = [f"- `{s}`: sent to {r['deployment']} (flow run {r['flow_run']})" for s, r in out.items()
            if r.get("deployment")]
    here = stage_lines({s: r for s, r in out.items() if not r.get("deployment")})
    publish_summary("study-summary", f"Study {cfg.name}", [*here, *sent, "",
                                                           "The study's page: `reports/study/index.html`."])


@flow(name="biocheck-study-unit", log_prints=True)
def study_unit_flow(stage: str, root: str = ".") -> dict[str, Any]:
    """One study unit's work, in the project folder `root` (the entrypoint of the study-unit deployments): what
    the stage's command runs, without DVC (the calling study flow records it)."""
    with entry.redacted(), tracking.in_flow_run(flow_run.id):
        path = dvc.params_file(root)
        kind, variant, seed = _unit(stage)
        p = params_of(path)
        import os

        here = os.getcwd()
        os.chdir(path.parent)  # the params' paths are relative to the project
        try:
            if kind == "train":
                stats = train_unit(p, variant, seed, progress=False)
                publish_summary("study-unit-summary", f"Study unit {stage}", [f"Trained: {stats.get('steps')} steps."])
                return {"stage": stage, "steps": stats.get("steps")}
            if kind in ("evaluate", "evaluate_start"):
                unit = evaluate_unit(p, variant, seed, progress=False)["unit"]
                publish_summary("study-unit-summary", f"Study unit {stage}", [f"Evaluated: `{unit}`."])
                return {"stage": stage, "unit": unit}
        finally:
            os.chdir(here)
        raise InputError(f"{stage}: not a unit of {STUDY_DVC} (train@..., evaluate@..., evaluate_start)")


if __name__ == "__main__":
    main(study_flow)
