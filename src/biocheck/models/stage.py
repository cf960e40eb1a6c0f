"""`biocheck model init`: make `models/base`, the policy every later stage starts from.

`model.base: tiny` builds the quickstart's tiny Qwen3 model locally (no download); anything else is
a Hugging Face model id or a local path (the paper profile: Qwen/Qwen3.5-4B), resolved (snapshot
download when online, the local copy otherwise) and placed under `model.out_dir`, so every later
stage reads one path and DVC hashes one output.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.io import atomic_dir, write_json_atomic


@dataclass
class ModelConfig:
    base: str = "tiny"  # "tiny" | HF model id | local model directory
    out_dir: Path = Path("models/base")
    seed: int = 0
    corpus: Path = Path("data/prepared/corpus.jsonl")  # tiny: tokenizer training text
    tiny: dict[str, Any] = field(default_factory=dict)  # tiny: TinyModelConfig overrides (sizes, vocab, ...)
    metrics_path: Path | None = Path("metrics/model.json")

    def __post_init__(self) -> None:
        self.out_dir, self.corpus = Path(self.out_dir), Path(self.corpus)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)  # same filesystem as the HF cache: no second copy of the weights
    except OSError:
        shutil.copy2(src, dst)


def init_model(cfg: ModelConfig) -> dict[str, Any]:
    if cfg.base == "tiny":
        from biocheck.models.tiny import TinyModelConfig, build_tiny_model

        stats = build_tiny_model(TinyModelConfig(out_dir=cfg.out_dir, corpus=cfg.corpus, seed=cfg.seed, **cfg.tiny))
    else:
        from biocheck.agent.llm.transformers_backend import model_fingerprint
        from biocheck.models.resolve import resolve_model

        src = resolve_model(cfg.base)
        if src.resolve() != cfg.out_dir.resolve():
            with atomic_dir(cfg.out_dir) as tmp:
                shutil.copytree(src, tmp, dirs_exist_ok=True, copy_function=_link_or_copy, symlinks=False)
        stats = {"base": cfg.base, "source": str(src), "fingerprint": model_fingerprint(cfg.out_dir)}
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, {k: v for k, v in stats.items() if k not in ("seconds", "out_dir", "source")})
    return stats
