"""Prefect flow `biocheck-train`: the train area of dvc.yaml, each stage its DVC stage in DVC's order.

The train area is every stage of dvc.yaml that is not data, evidence or evaluation (biocheck/orchestration/
plan.py): today model -> judge, judge_eqs -> sft -> audit -> train@VARIANT -> select@VARIANT; a stage added to
dvc.yaml joins it with no flow edited. The entrypoint of the `gpu` deployment that `biocheck-pipeline` calls
when `orchestrate.train_deployment` is set; its worker must run in the same project directory as the pipeline
(a shared file system), since DVC records what ran in that directory's dvc.lock. Standalone: `python
flows/train.py [params.yaml]`. The stages that run a model are tagged `gpu`; a killed training run resumes
from its last checkpoint on rerun (`persist`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from biocheck import tracking  # noqa: E402
from biocheck.io import InputError  # noqa: E402
from biocheck.orchestration import dvc, entry, plan  # noqa: E402
from biocheck.orchestration.artifacts import publish_summary, stage_lines  # noqa: E402
from biocheck.rewards.components import VARIANTS  # noqa: E402
from flows.tasks import main, run_stages  # noqa: E402


@flow(name="biocheck-train", log_prints=True)
def train_flow(params: str = "params.yaml", root: str = ".", variants: list[str] | None = None,
               init_model: bool = True, pipeline_id: str | None = None) -> dict:
    """Every stage of the train area (judges, the shared warm start, the reward audit, each reward variant's
    training and selection), or (`variants`) only what those variants' train@V and select@V need; without the
    base model's stage when `init_model` is False. `pipeline_id`: the calling pipeline's (flows/pipeline.py
    passes it to the train deployment), so these stages' MLflow runs nest under that pipeline's parents."""
    # secrets blanked in this run's log lines and in any error leaving it
    with entry.redacted(), tracking.in_pipeline(pipeline_id), tracking.in_flow_run(flow_run.id):
        root = str(dvc.params_file(root, params).parent)
        unknown = [v for v in variants or () if v not in VARIANTS]
        if unknown:
            raise InputError(f"variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)} "
                             "(the train@... stages of dvc.yaml)")
        # one at a time: the stages share the host's GPU (and DVC's project lock)
        out = run_stages(plan.training(dvc.pipeline(root), variants, init_model), root)
        publish_summary("train-summary", "Training", stage_lines(out))
        return out


if __name__ == "__main__":
    main(train_flow)
