"""The reward-signal audit (`biocheck reward audit`): will EG-GRPO's reward terms reach the gradient?

GRPO learns only from the differences inside a group of episodes of one claim: a term that is the same for
every episode of a group (all 0, say) gives that group no advantage, whatever its weight. Before a training
run is spent, the audit samples the training group size of episodes per training claim from the start
policy (the SFT warm start, else the base model) at the training temperature, through the agent that is
trained and evaluated, and scores them with the training reward and judge. It reports, by gold label:

- `groups_varying`: the share of groups in which R_outcome, R_search, R_evidence, R_hallucination and the
  total (both variants) take more than one value;
- `judge_credit`: how often the judge credits (s > threshold) a paper filed on the side its gold label
  says (`correct_side`) versus the same paper filed on the other side (`wrong_side`), over the gold
  evidence papers of every training claim (what training will ask it); and the same for the citations the
  sampled episodes made (gold paper filed right, gold paper filed wrong, a paper that is not gold evidence);
- `evidence`: the distribution of R_evidence over episodes;
- `funnel`: the evidence funnel of the sampled episodes (rewards/funnel.py), per label: where, on the way to
  R_evidence's credit, the start's episodes stop (no gold paper retrieved, not cited, quote not verbatim ...).

It warns in one line when R_evidence varies in fewer than `min_signal` of either label's groups. Episodes are
cached per sample as evaluation traces (the harness): a rerun with another judge scores, it does not generate.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from biocheck.agent.episode import Episode
from biocheck.bounds import Count, Share
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.harness import load_episode, run_system
from biocheck.evaluate.rationale import SIDE_LABEL, gold_docs
from biocheck.evidence.types import Article
from biocheck.io import InputError, write_json_atomic
from biocheck.labels import Label
from biocheck.outputs import claim_file
from biocheck.rewards.components import EpisodeView, RewardBreakdown, RewardConfig, score_many
from biocheck.rewards.funnel import funnel, gold_papers
from biocheck.rewards.funnel import summarize as summarize_funnel

log = logging.getLogger(__name__)

LABELS = (Label.SUPPORTED.value, Label.REFUTED.value)  # the labels GRPO trains on
TERMS = ("outcome", "search", "evidence", "hallucination")
DATASET = "scifact"  # the training claims (SciFact train)


@dataclass
class AuditConfig:
    """params.yaml `audit:` (group size and temperature are training's own: train.num_generations, .temperature)."""

    claims: Count | None = 16  # training claims audited, half per label where the split has them (null: all)
    seed: int = 0  # which claims, and the first episode's sampling seed (episode k uses seed + k)
    min_signal: Share = 0.2  # warn when R_evidence varies in fewer than this share of either label's groups
    out_dir: Path = Path("audit")  # the sampled episodes (cached traces)
    metrics_path: Path | None = Path("metrics/reward_audit.json")  # DVC's metrics: `headline` (null: none)
    report_path: Path = Path("reports/reward_audit.json")  # every number, the settings and the warnings
    workers: Count = 1  # episodes in flight
    progress: bool = True

    def __post_init__(self) -> None:
        self.out_dir, self.report_path = Path(self.out_dir), Path(self.report_path)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None


@dataclass
class AuditSetup:
    """What the audit runs: one system per sample seed (the agent with the start model), the claims, the
    training reward and its judge, the gold evidence papers, and a description for the output."""

    cfg: AuditConfig
    samples: list[Any]  # evaluated systems, one per episode of a group
    claims: list[ClaimRecord]
    reward: RewardConfig
    judge: Any
    papers: dict[str, Article] = field(default_factory=dict)  # gold evidence doc id -> its paper
    about: dict[str, Any] = field(default_factory=dict)
    gold_claims: list[ClaimRecord] | None = None  # whose gold papers the judge is asked about (None: `claims`)
    sentences: dict[str, list[str]] = field(default_factory=dict)  # gold doc id -> its abstract's sentences


def pick_claims(claims: Sequence[ClaimRecord], n: int | None, seed: int) -> list[ClaimRecord]:
    """A seeded sample of `n` training claims, split evenly between SUPPORTED and REFUTED as far as the split
    allows (the audit's question is per label), in the split's order."""
    trainable = [c for c in claims if c.label.value in LABELS]
    if n is None or n >= len(trainable):
        return trainable
    rnd = random.Random(seed)
    by_label = {lab: [c for c in trainable if c.label.value == lab] for lab in LABELS}
    want = {lab: min(len(by_label[lab]), n // 2) for lab in LABELS}
    spare = n - sum(want.values())
    for lab in sorted(LABELS, key=lambda x: -len(by_label[x])):  # the bigger label fills what the other lacks
        extra = min(spare, len(by_label[lab]) - want[lab])
        want[lab] += extra
        spare -= extra
    chosen = {c.id for lab in LABELS for c in rnd.sample(by_label[lab], want[lab])}
    return [c for c in trainable if c.id in chosen]


def audit(setup: AuditSetup) -> dict[str, Any]:
    """Sample, score and summarise; write cfg.report_path (the summary) and cfg.metrics_path (its headline);
    return the summary (see the module docstring)."""
    cfg = setup.cfg
    if not setup.claims:
        raise InputError("reward audit: no SUPPORTED or REFUTED training claims to audit; check data.subset.train")
    claim_file(cfg.report_path, "audit.report_path")  # outputs too: a folder or a FIFO there fails now
    if cfg.metrics_path is not None:
        claim_file(cfg.metrics_path, "audit.metrics_path")
    for c in setup.claims:  # gold the funnel cannot place is refused now, not after every episode has run
        gold_papers(c.evidence, setup.sentences.get, where=f"claim {c.key}")
    groups: dict[str, list[Episode]] = {c.id: [] for c in setup.claims}
    for k, system in enumerate(setup.samples):
        try:
            preds = run_system(system, setup.claims, DATASET, cfg.out_dir, workers=cfg.workers, progress=cfg.progress)
        finally:
            system.close()
        failed = [p.id for p in preds if p.error]
        if failed:
            log.warning("reward audit: sample %d: %d episode(s) failed (%s); their groups are smaller",
                        k, len(failed), ", ".join(failed[:3]))
        for p, ep in ((p, load_episode(cfg.out_dir, p)) for p in preds):
            if ep is not None:
                groups[p.id].append(ep)
    by_claim = {c.id: c for c in setup.claims}
    flat = [(cid, ep) for cid, eps in groups.items() for ep in eps]
    views = [EpisodeView.from_episode(ep, by_claim[cid].label) for cid, ep in flat]
    scored = score_many(views, dataclasses.replace(setup.reward, variant="eg_grpo"), setup.judge)
    breakdowns: dict[str, list[RewardBreakdown]] = {cid: [] for cid in groups}
    for (cid, _), b in zip(flat, scored, strict=True):
        breakdowns[cid].append(b)
    result = {
        "about": setup.about,
        "claims": dict(Counter(c.label.value for c in setup.claims)),
        "episodes": len(flat),
        "group_size": len(setup.samples),
        "groups_varying": {lab: _varying([breakdowns[c.id] for c in setup.claims if lab in ("all", c.label.value)])
                           for lab in (*LABELS, "all") if lab == "all" or any(c.label.value == lab for c in setup.claims)},
        "judge_credit": {"gold_papers": _gold_credit(setup), "citations": _citation_credit(setup.claims, breakdowns,
                                                                                             setup.reward.threshold)},
        "evidence": {lab: _distribution([b.evidence for c in setup.claims if c.label.value == lab
                                         for b in breakdowns[c.id]]) for lab in LABELS},
        "funnel": _funnels(setup, groups, breakdowns),
        "means": {lab: {t: _mean([getattr(b, t) for c in setup.claims if c.label.value == lab
                                  for b in breakdowns[c.id]]) for t in (*TERMS, "total")} for lab in LABELS},
    }
    result["warnings"] = warnings(result, cfg.min_signal)
    for w in result["warnings"]:
        log.warning("%s", w)
    write_json_atomic(cfg.report_path, result)
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, headline(result))
    return result


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """What `dvc metrics show` prints of an audit (one column per number, so a few): the counts, the share of
    groups in which each term varies per label, the judge's right- vs wrong-side credit on gold papers, and
    the number of warnings. The settings, the citation credit, the R_evidence distribution and the means
    stay in the full summary (cfg.report_path)."""
    gold = result["judge_credit"]["gold_papers"]
    return {"episodes": result["episodes"], "group_size": result["group_size"], "claims": result["claims"],
            "groups_varying": result["groups_varying"],
            "gold_paper_credit": {lab: {k: c.get(k) for k in ("correct_side", "wrong_side")} for lab, c in gold.items()},
            "warnings": len(result["warnings"])}


def _varying(groups: list[list[RewardBreakdown]]) -> dict[str, Any]:
    """Share of groups (of 2+ episodes) in which each term, and each variant's total, takes more than one value."""
    full = [g for g in groups if len(g) >= 2]
    out: dict[str, Any] = {"groups": len(full)}
    getters = {**{t: (lambda b, t=t: getattr(b, t)) for t in TERMS}, "total_eg_grpo": lambda b: b.total,
               "total_outcome_only": lambda b: b.outcome}
    for name, get in getters.items():
        out[name] = (sum(1 for g in full if np.ptp([get(b) for b in g]) > 1e-9) / len(full)) if full else None
    return out


def _rate(hits: int, n: int) -> float | None:
    return hits / n if n else None


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None


def _gold_credit(setup: AuditSetup) -> dict[str, Any]:
    """The judge on each audited claim's gold evidence papers, filed on the right side and on the wrong one. A
    judge that reads quotes (reward.judge_reads: quote) is shown each gold rationale instead, as a quote of it."""
    pairs, keys = [], []
    quotes = setup.reward.judge_reads == "quote"
    for c in setup.gold_claims if setup.gold_claims is not None else setup.claims:
        for doc, (label, rationales) in gold_docs(c.evidence).items():
            if doc not in setup.papers or label.value not in LABELS:
                continue
            paper, sentences = setup.papers[doc], setup.sentences.get(doc, [])
            shown = [paper] if not quotes else [
                Article(pmid=paper.pmid, title=paper.title, abstract=" ".join(sentences[i] for i in sorted(r)))
                for r in rationales if r and all(0 <= i < len(sentences) for i in r)]
            pairs += [(c.claim, a) for a in shown]
            keys += [label.value] * len(shown)
    out: dict[str, Any] = {}
    scores = setup.judge.score(pairs) if setup.judge is not None and pairs else [{} for _ in pairs]
    threshold = setup.reward.threshold
    for lab in LABELS:
        wrong = LABELS[1 - LABELS.index(lab)]
        mine = [s for s, k in zip(scores, keys, strict=True) if k == lab]
        right_s = [float(s.get(lab, 0.0)) for s in mine]
        wrong_s = [float(s.get(wrong, 0.0)) for s in mine]
        out[lab] = {"pairs": len(mine), "correct_side": _rate(sum(x > threshold for x in right_s), len(mine)),
                    "wrong_side": _rate(sum(x > threshold for x in wrong_s), len(mine)),
                    "s_correct_mean": _mean(right_s), "s_wrong_mean": _mean(wrong_s)}
    return out


def _citation_credit(claims: Sequence[ClaimRecord], breakdowns: dict[str, list[RewardBreakdown]],
                     threshold: float) -> dict[str, Any]:
    """The sampled episodes' own citations (not invented ones): credited share by what was cited."""
    out: dict[str, Any] = {}
    for lab in LABELS:
        kinds: dict[str, list[float]] = {"gold_correct_side": [], "gold_wrong_side": [], "not_gold": []}
        for c in claims:
            if c.label.value != lab:
                continue
            gold = gold_docs(c.evidence)
            for b in breakdowns[c.id]:
                for e in b.entries:
                    if e.hallucinated:
                        continue
                    if e.pmid not in gold:
                        kinds["not_gold"].append(e.s)
                    else:
                        right = SIDE_LABEL[e.side] == gold[e.pmid][0]
                        kinds["gold_correct_side" if right else "gold_wrong_side"].append(e.s)
        out[lab] = {k: {"n": len(v), "credited": _rate(sum(x > threshold for x in v), len(v)), "s_mean": _mean(v)}
                    for k, v in kinds.items()}
    return out


def _funnels(setup: AuditSetup, groups: dict[str, list[Episode]],
             breakdowns: dict[str, list[RewardBreakdown]]) -> dict[str, Any]:
    """The evidence funnel of every sampled episode, summed per label (an episode is one row)."""
    out = {}
    for lab in LABELS:
        found = []
        for c in setup.claims:
            if c.label.value != lab:
                continue
            gold = gold_papers(c.evidence, setup.sentences.get, where=f"claim {c.key}")
            for ep, b in zip(groups[c.id], breakdowns[c.id], strict=True):
                found.append(funnel(gold, c.label, ep.ledger, b.entries, b.conclusion, setup.reward.threshold))
        out[lab] = summarize_funnel(found)
    return out


def _distribution(values: Sequence[float]) -> dict[str, Any]:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"episodes": 0, "mean": None, "nonzero": None, "quantiles": None, "histogram": None}
    edges = (0.0, 0.25, 0.5, 0.75, 1.0)
    hist = {"0": int(np.sum(v <= 0))}
    for lo, hi in zip(edges, edges[1:], strict=False):
        hist[f"({lo:g}, {hi:g}]"] = int(np.sum((v > lo) & (v <= hi)))
    return {"episodes": int(v.size), "mean": float(v.mean()), "nonzero": float(np.mean(v > 0)),
            "quantiles": {q: float(np.quantile(v, float(q))) for q in ("0.5", "0.9")}, "histogram": hist}


def warnings(result: dict[str, Any], min_signal: float) -> list[str]:
    """One line per problem: the evidence term varies in too few groups of a label (it cannot teach that label)."""
    low = {lab: g.get("evidence") for lab, g in result["groups_varying"].items()
           if lab in LABELS and g.get("groups")}
    bad = {lab: share for lab, share in low.items() if share is not None and share < min_signal}
    if not bad:
        return []
    said = ", ".join(f"{share:.0%} of {lab} groups" for lab, share in sorted(bad.items()))
    return [f"reward audit: R_evidence varies in only {said} (< {min_signal:.0%}): EG-GRPO's evidence term will "
            "rarely reach the gradient for that label; see docs/rewards.md, 'Reward-signal audit'"]


def evidence_signal(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per trained label, the share of the start's groups in which R_evidence varies and how many groups that
    is: what EG-GRPO's evidence term can reach the gradient through (the study's gate reads it)."""
    out = {}
    for lab in LABELS:
        g = result.get("groups_varying", {}).get(lab) or {}
        share, groups = g.get("evidence"), g.get("groups") or 0
        out[lab] = {"share": share, "groups": groups,
                    "varying": round(share * groups) if share is not None else 0}
    return out


def summary_line(result: dict[str, Any]) -> str:
    """What `biocheck reward audit` prints: per label, the share of groups each term varies in."""
    parts = []
    for lab, g in result["groups_varying"].items():
        if lab == "all":
            continue
        shares = " ".join(f"{t} {_pct(g.get(t))}" for t in TERMS)
        parts.append(f"{lab} ({g.get('groups', 0)} groups): {shares}")
    return f"reward audit, {result['episodes']} episodes; groups where a term varies: " + "; ".join(parts)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


__all__ = ["AuditConfig", "AuditSetup", "audit", "evidence_signal", "pick_claims", "summary_line", "warnings"]
