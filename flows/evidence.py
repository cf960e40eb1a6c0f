"""Prefect 3 flow for the evidence stage: build the local index, create the evidence store.

Same function as `biocheck evidence build` / `dvc repro evidence`. `python flows/evidence.py`.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from prefect import flow, task

from biocheck.pipeline import evidence_stage


@task(name="evidence-build")
def evidence_task(params: str) -> dict:
    return evidence_stage(params, progress=False)


@flow(name="biocheck-evidence", log_prints=True)
def evidence_flow(params: str = "params.yaml") -> dict:
    """Index the prepared corpus (and any baseline files) and report index/store statistics."""
    return evidence_task(params)


if __name__ == "__main__":
    evidence_flow(sys.argv[1] if len(sys.argv) > 1 else "params.yaml")
