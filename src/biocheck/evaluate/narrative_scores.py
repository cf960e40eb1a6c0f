"""The passage benchmark's numbers (docs/narratives.md, "The benchmark's metrics"), from plain records.

Each arm (a way of turning a passage into claims: the gold claims, an extractor, the sentence rule, the whole
passage) gives per passage its checked claims; `score_arm` matches them to the passage's gold claims
(narrative/match.py, one to one) and reads off:

- extraction precision (matched / extracted) and recall (matched / gold);
- per-claim accuracy: a gold claim is right when the claim matched to it concluded its gold label (an unmatched
  gold claim, or a failed episode, is wrong); the whole-passage arm gives its one verdict to every gold claim;
- passage accuracy: every gold claim of the passage right;
- EHR (hallucinated / cited items, pooled) and EQS (mean over reports the judge scored) of the arm's reports;
- the non-claim sentence left out (no extracted claim's span overlaps it), and, for a model extractor, the
  passages where its answer was not usable (the sentence rule stood in).

Claims of one passage are not independent (one extractor's pass, one topic mix), so every ratio's interval
resamples passages, not claims: a BCa bootstrap of the ratio of sums over passages (measures.bootstrap), and
the exact binomial interval for a share of passages. "What extraction costs" is the gold arm's accuracy minus
the arm's, on the same gold claims, its interval from the same passages resampled for both (paired).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from biocheck.labels import Label
from biocheck.measures import DEGENERATE, bootstrap, proportion_ci
from biocheck.narrative.match import match_claims, similarity
from biocheck.narrative.schema import Span

ARMS = ("gold", "extracted", "sentences", "passage")
EXACT_POOLED = "exact binomial of the pooled counts (every bootstrap resample equal)"
ARM_TITLES = {
    "gold": "gold claims (extraction perfect)",
    "extracted": "extracted claims",
    "sentences": "one claim per sentence (baseline)",
    "passage": "the whole passage as one claim (baseline)",
}


@dataclass(frozen=True)
class Checked:
    """One claim an arm checked in a passage: its text and span, the agent's verdict and its report's scores."""

    text: str
    start: int
    end: int
    pred: Label | None = None  # None: no conclusion, or the episode failed
    cited: int = 0
    hallucinated: int = 0
    eqs: float | None = None  # None: nothing the judge scored
    error: str | None = None


@dataclass(frozen=True)
class GoldRef:
    claim_id: str
    text: str
    label: Label


@dataclass(frozen=True)
class PassageArm:
    """One arm on one passage. `whole`: the arm's single claim stands for every gold claim (the passage arm).
    `fallback`: a model extractor's answer was not usable here (None: no model extracted)."""

    passage: str
    gold: tuple[GoldRef, ...]
    checked: tuple[Checked, ...]
    non_claim: Span | None = None
    whole: bool = False
    fallback: bool | None = None


@dataclass(frozen=True)
class GoldOutcome:
    """A gold claim's outcome in one arm: the claim matched to it (None: none), the score, the verdict."""

    gold: GoldRef
    matched: int | None  # index into the arm's checked claims
    score: float | None
    pred: Label | None

    @property
    def correct(self) -> bool:
        return self.pred is not None and self.pred == self.gold.label


def outcomes(pa: PassageArm) -> tuple[list[GoldOutcome], dict[int, int]]:
    """Each gold claim's outcome, and the matching {checked index: gold index} it comes from."""
    matches = match_claims([c.text for c in pa.checked], [g.text for g in pa.gold])
    pairs = {m.extracted: m.gold for m in matches}  # extraction precision and recall count these, in every arm
    if pa.whole:
        one = pa.checked[0] if pa.checked else None
        return [GoldOutcome(g, 0 if one else None, similarity(one.text, g.text) if one else None,
                            one.pred if one and one.error is None else None) for g in pa.gold], pairs
    by_gold = {m.gold: m for m in matches}
    out = []
    for j, g in enumerate(pa.gold):
        m = by_gold.get(j)
        c = pa.checked[m.extracted] if m is not None else None
        out.append(GoldOutcome(g, m.extracted if m else None, m.score if m else None,
                               c.pred if c is not None and c.error is None else None))
    return out, pairs


def _overlaps(a: Span, b: Checked) -> bool:
    return a.start < b.end and b.start < a.end


def _ratio(num: Sequence[float], den: Sequence[float], n_resamples: int, seed: int,
           share: bool = True) -> dict[str, Any]:
    """sum(num) / sum(den) over passages, with the BCa interval of passages resampled (None where undefined:
    nothing counted, or one passage). Where every resample is equal (all passages at 0, or all at 1) a bootstrap
    says [x, x], which reads as certainty: a share of counts then gets the exact binomial interval of the pooled
    counts instead (`method` says which). `share` False: a difference, left as the bootstrap gives it."""
    total = float(sum(den))
    value = float(sum(num)) / total if total else None
    lo = hi = method = None
    if value is not None and n_resamples:
        def stat(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
            with np.errstate(invalid="ignore", divide="ignore"):
                return a.sum(axis) / b.sum(axis)
        ci = bootstrap(stat, (np.asarray(num, float), np.asarray(den, float)), n_resamples, seed)
        if ci is not None:
            lo, hi, method = ci.lo, ci.hi, ci.method
        counts = all(float(x).is_integer() and x >= 0 for x in (*num, *den)) and 0 <= sum(num) <= total
        if share and ci is not None and ci.method == DEGENERATE and counts:
            lo, hi = proportion_ci(int(sum(num)), int(total))
            method = EXACT_POOLED
    return {"value": value, "lo": lo, "hi": hi, "method": method,
            "num": _int(sum(num)), "den": _int(total), "passages": len(den)}


def _share(k: int, n: int) -> dict[str, Any]:
    ci = proportion_ci(k, n)
    return {"value": k / n if n else None, "lo": ci[0] if ci else None, "hi": ci[1] if ci else None,
            "method": "exact binomial" if ci else None, "k": k, "n": n}


def _int(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def score_arm(arm: Sequence[PassageArm], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The arm's numbers over its passages (module docstring), each with its n and 95% interval."""
    extracted, matched, gold_n, right, eqs_sum, eqs_n, cited, halluc = ([] for _ in range(8))
    passages_right = skipped_ok = non_claims = fallbacks = model_passages = failed = 0
    for pa in arm:
        found, pairs = outcomes(pa)
        extracted.append(len(pa.checked))
        matched.append(len(pairs))
        gold_n.append(len(pa.gold))
        right.append(sum(o.correct for o in found))
        passages_right += int(bool(found) and all(o.correct for o in found))
        answered = [c for c in pa.checked if c.error is None]
        failed += len(pa.checked) - len(answered)
        cited.append(sum(c.cited for c in answered))
        halluc.append(sum(c.hallucinated for c in answered))
        judged = [c.eqs for c in answered if c.eqs is not None]
        eqs_sum.append(sum(judged))
        eqs_n.append(len(judged))
        if pa.non_claim is not None:
            non_claims += 1
            skipped_ok += int(not any(_overlaps(pa.non_claim, c) for c in pa.checked))
        if pa.fallback is not None:
            model_passages += 1
            fallbacks += int(pa.fallback)
    out = {
        "passages": len(arm), "gold_claims": int(sum(gold_n)), "extracted_claims": int(sum(extracted)),
        "failed_claims": failed,
        "precision": _ratio(matched, extracted, n_resamples, seed),
        "recall": _ratio(matched, gold_n, n_resamples, seed),
        "claim_accuracy": _ratio(right, gold_n, n_resamples, seed),
        "passage_accuracy": _share(passages_right, len(arm)),
        "ehr": _ratio(halluc, cited, n_resamples, seed),
        "eqs": _ratio(eqs_sum, eqs_n, n_resamples, seed),
        "non_claim_left_out": _share(skipped_ok, non_claims),
    }
    if model_passages:
        out["fallback"] = _share(fallbacks, model_passages)
    return out


def extraction_cost(gold: Sequence[PassageArm], arm: Sequence[PassageArm], n_resamples: int = 1000,
                    seed: int = 0) -> dict[str, Any]:
    """Accuracy on the gold claims minus the arm's, per gold claim pooled over passages; the interval resamples
    passages for both arms at once (paired). Both arms must hold the same passages in the same order."""
    if [p.passage for p in gold] != [p.passage for p in arm]:
        raise ValueError("extraction_cost: the arms hold different passages")
    diff = [sum(o.correct for o in outcomes(g)[0]) - sum(o.correct for o in outcomes(a)[0])
            for g, a in zip(gold, arm, strict=True)]
    return _ratio(diff, [len(p.gold) for p in gold], n_resamples, seed, share=False)


def constant_accuracy(arm: Sequence[PassageArm]) -> dict[str, Any]:
    """The accuracy of always answering the most common gold label (ties: the label order), with its interval:
    what a model that reads nothing scores here."""
    labels = Counter(g.label for pa in arm for g in pa.gold)
    if not labels:
        return {"label": None, **_share(0, 0)}
    top = max(Label, key=lambda lab: (labels[lab], -list(Label).index(lab)))
    return {"label": top.value, **_share(labels[top], sum(labels.values()))}


def narrative_metrics(by_arm: Mapping[str, Sequence[PassageArm]], n_resamples: int = 1000,
                      seed: int = 0) -> dict[str, Any]:
    """Every arm's numbers, what extraction costs each arm against the gold claims, and the constant answer."""
    arms = {name: score_arm(pas, n_resamples, seed) for name, pas in by_arm.items()}
    gold = by_arm.get("gold")
    cost = {name: extraction_cost(gold, pas, n_resamples, seed)
            for name, pas in by_arm.items() if gold is not None and name != "gold"}
    any_arm = next(iter(by_arm.values()), [])
    return {"arms": arms, "extraction_cost": cost, "constant_answer": constant_accuracy(any_arm)}
