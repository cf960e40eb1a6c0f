"""Model references: a local model directory, a Hugging Face Hub model id downloaded into the HF cache, or a
model of the MLflow model registry.

`resolve_model("models/base")` returns the directory as is; `resolve_model("Qwen/Qwen3-0.6B")` (optionally
`"Qwen/Qwen3-0.6B@<revision>"`) returns the cached snapshot, downloading it when online;
`resolve_model("models:/biocheck-agent@champion")` (or `models:/NAME/VERSION`) returns the registered version's
model folder, downloaded once from the tracking store (biocheck.tracking: MLFLOW_TRACKING_URI, else the repo's
mlflow.db) into the cache. Every failure is a `ModelNotFoundError` whose message names the reference and says how
to fix it; nothing waits on a network that is not there (offline mode fails at once, an unreachable Hub within
the HTTP timeout, an unreachable tracking server after one short probe).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.llm.spec import REGISTRY_PREFIX

# Formats we never load: skip them so a hub download fetches only what transformers uses.
IGNORE_PATTERNS = ["*.onnx", "onnx/*", "*.gguf", "*.msgpack", "*.h5", "*.ot", "*.tflite", "original/*", "*.pth"]


# a registered model: models:/NAME@ALIAS or models:/NAME/VERSION (MLflow's own URIs)
REGISTERED = re.compile(r"models:/(?P<name>[^@/]+)(?:@(?P<alias>[^@/]+)|/(?P<version>\d+))")
MODEL_DIR = "model"  # where a logged model of `biocheck select` keeps the model folder (MLflow's own name)


class ModelNotFoundError(InputError):
    """A model reference that is neither a local model directory nor an obtainable hub model."""


def _looks_like_path(ref: str) -> bool:
    """True for refs that can only be a filesystem path (a hub id is `name` or `org/name`)."""
    return (ref.startswith((".", "/", "~")) or "\\" in ref or ref.endswith("/") or ref.count("/") > 1
            or ref.endswith((".json", ".safetensors")))


def _offline() -> bool:
    try:
        from huggingface_hub import is_offline_mode

        if is_offline_mode():
            return True
    except ImportError:  # pragma: no cover - older huggingface_hub
        pass
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The hub client's network errors (a dropped connection, a broken proxy): httpx2 in huggingface_hub 2.x,
    httpx in 1.x, requests before. The hub turns only refused connections and timeouts into its own errors."""
    found = []
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"), ("requests", "RequestException")):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _unreachable(text: str, why: str) -> ModelNotFoundError:
    return ModelNotFoundError(
        f"model {text!r}: there is no local directory {text!r}, and the Hugging Face Hub could not be reached "
        f"({why}). Fix: give the path of a local model directory (e.g. models/base from `biocheck model init`), run "
        "once with network access to cache it, or set HF_HUB_OFFLINE=1 to use a copy already in the Hugging Face "
        "cache.")


def resolve_model(ref: str | Path, cache_dir: str | Path | None = None, revision: str | None = None,
                  etag_timeout: float = 10.0) -> Path:
    """Path of a model directory for `ref`: an existing local directory, else a Hugging Face model id.

    A hub id may carry a revision as `org/name@revision` (or pass `revision=`). `cache_dir` defaults to the HF cache
    (`HF_HOME` / `HF_HUB_CACHE`). Raises `ModelNotFoundError` with a fix when it cannot be had.
    """
    text = str(ref).strip()
    if text.startswith(REGISTRY_PREFIX):
        return resolve_registered(text)
    if not text:
        raise ModelNotFoundError("empty model reference: give a local model directory (e.g. models/base, built by "
                                 "`biocheck model init`) or a Hugging Face model id (e.g. Qwen/Qwen3-0.6B).")
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ModelNotFoundError(f"{text}: is a file; a model reference is a directory (with config.json and the "
                                 "weights) or a Hugging Face model id.")
    if _looks_like_path(text):
        raise ModelNotFoundError(f"{text}: no such model directory (build the tiny model with `biocheck model init`, "
                                 "or give a Hugging Face model id such as Qwen/Qwen3-0.6B).")

    repo_id, _, at_revision = text.partition("@")
    revision = revision or at_revision or None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    not_local = f"there is no local directory {text!r}"
    try:
        snapshot = snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, etag_timeout=etag_timeout,
                                     ignore_patterns=IGNORE_PATTERNS)
    except HFValidationError as e:
        raise ModelNotFoundError(f"model {text!r}: {not_local}, and it is not a valid Hugging Face model id ({e}). "
                                 "Give the path of a model directory or an id like org/name.") from None
    except GatedRepoError:
        raise ModelNotFoundError(f"model {text!r} is gated on the Hugging Face Hub: accept its licence on the hub and "
                                 "log in (`hf auth login` or HF_TOKEN), or give a local model directory.") from None
    except RevisionNotFoundError:
        raise ModelNotFoundError(f"model {repo_id!r}: revision {revision!r} not found on the Hugging Face Hub.") from None
    except RepositoryNotFoundError:
        raise ModelNotFoundError(f"model {text!r}: {not_local}, and the Hugging Face Hub has no such model (or it "
                                 "is private: log in with `hf auth login` / HF_TOKEN). Check the id, or build the "
                                 "local tiny model with `biocheck model init`.") from None
    except LocalEntryNotFoundError as e:  # offline mode, or the hub unreachable, and nothing cached
        if _offline():
            raise ModelNotFoundError(
                f"model {text!r}: {not_local}, HF_HUB_OFFLINE is set and the model is not in the Hugging Face cache. "
                "Fix: give the path of a local model directory (e.g. models/base from `biocheck model init`), or "
                f"download it once online (unset HF_HUB_OFFLINE; `hf download {repo_id}`), then run offline."
            ) from None
        raise _unreachable(text, str(e).splitlines()[0]) from None
    except _transport_errors() as e:  # e.g. the server closed the connection without an answer
        raise _unreachable(text, " ".join([type(e).__name__ + ":", *str(e).splitlines()[:1]])) from None
    except OSError as e:  # disk full, permissions, a broken cache
        raise ModelNotFoundError(f"model {text!r}: could not download or read it from the Hugging Face cache: {e}") \
            from None
    return Path(snapshot)


def cache_root() -> Path:
    """Where downloaded registry models live: $BIOCHECK_MODEL_CACHE, else $XDG_CACHE_HOME/biocheck/models
    (default ~/.cache/biocheck/models)."""
    given = os.environ.get("BIOCHECK_MODEL_CACHE", "").strip()
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "biocheck" / "models"


def resolve_registered(uri: str) -> Path:
    """The model folder of the registered version `uri` names (models:/NAME@ALIAS, models:/NAME/VERSION): the
    version's logged model downloaded once into cache_root()/<model id> (a version's files never change), then
    read from there. ModelNotFoundError, one line, when tracking is off or its store unreachable, or the
    registry has no such model, alias or version."""
    from biocheck import tracking

    found = REGISTERED.fullmatch(uri)
    if not found:
        raise ModelNotFoundError(f"model {uri!r}: not a registered model reference; write models:/NAME@ALIAS "
                                 "(e.g. models:/biocheck-agent@champion) or models:/NAME/VERSION.")
    where = tracking.shown_uri(tracking.tracking_uri())
    if not tracking.enabled():
        raise ModelNotFoundError(f"model {uri!r}: MLflow tracking is off (BIOCHECK_TRACKING), so the model "
                                 "registry cannot be read; unset BIOCHECK_TRACKING, or give the model folder "
                                 "(e.g. models/selected).")
    why = tracking.store_problem()
    if why:
        raise ModelNotFoundError(f"model {uri!r}: the MLflow tracking store at {where} cannot be used ({why}); "
                                 "set MLFLOW_TRACKING_URI to the store that holds the registry (or start that "
                                 "server), or give the model folder (e.g. models/selected).")
    version = _registered_version(uri, found["name"], found["alias"], found["version"], where)
    model_id = tracking.version_model_id(version)
    if not model_id:
        raise ModelNotFoundError(f"model {uri!r}: version {version.version} of {found['name']} holds no logged "
                                 f"model (its source is {version.source}, registered before models were logged); "
                                 "run `biocheck select` again to register one.")
    return _downloaded(uri, model_id)


def _registered_version(uri: str, name: str, alias: str | None, number: str | None, where: str) -> Any:
    import mlflow
    from mlflow.exceptions import MlflowException

    from biocheck import tracking

    client = mlflow.MlflowClient(tracking_uri=tracking.tracking_uri())
    try:
        model = client.get_registered_model(name)
    except MlflowException:
        raise ModelNotFoundError(f"model {uri!r}: the model registry at {where} has no model {name!r}; run "
                                 "`biocheck select` (or `dvc repro select`) to register one, or set "
                                 "MLFLOW_TRACKING_URI to the store that holds it.") from None
    try:
        return client.get_model_version_by_alias(name, alias) if alias else client.get_model_version(name, number)
    except MlflowException:
        known = ", ".join(sorted(model.aliases)) if alias else ", ".join(
            sorted((str(v.version) for v in client.search_model_versions(f"name = '{name}'")), key=int))
        what = f"alias {alias!r}" if alias else f"version {number}"
        have = "aliases" if alias else "versions"
        raise ModelNotFoundError(f"model {uri!r}: {name} has no {what} (its {have}: {known or 'none'}); pick one "
                                 f"of those, or run `biocheck select` to register one.") from None


def _downloaded(uri: str, model_id: str) -> Path:
    """The logged model's folder in the cache; downloaded into a temporary sibling and renamed, so a cache
    entry is always whole."""
    import mlflow

    from biocheck import tracking

    folder = cache_root() / model_id
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{model_id}-", dir=folder.parent))
        try:
            mlflow.set_tracking_uri(tracking.tracking_uri())
            tracking.use_project_artifacts()  # the project's own artifact locations (tracking/artifacts.py)
            mlflow.artifacts.download_artifacts(artifact_uri=f"models:/{model_id}", dst_path=str(tmp),
                                                tracking_uri=tracking.tracking_uri())
            os.replace(tmp, folder)
        except BaseException as e:  # Ctrl-C included: no half-downloaded folder stays in the cache
            shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(e, Exception):
                raise
            if folder.is_dir():  # another process downloaded it meanwhile
                return _model_dir(folder)
            why = " ".join(str(e).split())[:300]
            raise ModelNotFoundError(f"model {uri!r}: could not download its files ({model_id}) from the tracking "
                                     f"store: {why}") from None
    return _model_dir(folder)


def _model_dir(folder: Path) -> Path:
    return folder / MODEL_DIR if (folder / MODEL_DIR).is_dir() else folder
