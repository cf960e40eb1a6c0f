"""Prefect 3 flow for the data stages: fetch -> prepare -> validate.

The tasks call the very functions `biocheck data ...` and `dvc repro` run. Runs without a Prefect
server (`python flows/data.py`; Prefect starts a temporary local one), or against one with
PREFECT_API_URL set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # offline machines: no telemetry
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")

from prefect import flow, task

from biocheck.pipeline import fetch_stage, prepare_stage, validate_stage


class DataValidationError(Exception):
    """The prepared data failed validation; the message is the human summary."""


@task(name="fetch", retries=2, retry_delay_seconds=[10, 60])  # network hiccups: retry the whole fetch
def fetch_task(params: str) -> dict:
    return fetch_stage(params, progress=False)


@task(name="prepare")
def prepare_task(params: str) -> dict:
    return prepare_stage(params)


@task(name="validate")
def validate_task(params: str) -> dict:
    result = validate_stage(params)
    if not result.success:
        raise DataValidationError(result.summary())
    return {"checks": len(result.checks), "failed": 0}


@flow(name="biocheck-data", log_prints=True)
def data_flow(params: str = "params.yaml") -> dict:
    """Fetch the releases, prepare the splits and validate them; fails if validation fails."""
    fetch_task(params)
    stats = prepare_task(params)
    validation = validate_task(params)
    return {"stats": stats, "validation": validation}


if __name__ == "__main__":
    data_flow(sys.argv[1] if len(sys.argv) > 1 else str(Path("params.yaml")))
