"""The evidence funnel: where, for one claim, grounding breaks on the way to R_evidence's credit.

For a claim with gold evidence papers (SciFact's SUPPORTED and REFUTED claims), each step holds when the one
before it holds and, for the citation steps, one citation does all of them at once:

  retrieved    a search of the episode retrieved a gold paper
  cited        the report cites a retrieved gold paper
  verbatim     ... with a quote found verbatim in that paper (the grounding rule: not hallucinated)
  rationale    ... a quote that overlaps one of the paper's gold rationale sentences
  credited     ... filed on the paper's gold side, and the judge credits it there (s > threshold)
  right_label  ... and the report concludes the claim's gold label

Beside the funnel, what the evidence scores credit off it: `credited_any_sentence` (a verbatim quote of a
gold paper credited on its side whatever sentence it quotes: a judge of papers, reward.judge_reads: paper,
scores the (claim, paper) pair, so a background sentence earns what a rationale earns; a judge of quotes
scores the quoted sentence itself), `nongold_credited` (grounded citations of papers that are
not gold evidence which the judge credits: R_evidence's credit off the gold papers), and `invented_gold`
(citations whose quote or PMID is invented but that name a gold paper on its side: SciFact's abstract-level
label score counts them; R_evidence does not, since s of a hallucinated entry is 0).

The same function serves the evaluation (per claim, per system), the reward audit, the study and each
training step, over the reward's own entry checks (`RewardBreakdown.entries`), so the numbers agree.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from biocheck.agent.report.quotes import quoted_sentences
from biocheck.data.gold import check_usable
from biocheck.data.schema import GoldEvidence
from biocheck.evidence.types import Article
from biocheck.labels import Label

STEP_NAMES = {"retrieved": "gold paper retrieved", "cited": "gold paper cited", "verbatim": "quote verbatim",
              "rationale": "quote on a gold rationale", "credited": "credited on its side", "right_label": "right label"}
STEPS = tuple(STEP_NAMES)
BESIDE = ("credited_any_sentence", "nongold_cited", "nongold_credited", "invented", "invented_gold")
SIDE = {"supporting": Label.SUPPORTED, "refuting": Label.REFUTED}


@dataclass(frozen=True)
class GoldPaper:
    """One gold evidence paper of a claim: the side it is evidence for, its rationales (sets of sentence
    indices), and its abstract's sentences (to place a quote)."""

    label: Label
    rationales: tuple[frozenset[int], ...]
    sentences: tuple[str, ...]


def gold_papers(evidence: Sequence[GoldEvidence], sentences: Callable[[str], Sequence[str] | None],
                where: str = "gold evidence") -> dict[str, GoldPaper]:
    """{doc id: GoldPaper} of a claim's gold evidence; `sentences(doc_id)` gives an abstract's sentences (None:
    not in the corpus). Gold that cannot be placed (a paper outside the corpus, a sentence outside its abstract)
    raises InputError naming `where` (the claim): a funnel over it would undercount without saying so."""
    check_usable(evidence, lambda d: None if (s := sentences(d)) is None else len(s), where)
    out: dict[str, GoldPaper] = {}
    for ev in evidence:
        prev = out.get(ev.doc_id)
        rationales = (*(prev.rationales if prev else ()), frozenset(ev.sentences))
        out[ev.doc_id] = GoldPaper(label=ev.label, rationales=rationales,
                                   sentences=prev.sentences if prev else tuple(sentences(ev.doc_id) or ()))
    return out


class Funnel(BaseModel):
    """One claim's funnel (see the module docstring). Counted only for claims with gold papers."""

    gold: int  # gold evidence papers of the claim
    retrieved: bool = False
    cited: bool = False
    verbatim: bool = False
    rationale: bool = False
    credited: bool = False
    right_label: bool = False
    credited_any_sentence: bool = False
    nongold_cited: int = 0
    nongold_credited: int = 0
    invented: int = 0
    invented_gold: int = 0


Resolve = Callable[[str, Article | None], str | None]


def funnel(gold: Mapping[str, GoldPaper], claim_label: Label | None, ledger: Mapping[str, Article],
           entries: Iterable[Any], conclusion: Label | None, threshold: float,
           resolve: Resolve | None = None) -> Funnel | None:
    """The claim's funnel from its gold papers, the episode's retrieved papers (`ledger`), the reward's entry
    checks (each with side, pmid, quote, hallucinated, s), the report's conclusion and the judge's threshold.
    `resolve(pmid, article)`: the gold doc id a retrieved or cited id stands for (default: the id itself; the
    evaluation maps live PubMed ids by title). None when the claim has no gold paper (nothing to funnel)."""
    if not gold:
        return None

    def doc_of(pmid: str) -> str | None:
        found = resolve(pmid, ledger.get(pmid)) if resolve is not None else pmid
        return found if found in gold else None

    entries = list(entries)
    f = Funnel(gold=len(gold), retrieved=any(doc_of(pmid) is not None for pmid in ledger))
    best = 0  # the furthest step one grounded citation of a gold paper reached: 2 verbatim, 3 rationale, 4 credited
    for e in entries:
        doc = doc_of(e.pmid)
        on_side = doc is not None and SIDE.get(e.side) == gold[doc].label
        credited = not e.hallucinated and float(e.s) > threshold
        if e.hallucinated:
            f.invented += 1
            f.invented_gold += on_side
            continue
        if doc is None:
            f.nongold_cited += 1
            f.nongold_credited += credited
            continue
        paper = gold[doc]
        placed = set(quoted_sentences(e.quote, paper.sentences))
        on_rationale = any(placed & r for r in paper.rationales)
        f.credited_any_sentence |= on_side and credited
        reached = 2 + on_rationale + (on_rationale and on_side and credited)  # verbatim=2, rationale=3, credited=4
        best = max(best, reached)
    f.cited = f.retrieved and any(doc_of(e.pmid) is not None and e.pmid in ledger for e in entries)
    f.verbatim = f.cited and best >= 2
    f.rationale = f.verbatim and best >= 3
    f.credited = f.rationale and best >= 4
    f.right_label = f.credited and claim_label is not None and conclusion == claim_label
    return f


def summarize(funnels: Iterable[Funnel | None]) -> dict[str, Any]:
    """Counts over the claims with gold papers: `n`, each step's count and share of n and of the step before
    (where grounding breaks), and the sums beside the funnel. Shares are None when n (or the step before) is 0."""
    fs = [f for f in funnels if f is not None]
    n = len(fs)
    out: dict[str, Any] = {"n": n, "steps": {}}
    before = n
    for step in STEPS:
        k = sum(getattr(f, step) for f in fs)
        out["steps"][step] = {"count": k, "share": k / n if n else None, "of_previous": k / before if before else None}
        before = k
    out["beside"] = {"credited_any_sentence": sum(f.credited_any_sentence for f in fs),
                     **{k: sum(getattr(f, k) for f in fs) for k in BESIDE if k != "credited_any_sentence"}}
    return out


def not_applicable() -> dict[str, Any]:
    """`summarize`'s keys with every value None: a system that writes no report has no funnel."""
    return {"n": None, "steps": {s: {"count": None, "share": None, "of_previous": None} for s in STEPS},
            "beside": dict.fromkeys(BESIDE)}


__all__ = ["BESIDE", "STEPS", "STEP_NAMES", "Funnel", "GoldPaper", "funnel", "gold_papers", "not_applicable", "summarize"]
