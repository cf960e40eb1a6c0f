"""A sharded evaluation: each system's claims cut into shards that run in parallel (Dask workers), then one
full pass that writes the results.

A shard runs its claims through the harness, which caches every episode as a trace under the evaluation
folder (atomically, one file per claim) and writes nothing else. The full pass is the ordinary evaluation
(evaluate/evaluation.py) over every claim: it finds every episode cached and writes the predictions, metrics,
plots, gallery and MLflow runs exactly as a serial run does. So the results are the serial results by
construction, and nothing is written twice. Shards are contiguous runs of claims in claim order
(`split`), so the same inputs always give the same shards.

Besides its episodes, a shard costs a task and a system build (its model and search index: tens of seconds
for a real model). So each shard holds at least one batch of claims (`min_claims`: the claims the stage
generates together), a worker keeps the last system it built (`held`) for the next shard of that system, and
each shard reports its system's fingerprint, so the full pass finds the cached episodes without building any
system again. With one shard per (system, dataset) the flow does not shard at all (`one_plan`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
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


def plan(systems: Sequence[str], claims: dict[str, list[ClaimRecord]], shards: int,
         min_claims: int = 1) -> list[Shard]:
    """Every (system, dataset)'s claims in at most `shards` shards of at least `min_claims` claims each (one
    shard when there are fewer): system, then dataset, then claim order."""
    if min_claims < 1:
        raise ValueError(f"min_claims: {min_claims} must be >= 1")
    out = []
    for system in systems:
        for dataset, records in claims.items():
            runs = split([c.id for c in records], max(1, min(shards, len(records) // min_claims)))
            out += [Shard(system, dataset, tuple(ids), k, len(runs)) for k, ids in enumerate(runs)]
    return out


def one_plan(shards: Sequence[Shard]) -> bool:
    """True when no (system, dataset) has more than one shard: no claims to run side by side, so Dask would add
    only a cluster's start-up and a system build per worker to what the stage itself does."""
    return all(s.of == 1 for s in shards)


_held: list[tuple[Hashable, System]] = []  # this process's last built system, with its key


def held(key: Hashable, make: Callable[[], System]) -> System:
    """The system `make` builds for `key`, reused while the next shards ask for the same key (a Dask worker runs
    its shards one after another); a new key closes the previous one first, so a worker holds one model, as a
    serial run does."""
    if _held and _held[0][0] == key:
        return _held[0][1]
    while _held:
        _, old = _held.pop()
        close = getattr(old, "close", None)
        if callable(close):  # free its model before the next one loads
            close()
    system = make()
    _held.append((key, system))
    return system


def run_shard(system: System, claims: list[ClaimRecord], dataset: str, out_dir: Path,
              workers: int = 1) -> dict[str, float | str]:
    """The shard's episodes, cached as traces in `out_dir` (no predictions, no metrics); claims, errors,
    seconds and the system's fingerprint (the full pass reuses it). A claim whose model failed leaves no trace:
    the full pass tries it once more, as a rerun would."""
    t0 = time.perf_counter()
    preds = run_system(system, claims, dataset, out_dir, workers=workers, progress=False, shard=True)
    return {"claims": len(preds), "errors": sum(p.error is not None for p in preds),
            "seconds": round(time.perf_counter() - t0, 3), "fingerprint": system.fingerprint()}
