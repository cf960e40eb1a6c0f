"""MLflow tracking with a SQLite backend at the repo root (`mlflow ui` shows every run).

`MLFLOW_TRACKING_URI` overrides the location; `BIOCHECK_TRACKING=off` disables tracking (e.g. for
quick local experiments). Environment variables are never logged, and every text that is (param
values, tags, metric names, artifact files) has the environment's secrets (NCBI_API_KEY,
OPENAI_API_KEY, ...) blanked first: an error text can quote a key a server echoed back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from biocheck.secrets import contains_secret, redact, secret_values

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
    return re.sub(r"[^\w\-. :/]", "_", redact(key))


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
def run(stage: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None,
        experiment: str | None = None, run_name: str | None = None) -> Iterator[Any]:
    """An MLflow run for one pipeline stage (yields None when tracking is off); `experiment` and `run_name`
    default to the project's experiment and the stage name (the evaluation logs to its own experiment)."""
    if not enabled():
        yield None
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline machines: no phone-home attempts
    import mlflow

    mlflow.set_tracking_uri(tracking_uri())
    mlflow.set_experiment(experiment or EXPERIMENT)
    tags = {k: redact(v) for k, v in {"stage": stage, **(tags or {})}.items()}
    with mlflow.start_run(run_name=run_name or stage, tags=tags) as active:
        if params:  # redact before the cut: half a key would no longer match
            mlflow.log_params({_mlflow_key(k): redact(v)[:500] for k, v in flatten(params).items()})
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


def log_artifacts(path: Path | str, artifact_path: str | None = None) -> None:
    """Log a file or a folder as run artifacts, secrets blanked from text files; a binary file holding a
    secret is left out with a warning (no-op outside a run or when tracking is off)."""
    if not enabled():
        return
    import mlflow

    path = Path(path)
    if mlflow.active_run() is None or not path.exists():
        return
    with tempfile.TemporaryDirectory(prefix="biocheck-artifacts-") as tmp:
        clean = Path(tmp) / path.name
        if path.is_dir():
            clean.mkdir()
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                _copy_redacted(f, clean / f.relative_to(path))
            mlflow.log_artifacts(str(clean), artifact_path=artifact_path)
        elif _copy_redacted(path, clean):
            mlflow.log_artifact(str(clean), artifact_path=artifact_path)


def log_text(text: str, artifact_file: str) -> None:
    """`mlflow.log_text` with the secrets blanked (no-op outside a run or when tracking is off)."""
    if not enabled():
        return
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.log_text(redact(text), artifact_file)


def log_table(rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
    """Rows of plain values as an MLflow table (the UI's artifact view lists and filters them), every text
    cell with the secrets blanked (no-op outside a run or when tracking is off, or without rows)."""
    if not enabled() or not rows:
        return
    import mlflow

    if mlflow.active_run() is None:
        return
    columns = list(dict.fromkeys(k for r in rows for k in r))
    data = {c: [redact(v) if isinstance(v, str) else v for v in (r.get(c) for r in rows)] for c in columns}
    mlflow.log_table(data=data, artifact_file=artifact_file)


def _copy_redacted(src: Path, dest: Path) -> bool:
    """Copy `src` to `dest` with secrets blanked; False (nothing copied) for a binary file holding one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = src.read_bytes()
    if not secret_values() or not contains_secret(data):
        shutil.copyfile(src, dest)
        return True
    try:
        dest.write_text(redact(data.decode("utf-8")), encoding="utf-8")
    except UnicodeDecodeError:
        log.warning("not logged to MLflow: %s holds a secret from the environment and is not text", src)
        return False
    return True
