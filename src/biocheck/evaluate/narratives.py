"""The passage benchmark's evaluation (the `narratives` stage; docs/narratives.md).

Each benchmark passage (narrative/bench.py: 2-4 SciFact held-out claims, connectives, one non-claim) is turned
into claims four ways, the arms of narrative_scores.ARMS: its gold claims; the extractor the config names (the
checked system's own chat model, or the sentence rule); the sentence rule (the one-claim-per-sentence
baseline); the whole passage as one claim (the other baseline). The unchanged agent of one evaluated system
checks every claim through the evaluation harness (evaluate/harness.run_system: one cached trace per claim, so a
rerun runs only what is missing), scored by the evaluation's scorer (EHR, EQS, the funnel where the claim matches
a gold one). A claim's id is a digest of its text, so a text several arms share (most sentences are gold claims
verbatim; the connectives recur across passages) is checked once.

A model extraction is cached per passage under out_dir/extractions/<key>/ (the key: the system's fingerprint and
the extraction prompt's hash), so a resumed run does not ask the model again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.bounds import Count, NonNegative
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.harness import load_episode, run_system
from biocheck.evaluate.narrative_scores import ARMS, Checked, GoldRef, PassageArm, narrative_metrics, outcomes
from biocheck.io import InputError, json_digest, write_json_atomic
from biocheck.labels import Label
from biocheck.llm.base import LLMError
from biocheck.narrative.bench import BenchPassage
from biocheck.narrative.extract import by_sentences, extract
from biocheck.narrative.match import MATCH_THRESHOLD, similarity
from biocheck.narrative.prompts import prompt_hash
from biocheck.narrative.schema import Extraction, Span

log = logging.getLogger(__name__)
DATASET = "narratives"  # the harness's dataset name: traces/<system>/<fingerprint>/narratives/
CHECKED_SYSTEMS = ("base", "eg_grpo", "outcome_only")  # the BioCheck agent with one of its models
EXTRACTORS = ("model", "sentences")


@dataclass
class NarrativesConfig:
    """`narratives:` in params.yaml."""

    passages: NonNegative = 3  # benchmark passages to compose (0: the stages write an empty, explained result)
    seed: int = 0  # which held-out claims, their order, the connectives and the non-claim sentence
    system: str = "eg_grpo"  # the evaluated system whose agent checks every claim (evaluate's model for it)
    extractor: str = "model"  # model: the system's chat model extracts (the sentence rule when it cannot); sentences
    workers: Count = 1  # claims in flight
    bootstrap: NonNegative = 1000  # resamples for the intervals (0: none)
    passages_path: Path = Path("data/narratives/passages.jsonl")
    out_dir: Path = Path("narratives")  # traces, extractions, predictions (DVC-cached)
    report_dir: Path = Path("reports/narratives")  # per-claim rows, the page, each passage's report (in git)
    metrics_path: Path = Path("metrics/narratives.json")

    def __post_init__(self) -> None:
        for name in ("passages_path", "out_dir", "report_dir", "metrics_path"):
            setattr(self, name, Path(getattr(self, name)))
        if self.system not in CHECKED_SYSTEMS:
            raise ValueError(f"system: {self.system!r}; choose from {', '.join(CHECKED_SYSTEMS)} (a system that "
                             "writes BioCheck reports)")
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"extractor: {self.extractor!r}; choose from {', '.join(EXTRACTORS)}")


@dataclass(frozen=True)
class Spanned:
    """A claim an arm checks in a passage: its text and the passage span it stands for."""

    text: str
    start: int
    end: int


@dataclass
class NarrativeRun:
    """What `run_narratives` returns: the metrics, the per-claim rows and each passage's arms."""

    metrics: dict[str, Any]
    claim_rows: list[dict[str, Any]]
    extracted_rows: list[dict[str, Any]]
    by_arm: dict[str, list[PassageArm]]
    extractions: dict[str, Extraction]
    traces: dict[str, str | None]  # text id -> its trace, relative to out_dir (None: it failed)
    about: dict[str, Any] = dataclasses.field(default_factory=dict)


def text_id(text: str) -> str:
    """A claim's id in the benchmark: the digest of its text (the same text in two arms is one episode)."""
    return "t" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def chat_of(system: Any) -> Any:
    """The chat model behind an agent system (built now if it is lazy)."""
    inner = getattr(system, "system", system)
    return inner.agent.llm


def extract_cached(passage: BenchPassage, chat: Any, folder: Path | None) -> Extraction:
    """The model's extraction of `passage`, from `folder` when it was made before; a model that fails is no
    cached answer: the sentence rule stands in, said in the note."""
    path = folder / f"{passage.id}.json" if folder is not None else None
    if path is not None and path.is_file():
        try:
            row = json.loads(path.read_text(encoding="utf-8"))
            if row.get("passage") == passage.text:
                return Extraction.from_dict(row)
        except (OSError, ValueError, TypeError, KeyError):
            log.warning("%s: unreadable extraction; asking the model again", path)
    try:
        found = extract(passage.text, chat)
    except LLMError as e:
        return by_sentences(passage.text, note=f"the model failed ({str(e).splitlines()[0][:200]}); claims were "
                                               "found by the sentence rule instead.")
    if path is not None:
        write_json_atomic(path, dataclasses.asdict(found))
    return found


def arm_claims(passage: BenchPassage, extracted: Extraction, sentences: Extraction) -> dict[str, list[Spanned]]:
    """The claims each arm checks in `passage`, in passage order."""
    return {
        "gold": [Spanned(c.text, c.start, c.end) for c in passage.claims],
        "extracted": [Spanned(c.text, c.start, c.end) for c in extracted.claims],
        "sentences": [Spanned(c.text, c.start, c.end) for c in sentences.claims],
        "passage": [Spanned(passage.text, 0, len(passage.text))],
    }


def claim_record(text: str, passage: BenchPassage, gold: dict[str, ClaimRecord]) -> tuple[ClaimRecord, bool]:
    """The record the harness runs for `text`: the label and evidence of the passage's gold claim it matches
    best (similarity >= MATCH_THRESHOLD), so the scorer's funnel has gold to follow; else NEI without evidence
    (a connective, a non-claim taken for a claim, the whole passage), and False: it is scored without gold."""
    best = max(passage.claims, key=lambda g: similarity(text, g.text), default=None)
    if best is not None and similarity(text, best.text) >= MATCH_THRESHOLD and best.claim_id in gold:
        g = gold[best.claim_id]
        return ClaimRecord(id=text_id(text), dataset="scifact", split="test", claim=text, label=g.label,
                           evidence=g.evidence, cited_doc_ids=g.cited_doc_ids), True
    return ClaimRecord(id=text_id(text), dataset="scifact", split="test", claim=text, label=Label.NEI), False


def run_narratives(cfg: NarrativesConfig, passages: Sequence[BenchPassage], system: Any, scorer: Any,
                   gold: dict[str, ClaimRecord], progress: bool = True) -> NarrativeRun:
    """Every arm of every passage checked by `system`, scored by `scorer`; the metrics and per-claim rows."""
    if not passages:
        raise InputError(f"{cfg.passages_path}: no passages to evaluate; set narratives.passages above 0 and "
                         "`dvc repro narrative_passages`.")
    missing = sorted({c.claim_id for p in passages for c in p.claims} - set(gold))
    if missing:
        raise InputError(f"{cfg.passages_path}: gold claim(s) {', '.join(missing[:5])} are not SciFact held-out "
                         "claims of data/prepared; rebuild the passages: `dvc repro narrative_passages`.")
    chat = chat_of(system) if cfg.extractor == "model" else None
    folder = None
    if chat is not None:
        folder = cfg.out_dir / "extractions" / json_digest({"system": system.fingerprint(), "prompt": prompt_hash()})
    if chat is not None:  # the passages in flight together (a batching backend generates them as one batch)
        with ThreadPoolExecutor(max_workers=max(1, cfg.workers)) as pool:
            found = list(pool.map(lambda p: extract_cached(p, chat, folder), passages))
        extractions = {p.id: e for p, e in zip(passages, found, strict=True)}
    else:
        extractions = {p.id: by_sentences(p.text) for p in passages}
    sentence_rule = {p.id: by_sentences(p.text) for p in passages}
    arms = {p.id: arm_claims(p, extractions[p.id], sentence_rule[p.id]) for p in passages}

    records: dict[str, tuple[ClaimRecord, bool]] = {}
    for p in passages:
        for claims in arms[p.id].values():
            for c in claims:
                records.setdefault(text_id(c.text), claim_record(c.text, p, gold))
    claims = [r for r, _ in records.values()]
    preds = run_system(system, claims, DATASET, cfg.out_dir, workers=cfg.workers, progress=progress)
    episodes = {pr.id: load_episode(cfg.out_dir, pr) for pr in preds}
    answered = [pr for pr in preds if pr.error is None and episodes[pr.id] is not None]
    scores = dict(zip([pr.id for pr in answered],
                      scorer([episodes[pr.id] for pr in answered],
                             [records[pr.id][0] if records[pr.id][1] else None for pr in answered]),
                      strict=True)) if answered else {}
    by_id = {pr.id: pr for pr in preds}

    def checked(c: Spanned) -> Checked:
        pr, s = by_id[text_id(c.text)], scores.get(text_id(c.text))
        return Checked(c.text, c.start, c.end, pred=pr.pred if pr.error is None else None,
                       cited=s.cited if s else 0, hallucinated=s.hallucinated if s else 0, eqs=s.eqs if s else None,
                       error=pr.error)

    by_arm: dict[str, list[PassageArm]] = {a: [] for a in ARMS}
    for p in passages:
        refs = tuple(GoldRef(g.claim_id, g.text, g.label) for g in p.claims)
        non_claim = Span(p.non_claim.start, p.non_claim.end)
        for arm in ARMS:
            fallback = (extractions[p.id].method != "model") if arm == "extracted" and chat is not None else None
            by_arm[arm].append(PassageArm(p.id, refs, tuple(checked(c) for c in arms[p.id][arm]), non_claim,
                                          whole=arm == "passage", fallback=fallback))
    metrics = narrative_metrics(by_arm, cfg.bootstrap, cfg.seed)
    traces = {pr.id: pr.trace for pr in preds}
    claim_rows, extracted_rows = rows(by_arm, traces)
    return NarrativeRun(metrics, claim_rows, extracted_rows, by_arm, extractions, traces)


def rows(by_arm: dict[str, list[PassageArm]], traces: dict[str, str | None]) -> tuple[list[dict], list[dict]]:
    """The per-claim data every number comes from: one row per (arm, passage, gold claim) with the claim matched
    to it and its verdict, and one per (arm, passage, checked claim) with its scores."""
    gold_rows, checked_rows = [], []
    for arm, pas in by_arm.items():
        for pa in pas:
            found, pairs = outcomes(pa)
            for o in found:
                c = pa.checked[o.matched] if o.matched is not None else None
                gold_rows.append({"arm": arm, "passage": pa.passage, "claim_id": o.gold.claim_id,
                                  "label": o.gold.label.value, "matched": c.text if c else None,
                                  "similarity": None if o.score is None else round(o.score, 4),
                                  "pred": o.pred.value if o.pred else None, "correct": o.correct,
                                  "trace": traces.get(text_id(c.text)) if c else None})
            for i, c in enumerate(pa.checked):
                j = pairs.get(i)
                checked_rows.append({"arm": arm, "passage": pa.passage, "start": c.start, "end": c.end,
                                     "text": c.text, "gold_claim_id": pa.gold[j].claim_id if j is not None else None,
                                     "pred": c.pred.value if c.pred else None, "cited": c.cited,
                                     "hallucinated": c.hallucinated, "eqs": c.eqs, "error": c.error,
                                     "trace": traces.get(text_id(c.text))})
    return gold_rows, checked_rows
