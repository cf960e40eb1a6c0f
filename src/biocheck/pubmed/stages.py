"""The evidence stage as a plain function (CLI, DVC and Prefect call this)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.config import DEFAULT_PARAMS, evidence_config, load_params, plain
from biocheck.pubmed.build import build_evidence


def evidence_stage(params_path: Path | str = DEFAULT_PARAMS, **overrides: Any) -> dict:
    params = load_params(params_path)
    cfg = evidence_config(params, **overrides)
    stats = build_evidence(cfg)
    with tracking.run("evidence", params={"profile": params.get("profile"), "evidence": plain(cfg)}):
        tracking.log_metrics(stats)
    return stats
