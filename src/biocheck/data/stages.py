"""The data stages as plain functions: the CLI, DVC (through the CLI) and Prefect all call these.

Each takes the params file plus optional overrides, runs the stage, and records it in MLflow.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.config import DEFAULT_PARAMS, fetch_config, load_params, plain, prepare_config, validate_config
from biocheck.data.fetch import fetch
from biocheck.data.prepare import prepare
from biocheck.data.validate import ValidationResult, validate

log = logging.getLogger(__name__)


def fetch_stage(params_path: Path | str = DEFAULT_PARAMS, **overrides: Any) -> dict:
    cfg = fetch_config(load_params(params_path), **overrides)
    return fetch(cfg)


def prepare_stage(params_path: Path | str = DEFAULT_PARAMS, **overrides: Any) -> dict:
    params = load_params(params_path)
    cfg = prepare_config(params, **overrides)
    stats = prepare(cfg)
    with tracking.run("prepare", params={"profile": params.get("profile"), "data": plain(cfg)}):
        tracking.log_metrics(stats)
    return stats


def validate_stage(params_path: Path | str = DEFAULT_PARAMS, **overrides: Any) -> ValidationResult:
    params = load_params(params_path)
    cfg = validate_config(params, **overrides)
    result = validate(cfg)
    with tracking.run("validate", params={"profile": params.get("profile"), "validate": plain(cfg)},
                      tags={"success": str(result.success)}):
        tracking.log_metrics({"checks": len(result.checks), "failed": len(result.failures),
                              "success": int(result.success)}, prefix="validation")
        manifest = cfg.prepared_dir / "manifest.json"
        if manifest.is_file():  # the dataset stats of the data that was validated
            tracking.log_metrics(json.loads(manifest.read_text(encoding="utf-8")).get("stats", {}))
    return result
