"""What a run logs: tags, metrics, datasets, artifacts, text and tables, each with the environment's secrets
blanked first, and each a no-op outside a run or when tracking is off (a failure turns tracking off: guard)."""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from biocheck.secrets import contains_secret, redact, secret_values
from biocheck.tracking.provenance import file_md5
from biocheck.tracking.store import enabled, guard, repo_root

log = logging.getLogger(__name__)


def mlflow_key(key: str) -> str:
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


def _active() -> bool:
    if not enabled():
        return False
    import mlflow

    return mlflow.active_run() is not None


def set_tags(tags: Mapping[str, Any]) -> None:
    """Tags on the active run, known only once its work has run (a model's fingerprint), secrets blanked
    (no-op outside a run or when tracking is off)."""
    if not _active():
        return
    import mlflow

    with guard("setting tags"):
        mlflow.set_tags({k: redact(str(v)) for k, v in tags.items() if v is not None})


def log_metrics(metrics: Mapping[str, Any], prefix: str = "") -> None:
    """Log the numeric leaves of a nested dict (no-op outside a run or when tracking is off)."""
    if not _active():
        return
    import mlflow

    flat = {mlflow_key(k): float(v) for k, v in flatten(metrics, prefix).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    with guard("logging metrics"):
        mlflow.log_metrics(flat)


def log_dataset(path: Path | str, context: str, name: str | None = None) -> None:
    """The prepared split at `path` as the run's input: name `dataset/split` (e.g. scifact/train), digest its
    md5, source its path (repo-relative when inside the repo); `context` training/validation/evaluation.
    No-op outside a run, when tracking is off, or when the file is missing."""
    path = Path(path)
    if not _active() or not path.is_file():
        return
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource

    root, full = repo_root(), path.resolve()
    source = full.relative_to(root).as_posix() if full.is_relative_to(root) else full.as_posix()
    with guard("logging a dataset"):
        dataset = MetaDataset(LocalArtifactDatasetSource(source), name=name or f"{path.parent.name}/{path.stem}",
                              digest=file_md5(path))
        mlflow.log_input(dataset, context=context)


def log_artifacts(path: Path | str, artifact_path: str | None = None) -> None:
    """Log a file or a folder as run artifacts, secrets blanked from text files; a binary file holding a
    secret is left out with a warning (no-op outside a run or when tracking is off)."""
    path = Path(path)
    if not path.exists() or not _active():
        return
    import mlflow

    with tempfile.TemporaryDirectory(prefix="biocheck-artifacts-") as tmp, guard("logging artifacts"):
        clean = Path(tmp) / path.name
        if path.is_dir():
            clean.mkdir()
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                copy_redacted(f, clean / f.relative_to(path))
            mlflow.log_artifacts(str(clean), artifact_path=artifact_path)
        elif copy_redacted(path, clean):
            mlflow.log_artifact(str(clean), artifact_path=artifact_path)


def log_text(text: str, artifact_file: str, run_id: str | None = None) -> None:
    """`mlflow.log_text` with the secrets blanked, into the active run or the run `run_id` (one whose work has
    ended: a file that needs later work, an evaluation's paired tests); no-op outside a run or when tracking is off."""
    if not (enabled() if run_id else _active()):
        return
    import mlflow

    with guard("logging a text artifact"):
        mlflow.log_text(redact(text), artifact_file, run_id=run_id)


def log_table(rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
    """Rows of plain values as an MLflow table (the UI's artifact view lists and filters them), every text
    cell with the secrets blanked (no-op outside a run or when tracking is off, or without rows)."""
    if not rows or not _active():
        return
    import mlflow

    columns = list(dict.fromkeys(k for r in rows for k in r))
    data = {c: [redact(v) if isinstance(v, str) else v for v in (r.get(c) for r in rows)] for c in columns}
    with guard("logging a table"):
        mlflow.log_table(data=data, artifact_file=artifact_file)


_TEXT_MAX = 64 << 20  # a larger file is scanned in chunks and never rewritten (weights, not text)
_CHUNK = 16 << 20


def _binary_holds_secret(src: Path) -> bool:
    """Whether a large file holds a secret, read in overlapping chunks (a secret may straddle two)."""
    overlap = max(len(v.encode("utf-8")) for v in secret_values())
    tail = b""
    with src.open("rb") as f:
        while chunk := f.read(_CHUNK):
            if contains_secret(tail + chunk):
                return True
            tail = chunk[-overlap:]
    return False


def copy_redacted(src: Path, dest: Path) -> bool:
    """Copy `src` to `dest` with secrets blanked; False (nothing copied) for a binary file holding one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not secret_values() or (src.stat().st_size > _TEXT_MAX and not _binary_holds_secret(src)):
        shutil.copyfile(src, dest)  # streamed: a model's weights are never read into memory
        return True
    if src.stat().st_size > _TEXT_MAX:
        log.warning("not logged to MLflow: %s holds a secret from the environment and is not text", src)
        return False
    data = src.read_bytes()
    if not contains_secret(data):
        shutil.copyfile(src, dest)
        return True
    try:
        dest.write_text(redact(data.decode("utf-8")), encoding="utf-8")
    except UnicodeDecodeError:
        log.warning("not logged to MLflow: %s holds a secret from the environment and is not text", src)
        return False
    return True
