"""The one model loader of the project (the agent's `transformers` backend and the judges use it): a spec or
reference resolved to a folder (`resolve.py`), the causal LM and its tokenizer on the right device, and the
fingerprint that names those weights in traces, caches and MLflow."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.llm.spec import spec_ref

SPEC_KIND = "transformers"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
HASH_LIMIT = 50 * 1024 * 1024  # weights files below this are hashed in full for the fingerprint


def model_fingerprint(path: Path) -> str:
    """Short sha256 over config.json and the weights files' names + sizes (+ contents for files under 50 MB)."""
    h = hashlib.sha256()
    config = path / "config.json"
    h.update(config.read_bytes() if config.is_file() else b"")
    for f in sorted(p for p in path.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)):
        size = f.stat().st_size  # follows the HF cache's symlinks
        h.update(f"\0{f.name}\0{size}".encode())
        if size < HASH_LIMIT:
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):  # noqa: B023 - consumed at once
                    h.update(block)
    return h.hexdigest()[:12]


def load_causal_lm(path: Path, device: str = "auto", dtype: Any = None) -> tuple[Any, Any, Any]:
    """(model in eval mode on its device, tokenizer, torch.device). bf16 on CUDA, fp32 on CPU by default.

    Loading errors (OSError, ValueError, KeyError) propagate for the caller to word.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    hf_logging.disable_progress_bar()  # no "Loading weights" bar between a CLI's own output lines
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model.to(dev).eval(), tokenizer, dev


@dataclass
class LoadedModel:
    spec: str  # "transformers:<ref>"
    path: Path  # the resolved folder
    model: Any
    tokenizer: Any
    device: Any


def load_model(ref: str | Path, device: str = "auto", dtype: Any = None, cache_dir: str | Path | None = None) -> LoadedModel:
    """`ref` (a folder, a hub id, or either as "transformers:<ref>") resolved and loaded. Raises InputError
    (ModelNotFoundError for a reference that resolves to nothing) with one line naming the spec; the caller
    words it as its own error class."""
    from biocheck.llm.resolve import resolve_model

    ref = spec_ref(str(ref), SPEC_KIND)
    spec = f"{SPEC_KIND}:{ref}"
    path = resolve_model(ref, cache_dir=cache_dir)
    try:
        model, tokenizer, dev = load_causal_lm(path, device, dtype)
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{spec}: could not load the model/tokenizer from {path}: {e}") from None
    return LoadedModel(spec, path, model, tokenizer, dev)
