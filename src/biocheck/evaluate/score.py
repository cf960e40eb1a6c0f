"""Score saved episode traces (what `biocheck score` runs): one trace, or a folder of them -> metrics JSON."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from biocheck.agent.episode import Episode
from biocheck.io import InputError, write_text_atomic
from biocheck.labels import Label
from biocheck.measures import aggregate
from biocheck.rewards.components import EpisodeView, RewardBreakdown, RewardConfig, score_many
from biocheck.rewards.judge.base import Judge

log = logging.getLogger(__name__)

SKIP = ("summary.json", "metrics.json", "scores.json")  # what `biocheck check --out` and this module write beside traces


def load_trace(path: str | os.PathLike[str]) -> Episode:
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a folder, not a trace; score every trace in it with `--traces {p}`")
    try:
        return Episode.model_validate_json(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: no such trace file") from None
    except OSError as e:
        raise InputError(f"{p}: cannot read the trace ({e.strerror or e})") from None
    except (ValidationError, ValueError) as e:
        raise InputError(f"{p}: not an episode trace ({str(e).splitlines()[0]})") from None


def score_trace(path_or_episode: str | os.PathLike[str] | Episode, cfg: RewardConfig | None = None,
                judge: Judge | None = None, gold: Label | str | None = None) -> RewardBreakdown:
    """The reward breakdown of one trace (a file or an `Episode`); `gold` overrides the trace's gold label."""
    ep = path_or_episode if isinstance(path_or_episode, Episode) else load_trace(path_or_episode)
    return score_many([EpisodeView.from_episode(ep, gold)], cfg, judge)[0]


def trace_files(directory: str | os.PathLike[str]) -> list[Path]:
    d = Path(directory)
    if not d.is_dir():
        raise InputError(f"{d}: no such trace folder")
    return sorted(p for p in d.glob("*.json") if p.name not in SKIP)


def score_traces(directory: str | os.PathLike[str], cfg: RewardConfig | None = None, judge: Judge | None = None,
                 *, n_resamples: int = 1000, seed: int = 0,
                 per_episode: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Score every trace in a folder (one judge call for all of them) and aggregate: reward means + metrics.

    Files that are not traces (e.g. summary.json) are skipped with a warning. With `per_episode`, each
    episode's breakdown is also written there as JSON lines (claim_id + breakdown).
    """
    episodes: list[Episode] = []
    for p in trace_files(directory):
        try:
            episodes.append(load_trace(p))
        except InputError as e:
            log.warning("skipped %s", e)
    if not episodes:
        raise InputError(f"{directory}: no episode traces (*.json) to score")
    cfg = cfg or RewardConfig()
    breakdowns = score_many([EpisodeView.from_episode(ep) for ep in episodes], cfg, judge)
    result = aggregate(breakdowns, n_resamples=n_resamples, seed=seed)
    if judge is not None and hasattr(judge, "stats"):
        result["judge_cache"] = judge.stats()
    if per_episode is not None:
        lines = [json.dumps({"claim_id": ep.claim_id, **b.model_dump(mode="json")}) for ep, b in
                 zip(episodes, breakdowns, strict=True)]
        write_text_atomic(Path(per_episode), "\n".join(lines) + "\n")
    return result
