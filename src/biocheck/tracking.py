"""MLflow tracking with a SQLite backend at the repo root (`mlflow ui` shows every run).

`MLFLOW_TRACKING_URI` overrides the location; `BIOCHECK_TRACKING=off` disables tracking (e.g. for
quick local experiments). Only parameters and numbers are logged: never environment variables,
so secrets (NCBI_API_KEY, OPENAI_API_KEY, ...) cannot reach MLflow.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

EXPERIMENT = os.environ.get("MLFLOW_EXPERIMENT_NAME", "biocheck")
MARKERS = ("dvc.yaml", ".git")


def repo_root(start: Path | None = None) -> Path:
    """The nearest folder above `start` (default: cwd) holding dvc.yaml or .git; else `start`."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if any((d / m).exists() for m in MARKERS):
            return d
    return start


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def enabled() -> bool:
    return os.environ.get("BIOCHECK_TRACKING", "on").lower() not in ("0", "off", "false", "no")


def _mlflow_key(key: str) -> str:
    """MLflow names allow letters, digits and `_-. :/`; anything else (e.g. "train+val") becomes `_`."""
    return re.sub(r"[^\w\-. :/]", "_", key)


def flatten(d: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key, sep))
        else:
            out[key] = v
    return out


@contextlib.contextmanager
def run(stage: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None) -> Iterator[Any]:
    """An MLflow run for one pipeline stage (yields None when tracking is off)."""
    if not enabled():
        yield None
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline machines: no phone-home attempts
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_experiment(EXPERIMENT)
    with mlflow.start_run(run_name=stage, tags={"stage": stage, **(tags or {})}) as active:
        if params:
            mlflow.log_params({_mlflow_key(k): str(v)[:500] for k, v in flatten(params).items()})
        yield active


def log_metrics(metrics: Mapping[str, Any], prefix: str = "") -> None:
    """Log the numeric leaves of a nested dict (no-op outside a run or when tracking is off)."""
    if not enabled():
        return
    import mlflow

    if mlflow.active_run() is None:
        return
    flat = {_mlflow_key(k): float(v) for k, v in flatten(metrics, prefix).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    mlflow.log_metrics(flat)
