"""An evaluation's outputs without their timing: its predictions files and its eval.json, to compare two runs
(the flow and the stage, shards and a full pass; bench/eval_dask.py)."""

from __future__ import annotations

import json
from pathlib import Path


def without_timing(x):
    """A prediction or metrics JSON without its wall-clock keys (seconds, seconds_total, seconds_mean): the
    only values that differ between two runs of the same episodes."""
    if isinstance(x, dict):
        return {k: without_timing(v) for k, v in x.items() if not k.startswith("seconds")}
    return [without_timing(v) for v in x] if isinstance(x, list) else x


def predictions(out: Path) -> dict:
    """Every predictions file under `out` (path -> its lines), without timing."""
    return {p.relative_to(out).as_posix(): [without_timing(json.loads(line)) for line in p.read_text().splitlines()]
            for p in sorted((out / "predictions").rglob("*.jsonl"))}


def metrics(out: Path, name: str = "eval.json") -> dict:
    return without_timing(json.loads((out / name).read_text()))
