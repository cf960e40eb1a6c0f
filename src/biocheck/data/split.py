"""Seeded, label-stratified splitting and subsetting (no sklearn needed for this much)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence

from biocheck.data.schema import ClaimRecord


def _by_label(records: Sequence[ClaimRecord]) -> dict[str, list[ClaimRecord]]:
    groups: dict[str, list[ClaimRecord]] = defaultdict(list)
    for r in records:
        groups[r.label.value].append(r)
    return {k: sorted(v, key=lambda r: (len(r.id), r.id)) for k, v in sorted(groups.items())}


def stratified_split(records: Sequence[ClaimRecord], val_fraction: float, seed: int) -> tuple[set[str], set[str]]:
    """Return (train ids, val ids): each label contributes round(n * val_fraction) claims to val."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    rng = random.Random(seed)
    train, val = set(), set()
    for group in _by_label(records).values():
        ids = [r.id for r in group]
        rng.shuffle(ids)
        n_val = round(len(ids) * val_fraction)
        val.update(ids[:n_val])
        train.update(ids[n_val:])
    return train, val


def _quotas(sizes: dict[str, int], k: int) -> dict[str, int]:
    """Largest-remainder allocation of k over groups, proportional to their sizes."""
    total = sum(sizes.values())
    raw = {g: k * n / total for g, n in sizes.items()}
    quota = {g: int(x) for g, x in raw.items()}
    for g in sorted(raw, key=lambda g: (-(raw[g] - quota[g]), g))[: k - sum(quota.values())]:
        quota[g] += 1
    return quota


def _balanced_quotas(sizes: dict[str, int], k: int) -> dict[str, int]:
    """k over groups as evenly as their sizes allow: each gets k // groups, a small group gives its shortfall to the
    others, and the remainder goes to the largest groups first."""
    quota = dict.fromkeys(sizes, 0)
    left = k
    while left > 0:
        open_ = [g for g in sorted(sizes, key=lambda g: (-sizes[g], g)) if quota[g] < sizes[g]]
        if not open_:
            break
        share = max(1, left // len(open_))
        for g in open_:
            take = min(share, sizes[g] - quota[g], left)
            quota[g] += take
            left -= take
            if left == 0:
                break
    return quota


def stratified_subset(records: Sequence[ClaimRecord], k: int | None, seed: int,
                      balanced: bool = False) -> list[ClaimRecord]:
    """A seeded subset of k records with the label mix of the whole (`balanced`: as many of each label as the
    records allow), kept in the input order."""
    if k is None or k >= len(records):
        return list(records)
    if k < 0:
        raise ValueError(f"subset size must be >= 0, got {k}")
    groups = _by_label(records)
    sizes = {g: len(v) for g, v in groups.items()}
    quota = _balanced_quotas(sizes, k) if balanced else _quotas(sizes, k)
    rng = random.Random(seed)
    keep = set()
    for g, members in groups.items():
        keep.update(id(r) for r in rng.sample(members, quota[g]))
    return [r for r in records if id(r) in keep]
