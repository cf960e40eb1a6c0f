"""`biocheck evidence build`: index the abstract corpus (and optional PubMed baseline files) for local search.

Inputs: the prepared corpus (`data/prepared/corpus.jsonl`) and any NCBI PubMed baseline/update XML
files (`PubmedArticleSet`, gzipped or not, streamed) listed in `evidence.baseline`. Baseline
articles also go into the evidence store, so the `replay` backend can answer from them.
Outputs: the index (`data/evidence/index`, replaced as a whole), the evidence store
(`data/evidence/evidence.sqlite`, created if missing and never emptied: it keeps every query and
abstract fetched) and index/store statistics (`metrics/evidence.json`; no build time, which would make the
same inputs give other bytes: it is printed and logged to MLflow instead).
"""

from __future__ import annotations

import glob
import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import annotated_types as at

from biocheck.evidence.types import Article
from biocheck.io import InputError, write_json_atomic

log = logging.getLogger(__name__)

MAX_THREADS = 8  # tantivy's writer uses at most 8 indexing threads


@dataclass
class EvidenceConfig:
    corpus: Path | None = Path("data/prepared/corpus.jsonl")  # null: index baseline files only
    corpus_source: str = "corpus:scifact"  # provenance label of the corpus articles
    baseline: list[str] = field(default_factory=list)  # PubMed baseline/update XML files or globs
    index_dir: Path = Path("data/evidence/index")
    store: Path = Path("data/evidence/evidence.sqlite")
    metrics_path: Path | None = Path("metrics/evidence.json")
    threads: Annotated[int, at.Ge(1), at.Le(MAX_THREADS)] = 1  # indexing threads
    progress: bool = True

    def __post_init__(self) -> None:
        self.corpus = Path(self.corpus) if self.corpus else None
        self.index_dir, self.store = Path(self.index_dir), Path(self.store)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None
        if isinstance(self.baseline, str):
            self.baseline = [self.baseline]
        if not isinstance(self.baseline, list) or not all(isinstance(b, str) for b in self.baseline):
            raise ValueError(f"evidence.baseline: must be a list of file paths or globs, got {self.baseline!r}")
        if not isinstance(self.corpus_source, str) or not self.corpus_source.strip():
            raise ValueError(f"evidence.corpus_source: {self.corpus_source!r} must name the corpus "
                             "(e.g. corpus:scifact)")
        # A rebuild replaces index_dir as a whole: anything kept inside it would be deleted.
        for key in ("store", "corpus", "metrics_path"):
            inside = getattr(self, key)
            if inside is not None and _within(inside, self.index_dir):
                raise ValueError(f"evidence.{key}: {inside} is inside evidence.index_dir ({self.index_dir}), "
                                 "which every build replaces; put it elsewhere")


def _within(path: Path, folder: Path) -> bool:
    path, folder = Path(os.path.abspath(path)), Path(os.path.abspath(folder))
    return path == folder or folder in path.parents


def baseline_files(patterns: list[str]) -> list[Path]:
    files: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(Path(m).is_file() for m in matches):
            raise InputError(f"evidence.baseline: no file matches {pattern!r}.")
        files.extend(Path(m) for m in matches)
    return files


def _articles(cfg: EvidenceConfig, files: list[Path], store) -> Iterator[Article]:
    from biocheck.evidence.baseline import iter_baseline
    from biocheck.evidence.corpus import articles_from_corpus

    if cfg.corpus is not None:
        if not cfg.corpus.is_file():
            raise InputError(f"{cfg.corpus}: no corpus. Run `biocheck data prepare` first (or set evidence.corpus).")
        try:
            yield from articles_from_corpus(cfg.corpus, source=cfg.corpus_source)
        except ValueError as e:
            raise InputError(str(e)) from None
    for path in files:
        # Baseline articles are also kept in the store (batched), so replay can answer from them.
        stream = iter_baseline(path)
        while batch := list(itertools.islice(stream, 1000)):
            store.put_articles(batch)
            yield from batch


def build_evidence(cfg: EvidenceConfig | None = None) -> dict:
    """Build the index, make sure the store exists; return (and write) their statistics."""
    from biocheck.evidence.article_xml import XMLParseError
    from biocheck.evidence.baseline import check_baseline
    from biocheck.evidence.local import LocalIndex
    from biocheck.evidence.store import EvidenceStore

    cfg = cfg or EvidenceConfig()
    files = baseline_files(cfg.baseline)
    if cfg.corpus is None and not files:
        raise InputError("evidence: nothing to index; set evidence.corpus and/or evidence.baseline.")
    for path in files:  # a wrong file is refused before the store or the index is touched
        try:
            check_baseline(path)
        except XMLParseError as e:
            raise InputError(str(e)) from None
    with EvidenceStore(cfg.store) as store:
        try:
            index = LocalIndex.build(_articles(cfg, files, store), path=cfg.index_dir, progress=cfg.progress,
                                     threads=cfg.threads)
        except XMLParseError as e:
            raise InputError(str(e)) from None
        store_stats = store.stats()
    index_stats = index.stats()
    stats = {
        "index": {k: index_stats[k] for k in ("docs", "docs_with_mesh", "size_bytes") if k in index_stats},
        "store": {k: v for k, v in store_stats.items() if isinstance(v, (int, float, dict)) and k != "path"},
        "baseline_files": len(files),
    }
    if cfg.metrics_path:
        # No build time in the file: DVC hashes it (dvc.lock), so the same inputs must give the same bytes.
        write_json_atomic(cfg.metrics_path, stats)
    # ... but the caller gets it: the CLI prints it, the stage logs it to MLflow.
    stats["index"]["build_seconds"] = index_stats.get("build_seconds")
    return stats


def evidence_stats(index_dir: Path, store: Path) -> dict:
    """`biocheck evidence stats`: the index's and the store's numbers.

    A part that does not exist yet is reported as {"error": ...} in the output; a damaged one
    raises (IndexUnavailable, StoreError: both SearchErrors) with one line saying how to fix it.
    """
    from biocheck.evidence.local import IndexMissing, LocalIndex
    from biocheck.evidence.store import EvidenceStore, resolve_path

    out: dict = {}
    try:
        out["index"] = LocalIndex.open(Path(index_dir)).stats()
    except IndexMissing as e:
        out["index"] = {"error": str(e)}
    store_file = resolve_path(store)
    if store_file.exists():
        with EvidenceStore(store_file) as evidence:
            out["store"] = evidence.stats()
    else:  # looking must not create it
        out["store"] = {"error": f"no evidence store at {store_file}; `biocheck evidence build` creates it"}
    return out
