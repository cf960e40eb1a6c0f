"""A sharded evaluation: each system's claims cut into shards that run in parallel (Dask workers), then one
full pass that writes the results.

A shard runs its claims through the harness, which caches every episode as a trace under the evaluation
folder (atomically, one file per claim) and writes nothing else. The full pass is the ordinary evaluation
(evaluate/stage.py) over every claim: it finds every episode cached and writes the predictions, metrics,
plots, gallery and MLflow runs exactly as a serial run does. So the results are the serial results by
construction, and nothing is written twice. Shards are contiguous runs of claims in claim order
(`split`), so the same inputs always give the same shards.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.harness import run_system
from biocheck.evaluate.systems.base import System

T = TypeVar("T")


def split(items: Sequence[T], n: int) -> list[list[T]]:
    """`items` in at most `n` contiguous, non-empty runs, in order, sizes differing by at most one (the
    first ones larger); fewer runs when there are fewer items than `n`. The same inputs always give the
    same shards."""
    if n < 1:
        raise ValueError(f"shards: {n} must be >= 1")
    n = min(n, len(items))
    size, extra = divmod(len(items), n) if n else (0, 0)
    runs, start = [], 0
    for k in range(n):
        end = start + size + (k < extra)
        runs.append(list(items[start:end]))
        start = end
    return runs


@dataclass(frozen=True)
class Shard:
    """Claims of one dataset for one system: what one Dask task runs."""

    system: str
    dataset: str
    claim_ids: tuple[str, ...]
    index: int = 0  # k of `of` within (system, dataset), for names in logs and the Prefect UI
    of: int = 1

    @property
    def name(self) -> str:
        return f"{self.system}/{self.dataset}#{self.index + 1}of{self.of}"


def plan(systems: Sequence[str], claims: dict[str, list[ClaimRecord]], shards: int) -> list[Shard]:
    """Every (system, dataset)'s claims in `shards` shards: system, then dataset, then claim order."""
    out = []
    for system in systems:
        for dataset, records in claims.items():
            runs = split([c.id for c in records], shards)
            out += [Shard(system, dataset, tuple(ids), k, len(runs)) for k, ids in enumerate(runs)]
    return out


def run_shard(system: System, claims: list[ClaimRecord], dataset: str, out_dir: Path,
              workers: int = 1) -> dict[str, float]:
    """The shard's episodes, cached as traces in `out_dir` (no predictions, no metrics); claims, errors and
    seconds for the log. A claim whose model failed leaves no trace: the full pass tries it once more, as a
    rerun would."""
    t0 = time.perf_counter()
    preds = run_system(system, claims, dataset, out_dir, workers=workers, progress=False, shard=True)
    return {"claims": len(preds), "errors": sum(p.error is not None for p in preds),
            "seconds": round(time.perf_counter() - t0, 3)}
