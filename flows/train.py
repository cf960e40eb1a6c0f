"""Prefect flow `biocheck-train`: model -> judge -> sft -> train@VARIANT -> select@VARIANT, each its DVC stage.

The entrypoint of the `gpu` deployment that `biocheck-pipeline` calls when `orchestrate.train_deployment`
is set; its worker must run in the same project directory as the pipeline (a shared file system), since
DVC records what ran in that directory's dvc.lock. Standalone: `python flows/train.py [params.yaml]`.
The training task is tagged `gpu`; a killed run resumes from its last checkpoint on rerun (`persist`).
"""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ != "flows":  # run as a script: make the `flows` package (the repo root) importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prefect import flow  # noqa: E402

from biocheck import tracking  # noqa: E402
from biocheck.io import InputError  # noqa: E402
from biocheck.orchestration import dvc, entry  # noqa: E402
from biocheck.rewards.components import VARIANTS  # noqa: E402
from flows.tasks import judge_task, main, model_task, select_task, sft_task, train_task  # noqa: E402


@flow(name="biocheck-train", log_prints=True)
def train_flow(params: str = "params.yaml", root: str = ".", variants: list[str] | None = None,
               init_model: bool = True, pipeline_id: str | None = None) -> dict:
    """Build/fetch the base model (optional), train the judge and the shared warm start, train each reward variant (default: all, dvc.yaml's train@...
    stages), then select each one's best checkpoint. `pipeline_id`: the calling pipeline's (flows/pipeline.py
    passes it to the train deployment), so these stages' MLflow runs nest under that pipeline's parents."""
    # secrets blanked in this run's log lines and in any error leaving it
    with entry.redacted(), tracking.in_pipeline(pipeline_id):
        root = str(dvc.params_file(root, params).parent)
        variants = list(VARIANTS) if variants is None else list(variants)
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            raise InputError(f"variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)} "
                             "(the train@... stages of dvc.yaml)")
        out = {"model": model_task(root)} if init_model else {}
        out["judge"] = judge_task(root)  # R_evidence's judge, before any reward is computed
        if variants:
            out["sft"] = sft_task(root)  # once: every variant's GRPO starts from it
        for v in variants:  # one at a time: both share the host's GPU (and DVC's project lock)
            out[f"train@{v}"] = train_task(root, v)
        for v in variants:
            out[f"select@{v}"] = select_task(root, v)
        return out


if __name__ == "__main__":
    main(train_flow)
