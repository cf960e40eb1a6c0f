"""Helpers shared by the evidence-layer benchmarks: inputs, metrics, the reference pipeline."""

from __future__ import annotations

import json
import math
import random
import re
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from biocheck.evidence.corpus import articles_from_corpus
from biocheck.evidence.types import Article

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = ROOT / "data/prepared/corpus.jsonl"
DEFAULT_CLAIMS = ROOT / "data/prepared/full/scifact.jsonl"


@dataclass(frozen=True)
class Claim:
    id: str
    text: str
    relevant: frozenset[str]


def load_retrieval_claims(path: Path, split: str | None) -> list[Claim]:
    """Claims with at least one cited doc, from raw SciFact or prepared ClaimRecord lines.

    ``split`` filters prepared records (SciFact dev is split "test" there); raw SciFact files
    have no split field and are taken whole.
    """
    claims = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        if split and "split" in record and record["split"] != split:
            continue
        relevant = frozenset(str(d) for d in record.get("cited_doc_ids") or [])
        if relevant:
            claims.append(Claim(str(record["id"]), record["claim"], relevant))
    return claims


def load_articles(path: Path) -> list[Article]:
    return list(articles_from_corpus(path))


def ndcg_at_k(ranked: Sequence[str], relevant: frozenset[str], k: int = 10) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, doc in enumerate(ranked[:k]) if doc in relevant)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(relevant), k)))
    return dcg / ideal


def recall_at_k(ranked: Sequence[str], relevant: frozenset[str], k: int = 20) -> float:
    return len(relevant & set(ranked[:k])) / len(relevant)


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)

    def pick(q: float) -> float:  # nearest-rank percentile
        return ms[min(len(ms) - 1, math.ceil(q * len(ms)) - 1)]

    return {
        "n": len(ms),
        "p50_ms": round(pick(0.50), 3),
        "p99_ms": round(pick(0.99), 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "max_ms": round(ms[-1], 3),
    }


class ReferenceBM25:
    """The reference pipeline: bm25s (Lucene BM25, k1=1.5, b=0.75) over title + abstract,
    English stopwords, Snowball English stemmer (PyStemmer)."""

    def __init__(self, articles: Sequence[Article]) -> None:
        import logging

        import bm25s
        import Stemmer

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self._bm25s = bm25s
        self.stemmer = Stemmer.Stemmer("english")
        self.ids = [a.pmid for a in articles]
        tokens = bm25s.tokenize(
            [f"{a.title} {a.abstract}" for a in articles],
            stopwords="en",
            stemmer=self.stemmer,
            show_progress=False,
        )
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    def search(self, text: str, k: int) -> list[str]:
        tokens = self._bm25s.tokenize([text], stopwords="en", stemmer=self.stemmer, show_progress=False)
        if not tokens.vocab:  # only stopwords
            return []
        docs, _ = self.retriever.retrieve(tokens, k=min(k, len(self.ids)), show_progress=False)
        return [self.ids[i] for i in docs[0]]


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9-]{3,}")
_STOP = {
    "with",
    "that",
    "this",
    "from",
    "have",
    "were",
    "which",
    "than",
    "their",
    "there",
    "these",
    "into",
    "when",
    "does",
    "more",
    "less",
    "associated",
    "increased",
    "decreased",
    "reduces",
    "increases",
}


def claim_words(claim: str) -> list[str]:
    """Content words of a claim (4+ characters, no hyphen at the ends), for building test queries."""
    words = [w.strip("-").lower() for w in _WORD.findall(claim)]
    return [w for w in dict.fromkeys(words) if len(w) >= 4 and w not in _STOP]


def boolean_queries(claims: Sequence[Claim], count: int, seed: int) -> list[tuple[str, str]]:
    """A fixed, seeded mix of realistic PubMed queries built from claim words: (kind, query)."""
    rng = random.Random(seed)
    kinds = ["and2", "and3_implicit", "or_and", "phrase", "fields", "not", "truncation", "mesh_fallback"]
    out: list[tuple[str, str]] = []
    pool = [c for c in claims if len(claim_words(c.text)) >= 3]
    while len(out) < count:
        w = claim_words(rng.choice(pool).text)
        a, b, c = rng.sample(w, 3)
        kind = kinds[len(out) % len(kinds)]
        query = {
            "and2": f"{a} AND {b}",
            "and3_implicit": f"{a} {b} {c}",
            "or_and": f"({a} OR {b}) AND {c}",
            "phrase": f'"{w[0]} {w[1]}"',
            "fields": f"{a}[tiab] AND {b}[ti]",
            "not": f"{a} NOT {b}",
            "truncation": f"{a[:5]}* AND {b}",
            "mesh_fallback": f"{a}[mh] OR {b}[tiab]",
        }[kind]
        out.append((kind, query))
    return out


def synthetic_articles(base: Sequence[Article], size: int, seed: int) -> Iterator[Article]:
    """``size`` abstracts re-assembled from random sentences of ``base`` (realistic words and
    lengths; the vocabulary stays that of ``base``, so postings are denser than real PubMed's)."""
    rng = random.Random(seed)
    sentences = [s for a in base for s in re.split(r"(?<=[.!?])\s+", a.abstract) if s]
    titles = [a.title for a in base if a.title]
    for i in range(size):
        abstract = " ".join(rng.choice(sentences) for _ in range(rng.randint(5, 12)))
        yield Article(pmid=f"syn{i:07d}", title=rng.choice(titles), abstract=abstract, source="synthetic")
