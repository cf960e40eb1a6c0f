"""`check_passage_claims`: the unchanged agent on each claim of a passage, through the batch machinery (one trace
per claim, resume), and the typed result a narrative report is rendered from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.agent.episode import Agent, Episode
from biocheck.agent.run import run_batch, shown_id, trace_path
from biocheck.labels import Label
from biocheck.narrative.schema import ExtractedClaim, Extraction, Method, SkippedSpan

_PLURAL = {"question": "questions", "opinion": "opinions", "anecdote": "anecdotes", "not a claim": "not claims"}


@dataclass(frozen=True)
class CheckedClaim:
    """One extracted claim after the agent ran on it: a conclusion and its trace, or the error it failed with."""

    id: str
    start: int
    end: int
    text: str
    conclusion: Label | None  # None: the claim failed, or its report has no conclusion
    trace: Path | None  # None: the claim failed (a failed episode leaves no trace)
    error: str | None = None


@dataclass(frozen=True)
class NarrativeResult:
    passage: str
    claims: tuple[CheckedClaim, ...]
    skipped: tuple[SkippedSpan, ...]
    method: Method
    note: str
    overall: str
    reused: int = 0  # traces reused from an earlier run on this --out


def claim_ids(claims: tuple[ExtractedClaim, ...]) -> list[str]:
    """`c{start}-{end}` per claim (the same passage gives the same ids, so a rerun reuses the traces); a second
    claim from one span gets `.2`, a third `.3`."""
    seen: Counter[str] = Counter()
    out = []
    for c in claims:
        base = f"c{c.start}-{c.end}"
        seen[base] += 1
        out.append(base if seen[base] == 1 else f"{base}.{seen[base]}")
    return out


def check_passage_claims(extraction: Extraction, agent: Agent, out_dir: Path, workers: int = 1,
                         progress: bool = False, search: dict[str, Any] | None = None) -> NarrativeResult:
    """Run the agent on every claim of `extraction` (traces in `out_dir`, reused on a rerun); the result."""
    ids = claim_ids(extraction.claims)
    todo = [{"claim_id": cid, "claim": c.text} for cid, c in zip(ids, extraction.claims, strict=True)]
    summary = run_batch(agent, todo, out_dir, workers=workers, progress=progress, search=search)
    failed = {f["id"]: f["error"] for f in summary["failed"]}
    checked = []
    for cid, c in zip(ids, extraction.claims, strict=True):
        error = failed.get(shown_id(cid))
        path = None if error is not None else trace_path(out_dir, cid)
        conclusion = None
        if path is not None:
            conclusion = Episode.model_validate_json(path.read_text(encoding="utf-8")).report.conclusion
        checked.append(CheckedClaim(cid, c.start, c.end, c.text, conclusion, path, error))
    return NarrativeResult(extraction.passage, tuple(checked), extraction.skipped, extraction.method,
                           extraction.note, overall_line(checked, extraction.skipped),
                           reused=int(summary.get("reused", 0)))


def overall_line(claims: list[CheckedClaim], skipped: tuple[SkippedSpan, ...]) -> str:
    """"3 claims: 2 supported, 1 refuted; 1 sentence not check-worthy" (label names from biocheck.labels)."""
    if not claims:
        if not skipped:
            return "0 claims: the extraction found no check-worthy claim in the passage"
        reasons = Counter(s.reason for s in skipped)
        parts = [f"{n} {r if n == 1 else _PLURAL.get(r, r)}" for r, n in reasons.most_common()]
        return f"0 claims: every sentence was skipped: {', '.join(parts)}"
    labels = Counter(c.conclusion for c in claims if c.error is None)
    parts = [f"{labels[label]} {label.display.lower()}" for label in Label if labels[label]]
    if labels[None]:
        parts.append(f"{labels[None]} without a conclusion")
    failed = sum(1 for c in claims if c.error is not None)
    if failed:
        parts.append(f"{failed} failed")
    line = f"{len(claims)} claim{'' if len(claims) == 1 else 's'}: {', '.join(parts)}"
    if skipped:
        line += f"; {len(skipped)} sentence{'' if len(skipped) == 1 else 's'} not check-worthy"
    return line
