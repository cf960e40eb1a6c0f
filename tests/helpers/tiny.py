"""The tiny Qwen3 model's inputs: a small config and a word corpus its tokenizer is trained on."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from biocheck.base_model.tiny import TinyModelConfig

_WORDS = ("vitamin", "supplementation", "fracture", "risk", "elderly", "patients", "randomized", "trial",
    "placebo", "cohort", "mortality", "aspirin", "stroke", "prevention", "cardiovascular", "outcomes", "insulin",
    "resistance", "obesity", "adipose", "tissue", "inflammation", "cytokine", "expression", "tumour", "growth",
    "metastasis", "chemotherapy", "survival", "hazard", "ratio", "confidence", "interval", "significant",
    "increase", "decrease", "association", "mice", "cells", "protein", "receptor", "signalling", "pathway",
    "mutation", "gene", "transcription", "dose", "months", "years", "women", "men", "children", "infection",
    "vaccine", "antibody", "response", "blood", "pressure", "cholesterol")


def write_corpus(path: Path, n_docs: int = 120, seed: int = 0, id_key: str = "id") -> Path:
    """A deterministic corpus.jsonl in the prepared schema (or SciFact's, with id_key="doc_id")."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n_docs):
            title = " ".join(rng.choices(_WORDS, k=8)).capitalize() + "."
            abstract = [" ".join(rng.choices(_WORDS, k=rng.randint(8, 20))).capitalize() + f" ({rng.randint(1, 99)}%)."
                        for _ in range(rng.randint(3, 6))]
            f.write(json.dumps({id_key: str(1000 + i), "title": title, "abstract": abstract, "structured": False}) + "\n")
    return path


def small_config(tmp: Path, corpus: Path, **kw) -> TinyModelConfig:
    values = {"out_dir": tmp / "model", "corpus": corpus, "seed": 0, "vocab_size": 1024, "max_docs": 100,
              "prompt_repeats": 20, "max_position_embeddings": 4096}
    values.update(kw)
    return TinyModelConfig(**values)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl")
