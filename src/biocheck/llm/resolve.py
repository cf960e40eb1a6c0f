"""Model references: a local model directory, or a Hugging Face Hub model id downloaded into the HF cache.

`resolve_model("models/base")` returns the directory as is; `resolve_model("Qwen/Qwen3-0.6B")` (optionally
`"Qwen/Qwen3-0.6B@<revision>"`) returns the cached snapshot, downloading it when online. Every failure is a
`ModelNotFoundError` whose message names the reference and says how to fix it; nothing waits on a network that is
not there (offline mode fails at once, an unreachable Hub within the HTTP timeout).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from biocheck.io import InputError

# Formats we never load: skip them so a hub download fetches only what transformers uses.
IGNORE_PATTERNS = ["*.onnx", "onnx/*", "*.gguf", "*.msgpack", "*.h5", "*.ot", "*.tflite", "original/*", "*.pth"]


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
