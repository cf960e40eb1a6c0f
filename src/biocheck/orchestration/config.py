"""`orchestrate:` in params.yaml -> OrchestrateConfig (how Prefect runs the pipeline; plain data)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from biocheck.bounds import Count

DASK_ADDRESS_ENV = "BIOCHECK_DASK_ADDRESS"  # an existing Dask scheduler; wins over orchestrate.dask_address


@dataclass
class OrchestrateConfig:
    dask_address: str | None = None  # tcp://host:8786 of an existing Dask cluster; None: a LocalCluster
    dask_workers: Count = 2  # LocalCluster worker processes
    shards: Count = 4  # claim / query shards mapped over the Dask workers
    dvc_remote: str | None = None  # pulled before and pushed after a scheduled pipeline run; None: neither
    train_deployment: str | None = None  # e.g. "biocheck-train/train-gpu": training runs there; None: in-process
    # The command that runs `biocheck train` in dvc.yaml's train stage: `biocheck` in one process, or a
    # launcher that takes a module, e.g. `accelerate launch --config_file configs/accelerate/multi_gpu.yaml -m biocheck`
    train_launcher: str = "biocheck"
    # The study's units (flows/study.py): training units as this deployment's flow runs (e.g.
    # "biocheck-study-unit/study-unit-gpu" on the gpu pool), evaluation units as that one (the cpu pool); None: here
    study_train_deployment: str | None = None
    study_eval_deployment: str | None = None

    def __post_init__(self) -> None:
        for key, example in (("train_deployment", "biocheck-train/train-gpu"),
                             ("study_train_deployment", "biocheck-study-unit/study-unit-gpu"),
                             ("study_eval_deployment", "biocheck-study-unit/study-unit-cpu")):
            value = getattr(self, key)
            if value is not None and "/" not in value:
                raise ValueError(f"{key}: {value!r} is not FLOW/DEPLOYMENT (e.g. {example})")

        if not self.train_launcher.strip().endswith("biocheck"):
            raise ValueError(f"train_launcher: {self.train_launcher!r} must end with `biocheck` (the command, or "
                             "`... -m biocheck` after a launcher such as `accelerate launch`)")

    @property
    def address(self) -> str | None:
        """The Dask scheduler to use: $BIOCHECK_DASK_ADDRESS, else dask_address, else None (a LocalCluster)."""
        return os.environ.get(DASK_ADDRESS_ENV) or self.dask_address
