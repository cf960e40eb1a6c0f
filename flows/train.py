"""Prefect 3 flow for training: model -> train -> select (the same functions as `dvc repro select`).

The training task is tagged `gpu`, so a work pool or concurrency limit can route it to a GPU host;
locally it runs in-process like the other flows: `python flows/train.py [params.yaml]`.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, task  # noqa: E402

from biocheck.pipeline import model_stage, select_stage, train_stage  # noqa: E402


@task(name="model-init")
def model_task(params: str) -> dict:
    return model_stage(params)


@task(name="train", tags=["gpu"])
def train_task(params: str) -> dict:
    return train_stage(params, progress=False)


@task(name="select")
def select_task(params: str) -> dict:
    return select_stage(params)


@flow(name="biocheck-train", log_prints=True)
def train_flow(params: str = "params.yaml", init_model: bool = True) -> dict:
    """Build/fetch the base model (optional), train with EG-GRPO, select the champion checkpoint."""
    if init_model:
        model_task(params)
    stats = train_task(params)
    selection = select_task(params)
    return {"train": stats, "selection": {k: v for k, v in selection.items() if k != "table"}}


if __name__ == "__main__":
    train_flow(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
