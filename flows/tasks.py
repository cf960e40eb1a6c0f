"""The pipeline's Prefect tasks: one per DVC stage, each running `dvc repro --single-item STAGE`.

DVC decides whether a stage is up to date, caches its outputs and records the run in dvc.lock; Prefect
adds retries (network stages), timeouts, logs and UI artifacts. Which stages a flow runs, and in what order,
is read from dvc.yaml through DVC's own graph (biocheck.orchestration.plan): `run_stages` runs them, each as
the task `task_for(stage)` gives. The area flows (data.py, evidence.py, train.py) and the pipeline flow
(pipeline/) call these, never a second copy of a stage.

Timeouts (TIMEOUT_S) are upper bounds for the paper profile on one GPU host, far above the quickstart's
minutes; a stage that reaches one is stopped (DVC and its command), fails the run, and its rerun resumes
from its `persist` outputs (training checkpoints, cached evaluation episodes).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from prefect import Task, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from biocheck.io import InputError
from biocheck.orchestration import dvc, entry
from biocheck.orchestration.artifacts import (
    METRICS_DESCRIPTION,
    METRICS_KEY,
    metric_rows,
    validation_markdown,
    validation_summary,
)
from biocheck.pipeline import evaluate_config
from biocheck.wiring import params_of, validate_config

HOUR = 3600
# A stage's timeout by its name (before any @): stages dvc.yaml gains get DEFAULT_TIMEOUT_S until listed here.
TIMEOUT_S = {
    "fetch": HOUR,  # two release downloads (retried below)
    "prepare": HOUR,
    "validate": HOUR,
    "evidence": 12 * HOUR,  # the paper profile may index PubMed baseline files
    "model": 2 * HOUR,  # may download a multi-GB base model
    "judge": 4 * HOUR,  # one pass over the training pairs and one over the test pairs
    "judge_eqs": 4 * HOUR,  # the second judge, the same recipe
    "sft": 12 * HOUR,  # the warm start both training runs begin from
    "audit": 4 * HOUR,  # the start policy's groups on the audit's training claims
    "train": 72 * HOUR,  # one GRPO run; a rerun resumes from its last checkpoint
    "select": HOUR,
    "evaluate": 24 * HOUR,  # seven systems on the full test sets
    "narrative_passages": HOUR,  # composes text
    "narratives": 12 * HOUR,  # the paper profile's ~100 passages, four arms (~700 episodes)
    "dvc": 4 * HOUR,  # pull / push of every output
}
DEFAULT_TIMEOUT_S = 24 * HOUR
RETRIED = frozenset({"fetch"})  # network stages (and dvc pull/push below)
# Stages that run a model: a `gpu` work pool or tag concurrency limit (`prefect concurrency-limit create gpu 1`)
# routes them.
GPU = frozenset({"judge", "judge_eqs", "sft", "audit", "train"})
RETRY_DELAYS_S = [10, 60]  # network stages: a hiccup, then a longer outage
VALIDATION_KEY = "validation"  # Prefect artifact keys (lowercase letters, digits, dashes)


class DataValidationError(InputError):
    """The prepared data failed validation; the message is the validation summary."""


def run_stage(stage: str, root: str) -> dict[str, Any]:
    return asdict(dvc.repro(stage, root, logger=entry.run_logger()))


def _params(root: str) -> tuple[Path, dict[str, Any]]:
    path = dvc.params_file(root)
    return path.parent, params_of(path)


# DVC decides what is up to date, so no task reuses an earlier task's result (Prefect's cache is off).
@task(name="stage", task_run_name="{stage}", cache_policy=NO_CACHE)
def stage_task(stage: str, root: str = ".") -> dict[str, Any]:
    return run_stage(stage, root)


@task(name="validate", task_run_name="{stage}", cache_policy=NO_CACHE)
def validate_task(stage: str = "validate", root: str = ".") -> dict[str, Any]:
    """Run the validate stage. On failure its report becomes the error message and a markdown artifact."""
    project, params = _params(root)
    report_path = project / validate_config(params).report_path
    started = time.time()
    try:
        result = run_stage(stage, root)
    except dvc.DvcError:
        report = _report_since(report_path, started)
        if report is None or report["success"]:
            raise  # the stage failed before validating anything: DVC's message says why
        create_markdown_artifact(markdown=validation_markdown(report, str(report_path)), key=VALIDATION_KEY,
                                 description="Data validation failed")
        raise DataValidationError(validation_summary(report)) from None
    report = json.loads(report_path.read_text())
    create_markdown_artifact(markdown=validation_markdown(report, str(report_path)), key=VALIDATION_KEY,
                             description="Data validation")
    return {**result, "checks": len(report["checks"]), "failed": 0}


def _report_since(path: Path, started: float) -> dict[str, Any] | None:
    """The validation report if this run wrote it (not one left by an earlier run), else None."""
    try:
        if path.stat().st_mtime < started - 1:  # 1 s: coarse file-system clocks
            return None
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@task(name="evaluate", task_run_name="{stage}", cache_policy=NO_CACHE)
def evaluate_task(stage: str = "evaluate", root: str = ".") -> dict[str, Any]:
    """Run the evaluate stage, then publish the metric table (system x dataset) as a table artifact."""
    project, params = _params(root)
    result = run_stage(stage, root)
    rows = metric_rows(json.loads((project / evaluate_config(params).metrics_path).read_text()))
    create_table_artifact(table=rows, key=METRICS_KEY, description=METRICS_DESCRIPTION)
    return {**result, "rows": len(rows)}


SPECIAL = {"validate": validate_task, "evaluate": evaluate_task}  # stages that also publish an artifact


def task_for(stage: str) -> Task:
    """The Prefect task that runs `stage` (called as task(stage, root)): named after the stage (before any @),
    with its timeout, retries and tags."""
    name = stage.partition("@")[0]
    retries = len(RETRY_DELAYS_S) if name in RETRIED else 0
    return SPECIAL.get(name, stage_task).with_options(
        name=name, timeout_seconds=TIMEOUT_S.get(name, DEFAULT_TIMEOUT_S), retries=retries,
        retry_delay_seconds=RETRY_DELAYS_S if retries else None, tags=["gpu"] if name in GPU else [])


def run_stages(stages: list[str], root: str) -> dict[str, dict[str, Any]]:
    """Each stage's task in turn (the order given: DVC's, from plan.py); the first failure stops the rest."""
    return {stage: task_for(stage)(stage, root) for stage in stages}


@task(name="dvc-pull", retries=len(RETRY_DELAYS_S), retry_delay_seconds=RETRY_DELAYS_S, timeout_seconds=TIMEOUT_S["dvc"])
def pull_task(root: str, remote: str) -> bool:
    return dvc.pull(root, remote, logger=entry.run_logger())


@task(name="dvc-push", retries=len(RETRY_DELAYS_S), retry_delay_seconds=RETRY_DELAYS_S, timeout_seconds=TIMEOUT_S["dvc"])
def push_task(root: str, remote: str) -> None:
    dvc.push(root, remote, logger=entry.run_logger())


# --- `python flows/<flow>.py [PARAMS]` -----------------------------------------------------------------

def main(flow_fn, argv: list[str] | None = None) -> None:
    """Run `flow_fn` on the project holding PARAMS (default ./params.yaml); a failure is one line on stderr
    and exit 1 (Prefect's own log above it has the details)."""
    args = sys.argv[1:] if argv is None else argv
    params = Path(args[0] if args else dvc.PARAMS_FILE)

    def body() -> None:
        dvc.params_file(params.parent, params.name)  # a wrong project fails before Prefect starts a server
        flow_fn(params=params.name, root=str(params.parent))

    sys.exit(entry.run(body, interrupted="interrupted; DVC stopped the stage, and a rerun starts it again"))
