"""Run the agent on a batch of claims: traces per claim, resumable, and a summary (`biocheck check --claims`).

The agent itself is built from params by `biocheck.pipeline.agent`."""

from __future__ import annotations

import json
import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from biocheck.agent.episode import Agent, Episode
from biocheck.io import InputError, read_jsonl, write_text_atomic

log = logging.getLogger(__name__)


def read_claims(path: Path) -> list[dict[str, Any]]:
    """Claims for a batch: prepared records (id, claim, label, dataset) or just {"claim": ...} per line."""
    rows = read_jsonl(path)
    claims = []
    for i, row in enumerate(rows, start=1):
        claim = row.get("claim")
        if not isinstance(claim, str) or not claim.strip():
            raise InputError(f"{path}, record {i}: needs a non-empty 'claim' string.")
        claims.append(
            {
                "claim": claim,
                "claim_id": str(row.get("id", i)),
                "dataset": row.get("dataset"),
                "gold_label": row.get("label"),
            }
        )
    ids = Counter(c["claim_id"] for c in claims)
    dup = [k for k, n in ids.items() if n > 1]
    if dup:
        raise InputError(f"{path}: duplicate claim ids {dup[:5]}; traces are written per id.")
    return claims


def trace_path(out_dir: Path, claim_id: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in claim_id)
    return out_dir / f"{safe}.json"


def write_trace(episode: Episode, path: Path) -> None:
    write_text_atomic(path, episode.model_dump_json(indent=2) + "\n")


def run_batch(
    agent: Agent,
    claims: list[dict[str, Any]],
    out_dir: Path,
    workers: int = 1,
    progress: bool = True,
    resume: bool = True,
) -> dict[str, Any]:
    """Run every claim, writing one trace per claim as it finishes; a rerun skips finished claims."""
    out_dir.mkdir(parents=True, exist_ok=True)
    todo = [c for c in claims if not (resume and trace_path(out_dir, c["claim_id"]).exists())]
    if len(todo) < len(claims):
        log.info("resuming: %d of %d claims already have a trace in %s", len(claims) - len(todo), len(claims), out_dir)

    def one(c: dict[str, Any]) -> Episode:
        ep = agent.run(c["claim"], claim_id=c["claim_id"], dataset=c.get("dataset"), gold_label=c.get("gold_label"))
        write_trace(ep, trace_path(out_dir, c["claim_id"]))
        return ep

    episodes: list[Episode] = []
    with (
        ThreadPoolExecutor(max_workers=max(1, workers)) as pool,
        tqdm(total=len(todo), desc="episodes", unit="claim", disable=not progress) as bar,
    ):
        for ep in pool.map(one, todo):
            episodes.append(ep)
            bar.update(1)
    summary = summarize([Episode.model_validate_json(trace_path(out_dir, c["claim_id"]).read_text()) for c in claims])
    write_text_atomic(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    n = len(episodes) or 1
    conclusions = Counter(e.report.conclusion.value if e.report.conclusion else "none" for e in episodes)
    return {
        "episodes": len(episodes),
        "mean_searches": sum(e.searches for e in episodes) / n,
        "parsed_ok_rate": sum(1 for e in episodes if e.report.conclusion and not e.parse_problems) / n,
        "conclusions": dict(conclusions),
        "stop_reasons": dict(Counter(e.stop_reason for e in episodes)),
        "mean_seconds": sum(e.timing.get("total_s", 0.0) for e in episodes) / n,
    }
