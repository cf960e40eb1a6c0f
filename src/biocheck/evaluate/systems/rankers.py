"""Sentence rankers for the CER baseline: `rank(claim, sentences, k)` -> indices of the k best, best first.

  bm25               the project's own BM25 (the local search engine, evidence/local.py: tantivy with the
                     index's analyzers) over the sentences, built in memory per claim (~40 ms for a
                     few hundred sentences). Sentences no claim word matches follow in their given
                     order, so k sentences come back whenever there are k.
  encoder:<model>    cosine similarity of mean-pooled hidden states of a Hugging Face encoder (any id or
                     local path AutoModel loads, e.g. a sentence-transformers checkpoint); transformers and
                     torch are imported only when this ranker is configured, and the model loads once.
"""

from __future__ import annotations

import threading
from typing import Protocol

from biocheck.llm.spec import split_spec

RANKERS = ("bm25", "encoder:<hf model id or path>")


class Ranker(Protocol):
    spec: str

    def rank(self, claim: str, sentences: list[str], k: int) -> list[int]: ...


def make_ranker(spec: str) -> Ranker:
    kind, ref = split_spec(spec) if isinstance(spec, str) else ("", "")
    if spec == "bm25":
        return BM25Ranker()
    if kind == "encoder" and ref.strip():
        return EncoderRanker(ref.strip())
    raise ValueError(f"cer.ranker: {spec!r} is not a ranker; use 'bm25' (offline) or 'encoder:<hf model id or "
                     "path>' (e.g. encoder:sentence-transformers/all-MiniLM-L6-v2)")


def _fill(order: list[int], n: int, k: int) -> list[int]:
    """`order` then every other index in its given order, k at most (ties and non-matches keep list order)."""
    seen = set(order)
    return (order + [i for i in range(n) if i not in seen])[:k]


class BM25Ranker:
    spec = "bm25"

    def rank(self, claim: str, sentences: list[str], k: int) -> list[int]:
        from biocheck.evidence.local import LocalIndex
        from biocheck.evidence.types import Article

        if not sentences or k < 1:
            return []
        width = len(str(len(sentences)))
        # Zero-padded ids: the engine breaks score ties by id, which is then the sentences' own order.
        index = LocalIndex.build((Article(pmid=str(i).zfill(width), abstract=s) for i, s in enumerate(sentences)),
                                 heap_mb=15)
        hits = index.search(claim, n=min(k, len(sentences)), mode="bm25").articles
        return _fill([int(a.pmid) for a in hits], len(sentences), k)


class EncoderRanker:
    def __init__(self, model: str) -> None:
        self.spec = f"encoder:{model}"
        self.model_ref = model
        self._lock = threading.Lock()
        self._loaded = None

    def load(self):
        """Load the encoder once (raises ValueError with the model reference when it cannot)."""
        with self._lock:
            if self._loaded is None:
                from transformers import AutoModel, AutoTokenizer

                try:
                    tok = AutoTokenizer.from_pretrained(self.model_ref)
                    model = AutoModel.from_pretrained(self.model_ref).eval()
                except (OSError, ValueError) as e:
                    raise ValueError(f"cer.ranker: cannot load encoder {self.model_ref!r} ({str(e).splitlines()[0]}); "
                                     "give a Hugging Face model id or a local model folder") from None
                if tok.pad_token is None:
                    tok.pad_token = tok.eos_token
                self._loaded = (tok, model)
        return self._loaded

    def embed(self, texts: list[str]):
        import torch

        tok, model = self.load()
        with torch.no_grad():
            batch = tok(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
            return torch.nn.functional.normalize(pooled.float(), dim=-1)

    def rank(self, claim: str, sentences: list[str], k: int) -> list[int]:
        if not sentences or k < 1:
            return []
        vectors = self.embed([claim, *sentences])
        scores = (vectors[1:] @ vectors[0]).tolist()
        # Stable sort: equal scores keep the sentences' order (retrieval rank, then position in the abstract).
        return sorted(range(len(sentences)), key=lambda i: -scores[i])[:k]
