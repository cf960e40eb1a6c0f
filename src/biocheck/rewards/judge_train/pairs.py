"""Claim–paper pairs with the judge's gold answer, built from SciFact's rationales.

A SciFact claim cites abstracts; some are rationale documents (sentences that SUPPORT or CONTRADICT the claim).
  rationale document            -> SUPPORTED / REFUTED (its rationale label)
  cited, not a rationale        -> NEI (the claim's authors looked at it and it says neither)
  BM25 hit, not cited           -> NEI (on topic, but not evidence for this claim)
Sentence level (more, shorter pairs: more signal per second of training) uses the same rules per sentence:
a rationale sentence takes its document's label, any other sentence of a rationale or cited document is NEI.

Training pairs come from SciFact's own train claims that `prepare` kept as `train` (never `val`, which selects
checkpoints, nor `test`); `build_pairs` refuses any other split so a leak fails loudly.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from biocheck.data.schema import ClaimRecord, CorpusDoc
from biocheck.evidence.types import Article
from biocheck.io import InputError, read_jsonl
from biocheck.labels import LABELS, Label

Level = Literal["abstract", "sentence"]
LEVELS: tuple[str, ...] = ("abstract", "sentence")


class JudgeDataError(InputError):
    """Missing or unusable judge training/evaluation data (one line: what, where, how to fix)."""


@dataclass(frozen=True)
class JudgePair:
    """One judge example: a claim, one paper (or one sentence of it) and the label word the judge should say."""

    claim_id: str
    claim: str
    doc_id: str
    title: str
    text: str  # the abstract (abstract level) or one sentence (sentence level)
    label: str  # a biocheck.labels value: SUPPORTED | REFUTED | NEI
    source: str  # rationale | cited | bm25

    def article(self) -> Article:
        return Article(pmid=self.doc_id, title=self.title, abstract=self.text)


def read_claims(prepared: Path, split: str, dataset: str = "scifact") -> list[ClaimRecord]:
    """Every claim of `split` in the prepared release (`full/<dataset>.jsonl`: all labels, no subset)."""
    path = Path(prepared) / "full" / f"{dataset}.jsonl"
    if not path.is_file():
        raise JudgeDataError(f"{path}: missing. Run `biocheck data prepare` (or `dvc repro prepare`) first.")
    claims = [ClaimRecord.model_validate(r) for r in read_jsonl(path)]
    return [c for c in claims if c.split == split]


def read_corpus(prepared: Path) -> dict[str, CorpusDoc]:
    path = Path(prepared) / "corpus.jsonl"
    if not path.is_file():
        raise JudgeDataError(f"{path}: missing. Run `biocheck data prepare` (or `dvc repro prepare`) first.")
    return {d.id: d for d in (CorpusDoc.model_validate(r) for r in read_jsonl(path))}


def bm25_neighbours(claims: Sequence[ClaimRecord], corpus: dict[str, CorpusDoc], k: int) -> dict[str, list[str]]:
    """claim id -> the top-k corpus documents by BM25 (the local search engine's, as CER uses), best first."""
    if k < 1 or not claims:
        return {}
    from biocheck.evidence.local import LocalIndex

    index = LocalIndex.build((Article(pmid=d.id, title=d.title, abstract=d.text) for d in corpus.values()),
                             heap_mb=32)
    return {c.id: [a.pmid for a in index.search(c.claim, n=k, mode="bm25").articles] for c in claims}


def claim_pairs(claim: ClaimRecord, corpus: dict[str, CorpusDoc], level: Level = "abstract",
                bm25: Iterable[str] = (), bm25_per_claim: int = 1) -> list[JudgePair]:
    """The pairs one claim gives (documents missing from the corpus are skipped)."""
    gold = {e.doc_id: e for e in claim.evidence}
    docs: list[tuple[str, str]] = [(d, "rationale") for d in gold]
    docs += [(d, "cited") for d in claim.cited_doc_ids if d not in gold]
    seen = {d for d, _ in docs}
    docs += [(d, "bm25") for d in [d for d in bm25 if d not in seen][:bm25_per_claim]]
    out = []
    for doc_id, source in docs:
        doc = corpus.get(doc_id)
        if doc is None:
            continue
        ev = gold.get(doc_id)
        if level == "abstract":
            label = ev.label.value if ev else Label.NEI.value
            out.append(JudgePair(claim.id, claim.claim, doc_id, doc.title, doc.text, label, source))
            continue
        rationale = set(ev.sentences) if ev else set()
        for i, sentence in enumerate(doc.abstract):
            label = ev.label.value if ev and i in rationale else Label.NEI.value
            out.append(JudgePair(claim.id, claim.claim, doc_id, doc.title, sentence, label, source))
    return out


def build_pairs(claims: Sequence[ClaimRecord], corpus: dict[str, CorpusDoc], *, level: Level = "abstract",
                bm25_per_claim: int = 1, balance: bool = True, max_per_label: int | None = None, seed: int = 0,
                split: str = "train") -> list[JudgePair]:
    """All pairs of `claims` (every one must be of `split`), label-balanced by seeded down-sampling when asked
    (each label keeps as many as the rarest has, at most `max_per_label`), in a seeded shuffled order."""
    if level not in LEVELS:
        raise ValueError(f"judge level {level!r}: expected one of {list(LEVELS)}")
    leaked = sorted({c.split for c in claims} - {split})
    if leaked:
        raise JudgeDataError(f"judge pairs for {split!r} got claims of split(s) {leaked}: only {split} claims may "
                             "build these pairs (val/test claims must never train the judge)")
    neighbours = bm25_neighbours(claims, corpus, bm25_per_claim + 8) if bm25_per_claim > 0 else {}
    pairs: list[JudgePair] = []
    for c in claims:
        pairs += claim_pairs(c, corpus, level, neighbours.get(c.id, ()), bm25_per_claim)
    rng = random.Random(seed)
    if balance or max_per_label:
        by_label: dict[str, list[JudgePair]] = defaultdict(list)
        for p in pairs:
            by_label[p.label].append(p)
        present = [len(by_label[label]) for label in LABELS if by_label[label]]
        cap = min(present) if balance and present else None
        if max_per_label:
            cap = min(cap, max_per_label) if cap else max_per_label
        pairs = [p for label in LABELS
                 for p in (rng.sample(by_label[label], min(cap, len(by_label[label]))) if cap
                           else by_label[label])]
    rng.shuffle(pairs)
    if not pairs:
        raise JudgeDataError(f"no judge pairs from {len(claims)} {split} claims: none has a rationale or cited "
                             "document in the corpus. Check data/prepared (re-run `biocheck data prepare`).")
    return pairs


def label_counts(pairs: Iterable[JudgePair]) -> dict[str, int]:
    counts = dict.fromkeys(LABELS, 0)
    for p in pairs:
        counts[p.label] += 1
    return counts


def claim_folds(groups: Sequence[str], folds: int, seed: int) -> list[int]:
    """The cross-validation fold of each pair: a claim's pairs share one fold (seeded, claims dealt round-robin)."""
    ids = sorted(set(groups))
    random.Random(seed).shuffle(ids)
    fold_of = {g: i % folds for i, g in enumerate(ids)}
    return [fold_of[g] for g in groups]
