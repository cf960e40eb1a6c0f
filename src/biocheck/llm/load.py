"""The one model loader of the project (the agent's `transformers` backend and the judges use it): a spec or
reference resolved to a folder (`resolve.py`), checked (`check_model_dir`), the causal LM and its tokenizer on
the right device, and the fingerprint that names those weights in traces, caches and MLflow.

`model_dir_gap` / `is_model_dir` is the one test of "is a model folder" (a full model or a LoRA adapter, as the
loader takes them), used wherever a stage asks whether a model is there yet. `check_model_dir` is the one
check of a model folder before it is used or copied (loading, `biocheck select`,
a training resume, `model init --base`): a weights file cut short or padded, a shard its index lists but the
folder lacks, a JSON file that does not parse is one error naming the file, instead of a traceback from
safetensors or a model that silently has no weights. It reads headers only (a safetensors header, a zip
directory): milliseconds, even for a 4B model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.llm.spec import spec_ref

SPEC_KIND = "transformers"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
HASH_LIMIT = 50 * 1024 * 1024  # weights files below this are hashed in full for the fingerprint
CONFIGS = ("config.json", "adapter_config.json")  # a full model, or a LoRA adapter over one
# transformers' and PEFT's file names: a sharded model's index, else the single weights files
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors", "adapter_model.bin")
JSON_FILES = ("config.json", "adapter_config.json", "generation_config.json", "tokenizer.json",
              "tokenizer_config.json", "special_tokens_map.json")
ZIP_MAGIC = b"PK\x03\x04"
CHECKPOINT_STATE = "trainer_state.json"  # written by the Trainer into every checkpoint it saves


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


class ModelFilesError(InputError):
    """A model folder whose files cannot be loaded; the message names the file and how to fix it."""


def remedy(folder: Path) -> str:
    """How to get an intact copy of `folder`: re-run the command that wrote it, when the folder says which."""
    from biocheck.outputs import MARK_FILE

    try:
        writer = (folder / MARK_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        writer = ""
    if writer:
        return f"re-run `{writer}`, which wrote it"
    if (folder / CHECKPOINT_STATE).is_file():
        return (f"delete {folder} to resume from (or select among) the checkpoints before it, or train again "
                "(`biocheck train`)")
    return "copy or download the model again (or re-run the stage that wrote it)"


NO_WEIGHTS = f"no weights file ({', '.join(WEIGHT_FILES[:2])} or a sharded {WEIGHT_INDEXES[0]})"


def model_dir_gap(path: Path) -> str | None:
    """What keeps `path` from being a model folder the loader loads, or None: the folder itself, a config (a
    full model's config.json, or a LoRA adapter's adapter_config.json), or the weights a load reads (a single
    file, or a sharded model's index). The one test of "is a model folder"; whether those files are intact is
    `check_model_dir`'s (it reads them), so a damaged folder is reported by what loads it, never passed over."""
    path = Path(path)
    if not path.is_dir():
        return "no such model folder"
    if not any((path / name).is_file() for name in CONFIGS):
        return "not a model folder (no config.json)"
    if not any((path / name).is_file() for name in (*WEIGHT_INDEXES, *WEIGHT_FILES)):
        return NO_WEIGHTS
    return None


def is_model_dir(path: Path | str) -> bool:
    """Whether `path` holds a model (or LoRA adapter) the loader loads: a config and its weights files."""
    return model_dir_gap(Path(path)) is None


def check_model_dir(path: Path, fix: str | None = None) -> None:
    """Raise ModelFilesError (one line: the file, what is wrong, `fix` or `remedy(path)`) unless `path` holds
    a loadable model: a model folder (`model_dir_gap`), JSON files that parse, and weights whose sizes match
    their headers."""
    path = Path(path)
    fix = fix or remedy(path)
    gap = model_dir_gap(path)
    if gap is not None and gap != NO_WEIGHTS:
        raise ModelFilesError(f"{path}: {gap}; {fix}.")
    for name in JSON_FILES:  # a config cut short is named before the weights' absence
        _check_json(path / name, fix)
    weights = weight_files(path, fix)
    if not weights:  # no weights file, or an index that lists none
        raise ModelFilesError(f"{path}: {NO_WEIGHTS}; {fix}.")
    for file in weights:
        check_weights_file(file, fix)


def _check_json(file: Path, fix: str) -> Any:
    if not file.is_file():
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ModelFilesError(f"{file}: not valid JSON, cut short or overwritten ({e}); {fix}.") from None


def weight_files(path: Path, fix: str | None = None) -> list[Path]:
    """The weights files a load reads: the shards a sharded model's index lists, else the single files."""
    fix = fix or remedy(path)
    for name in WEIGHT_INDEXES:
        index = _check_json(path / name, fix)
        if index is None:
            continue
        shards = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(shards, dict) or not all(isinstance(v, str) for v in shards.values()):
            raise ModelFilesError(f"{path / name}: has no weight_map of tensor names to files; {fix}.")
        files = [path / shard for shard in sorted(set(shards.values()))]
        for file in files:
            if not file.is_file():
                raise ModelFilesError(f"{file}: missing (listed in {name}); {fix}.")
        return files
    return [path / name for name in WEIGHT_FILES if (path / name).is_file()]


def check_weights_file(file: Path, fix: str) -> None:
    """safetensors: the header's tensors must cover the file exactly; anything torch saved (.bin, .pt): a zip
    whose directory (at the very end) is intact. Either fails for a file cut short."""
    what = "weights file" if file.suffix in (".safetensors", ".bin") else "file"
    damaged = f"{file}: the {what} is damaged or incomplete"
    if file.suffix == ".safetensors":
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(str(file), framework="numpy"):
                pass
        except (SafetensorError, OSError) as e:
            raise ModelFilesError(f"{damaged} ({e}); {fix}.") from None
    else:
        try:
            with file.open("rb") as f:
                zipped = f.read(4) == ZIP_MAGIC  # torch.save's format since 1.6; an older pickle is not checked
            if zipped or file.stat().st_size == 0:
                with zipfile.ZipFile(file) as z:
                    z.namelist()
        except (zipfile.BadZipFile, OSError) as e:
            raise ModelFilesError(f"{damaged} ({e}); {fix}.") from None


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


class _HeldReport(logging.Filter):
    """Holds back the load report transformers logs before it raises, so a failed load is one error line."""

    LOGGER = "transformers.modeling_utils"  # from_pretrained logs the report there

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False

    def release(self) -> None:
        logger = logging.getLogger(self.LOGGER)
        logger.removeFilter(self)
        for record in self.records:
            logger.handle(record)
        self.records.clear()


@contextlib.contextmanager
def _report_held() -> Iterator[_HeldReport]:
    held = _HeldReport()
    logging.getLogger(_HeldReport.LOGGER).addFilter(held)
    try:
        yield held
    finally:
        logging.getLogger(_HeldReport.LOGGER).removeFilter(held)


def load_model(ref: str | Path, device: str = "auto", dtype: Any = None, cache_dir: str | Path | None = None) -> LoadedModel:
    """`ref` (a folder, a hub id, or either as "transformers:<ref>") resolved and loaded. Raises InputError
    (ModelNotFoundError for a reference that resolves to nothing) with one line naming the spec; the caller
    words it as its own error class."""
    from biocheck.llm.resolve import resolve_model

    ref = spec_ref(str(ref), SPEC_KIND)
    spec = f"{SPEC_KIND}:{ref}"
    path = resolve_model(ref, cache_dir=cache_dir)
    try:
        check_model_dir(path)
    except ModelFilesError as e:
        raise ModelFilesError(f"{spec}: {e}") from None
    try:
        with _report_held() as report:  # transformers' table of mismatched weights, then its RuntimeError
            model, tokenizer, dev = load_causal_lm(path, device, dtype)
            report.release()  # loaded: the report (e.g. weights newly initialised) is shown as ever
    except (OSError, ValueError, KeyError) as e:
        raise InputError(f"{spec}: could not load the model/tokenizer from {path}: {e}") from None
    except RuntimeError as e:  # transformers: weights whose shapes config.json does not describe
        if "mismatch" not in str(e):
            raise
        raise ModelFilesError(f"{spec}: the weights in {path} do not fit its config.json (a size such as "
                              f"hidden_size differs from the weights'); restore config.json, or "
                              f"{remedy(path)}.") from None
    return LoadedModel(spec, path, model, tokenizer, dev)
