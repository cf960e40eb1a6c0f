"""EG-GRPO's reward: right label, advanced search, good evidence, no invented evidence.

  total = R_outcome + beta1 * R_search + beta2 * R_evidence - beta3 * R_hallucination   (variant "eg_grpo")
  total = R_outcome                                                                      (variant "outcome_only")

The same functions serve training (which has only the final text, the executed queries and the retrieved
papers), checkpoint selection and evaluation: `score` parses the final text itself with the agent's parser,
so every caller gets the same numbers. docs/rewards.md states every rule and bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from biocheck.agent.report.parse import parse_report
from biocheck.agent.report.quotes import find_quote, overlapping
from biocheck.bounds import NonNegativeFloat, Positive, Share
from biocheck.evidence import query as pubmed_query
from biocheck.evidence.types import Article
from biocheck.labels import Label
from biocheck.rewards.grounding import EntryCheck, check_entry, ehr
from biocheck.rewards.judge.base import Judge, Scores, clean_scores
from biocheck.text import sentence_spans

Variant = Literal["eg_grpo", "outcome_only"]
VARIANTS: tuple[str, ...] = ("eg_grpo", "outcome_only")
JudgeReads = Literal["paper", "quote"]
JUDGE_READS: tuple[str, ...] = ("paper", "quote")
# The judge's probability each side of the report is scored by.
SIDE_LABEL: dict[str, str] = {"supporting": Label.SUPPORTED.value, "refuting": Label.REFUTED.value}


@dataclass
class RewardConfig:
    """Reward weights (params.yaml `reward:`; the paper's values are the defaults)."""

    variant: Variant = "eg_grpo"
    # weights are >= 0: the reward's bounds (docs/rewards.md) assume it
    beta1: NonNegativeFloat = 0.5  # R_search
    beta2: NonNegativeFloat = 1.0  # R_evidence
    beta3: NonNegativeFloat = 1.0  # R_hallucination (subtracted)
    alpha: Positive = 1.0  # saturation of R_evidence
    threshold: Share = 0.5  # an entry's s counts only when s > threshold
    unique_papers: bool = False  # count each (side, pmid) once in R_evidence (guards against repeated citations)
    # what the judge reads of a citation: "paper" = the cited paper's title and abstract (the claim-paper pair);
    # "quote" = the abstract sentence(s) the quote lies in, so the judge scores the evidence the report gives
    judge_reads: JudgeReads = "paper"

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"reward.variant={self.variant!r}: expected one of {', '.join(VARIANTS)}")
        if self.judge_reads not in JUDGE_READS:
            raise ValueError(f"reward.judge_reads={self.judge_reads!r}: expected one of {', '.join(JUDGE_READS)}")

    def bounds(self) -> tuple[float, float]:
        """[lowest, highest] total this config can give."""
        if self.variant == "outcome_only":
            return 0.0, 1.0
        return -self.beta3, 1.0 + self.beta1 + self.beta2


@dataclass
class EpisodeView:
    """What the reward needs from an episode; training builds it from a rollout, evaluation from a trace."""

    claim: str
    gold: Label | None
    queries: list[str] = field(default_factory=list)  # every search the tool executed (budget-refused ones are not)
    ledger: dict[str, Article] = field(default_factory=dict)  # pmid -> every paper retrieved in the episode
    final_text: str = ""

    def __post_init__(self) -> None:
        if self.gold is not None and not isinstance(self.gold, Label):
            self.gold = Label(self.gold)
        if any(not isinstance(a, Article) for a in self.ledger.values()):  # a trace read as plain JSON
            self.ledger = {k: a if isinstance(a, Article) else Article.model_validate(a) for k, a in self.ledger.items()}

    @classmethod
    def from_episode(cls, ep: Any, gold: Label | str | None = None) -> EpisodeView:
        """From an `Episode` trace; `gold` overrides the trace's gold label."""
        g = gold if gold is not None else ep.gold_label
        return cls(claim=ep.claim, gold=Label(g) if g is not None else None, queries=[q.query for q in ep.queries],
                   ledger=dict(ep.ledger), final_text=ep.final_text)


class EntryScore(BaseModel):
    side: str  # "supporting" | "refuting"
    pmid: str
    quote: str
    pmid_retrieved: bool
    strict: bool  # quote found verbatim (after normalisation) in the paper's title or abstract
    fuzzy: bool  # lenient token-level match (diagnostic)
    hallucinated: bool
    s: float  # the judge's probability for the side it is filed under (0 when hallucinated or judge off)
    counted: bool  # contributed to R_evidence (not hallucinated, s > threshold, not a repeat under unique_papers)


class RewardBreakdown(BaseModel):
    variant: str
    outcome: float  # R_outcome in {0, 1}
    search: float  # R_search in [0, 1]
    evidence: float  # R_evidence in [0, 1]
    hallucination: float  # R_hallucination = EHR in [0, 1]
    total: float  # see RewardConfig.bounds()
    ehr: float
    eqs: float | None  # mean s over cited entries (hallucinated = 0); None when nothing is cited
    n_cited: int
    n_hallucinated: int
    n_searches: int
    n_advanced: int
    conclusion: Label | None
    gold: Label | None
    judge_used: bool
    parse_problems: int = 0
    entries: list[EntryScore] = Field(default_factory=list)


# --------------------------------------------------------------------------------------------- components


def r_outcome(conclusion: Label | None, gold: Label | None) -> float:
    """1 if the conclusion equals the gold label (NEI included), else 0; no conclusion or no gold -> 0."""
    return 1.0 if gold is not None and conclusion is not None and conclusion == gold else 0.0


def is_advanced_query(query: str) -> bool:
    """The query parses (PubMed syntax) and uses an upper-case AND/OR/NOT or a field tag such as [tiab]."""
    if not isinstance(query, str):
        return False
    try:
        pubmed_query.parse(query)
        # the parser folds curly quotes before tokenising; do the same so a quoted "AND" stays a phrase word
        toks = pubmed_query.tokenize(query.translate(pubmed_query._QUOTES))
    except Exception:  # SearchError, or anything a hostile string could trigger: not an advanced search
        return False
    return any(t.kind in ("op", "tag") for t in toks)


def r_search(queries: Sequence[str]) -> float:
    """Share of executed searches that are advanced (`is_advanced_query`); 0 with no search."""
    if not queries:
        return 0.0
    return sum(is_advanced_query(q) for q in queries) / len(queries)


def r_evidence(scores: Iterable[float], alpha: float = 1.0, threshold: float = 0.5) -> float:
    """1 - exp(-alpha * sum of the s that exceed `threshold`); s of hallucinated entries must be passed as 0."""
    total = sum(s for s in (_unit(x) for x in scores) if s > threshold)
    return 1.0 - math.exp(-alpha * total)


def r_hallucination(checks: Iterable[EntryCheck]) -> float:
    """The report's EHR: hallucinated / cited entries, 0 when nothing is cited."""
    return ehr(checks)


# ----------------------------------------------------------------------------------------------- scoring


def score(view: EpisodeView, cfg: RewardConfig | None = None, judge: Judge | None = None) -> RewardBreakdown:
    """Every component for one episode (judge None: s = 0, `judge_used` False)."""
    return score_many([view], cfg, judge)[0]


def score_many(views: Sequence[EpisodeView], cfg: RewardConfig | None = None,
               judge: Judge | None = None) -> list[RewardBreakdown]:
    """`score` for many episodes, with every (claim, paper) pair they need sent to the judge in ONE call."""
    cfg = cfg or RewardConfig()
    parsed = [_read(v) for v in views]
    # what the judge is shown of each citation (None: no credit), worked out once: it also keys the answers
    shown = [[judged(view, c, cfg.judge_reads) if judge is not None and not c.hallucinated else None
              for c in checks] for view, (_, _, checks) in zip(views, parsed, strict=True)]
    wanted: dict[tuple[str, str, str, str], tuple[str, Article]] = {}  # dedupe: a group shares claim and papers
    for view, articles in zip(views, shown, strict=True):
        for a in articles:
            if a is not None:
                wanted.setdefault(_pair_id(view.claim, a), (view.claim, a))
    answers: dict[tuple[str, str, str, str], Scores] = {}
    if wanted and judge is not None:
        got = judge.score(list(wanted.values()))
        if len(got) != len(wanted):
            raise RuntimeError(f"judge {judge.spec} returned {len(got)} scores for {len(wanted)} pairs")
        answers = {k: clean_scores(s) for k, s in zip(wanted, got, strict=True)}
    out = []
    for view, (conclusion, problems, checks), articles in zip(views, parsed, shown, strict=True):
        s = [answers[_pair_id(view.claim, a)][SIDE_LABEL[c.side]] if a is not None else 0.0
             for c, a in zip(checks, articles, strict=True)]
        out.append(_breakdown(view, cfg, conclusion, problems, checks, s, judge is not None))
    return out


def _read(view: EpisodeView) -> tuple[Label | None, int, list[EntryCheck]]:
    report = parse_report(view.final_text)
    ledger = view.ledger or {}
    checks = [check_entry(item, "supporting", ledger) for item in report.report.supporting]
    checks += [check_entry(item, "refuting", ledger) for item in report.report.refuting]
    return report.report.conclusion, len(report.problems), checks


def judged(view: EpisodeView, c: EntryCheck, reads: str) -> Article | None:
    """What the judge is shown for a (not hallucinated) citation (`judge_reads`): its paper; or, for a judge of
    quotes, the abstract sentence(s) the quote lies in, in the paper's own words, under the paper's title (the
    shape of a sentence-level judge's training pair, judge.level: sentence). A fragment is judged as its whole
    sentence, and the spellings of one quote as one pair. None (no credit): a quote found only in the title,
    which a judge of quotes must not read twice as evidence."""
    a = view.ledger[c.pmid]
    if reads == "paper":
        return a
    span = find_quote(c.quote, a.abstract)
    if span is None:
        return None
    spans = sentence_spans(a.abstract)
    text = " ".join(a.abstract[spans[k][0]:spans[k][1]].strip() for k in overlapping(span, spans))
    return Article(pmid=a.pmid, title=a.title, abstract=text)


def _pair_id(claim: str, a: Article) -> tuple[str, str, str, str]:
    return (claim, a.pmid, a.title, a.abstract)


def _breakdown(view: EpisodeView, cfg: RewardConfig, conclusion: Label | None, problems: int,
               checks: list[EntryCheck], s: list[float], judge_used: bool) -> RewardBreakdown:
    s = [_unit(x) for x in s]
    seen: set[tuple[str, str]] = set()
    counted = []
    for c, x in zip(checks, s, strict=True):
        ok = not c.hallucinated and x > cfg.threshold and not (cfg.unique_papers and (c.side, c.pmid) in seen)
        if ok:
            seen.add((c.side, c.pmid))
        counted.append(ok)
    outcome = r_outcome(conclusion, view.gold)
    search = r_search(view.queries)
    evidence = r_evidence([x for x, ok in zip(s, counted, strict=True) if ok], cfg.alpha, cfg.threshold)
    hallucination = r_hallucination(checks)
    if cfg.variant == "outcome_only":
        total = outcome
    else:
        total = outcome + cfg.beta1 * search + cfg.beta2 * evidence - cfg.beta3 * hallucination
    entries = [EntryScore(side=c.side, pmid=c.pmid, quote=c.quote, pmid_retrieved=c.pmid_retrieved,
                          strict=c.quote_found_strict, fuzzy=c.quote_found_fuzzy, hallucinated=c.hallucinated,
                          s=x, counted=ok) for c, x, ok in zip(checks, s, counted, strict=True)]
    return RewardBreakdown(
        variant=cfg.variant, outcome=outcome, search=search, evidence=evidence, hallucination=hallucination,
        total=total, ehr=hallucination, eqs=(sum(s) / len(s)) if s else None, n_cited=len(checks),
        n_hallucinated=sum(c.hallucinated for c in checks), n_searches=len(view.queries),
        n_advanced=sum(is_advanced_query(q) for q in view.queries), conclusion=conclusion, gold=view.gold,
        judge_used=judge_used, parse_problems=problems, entries=entries,
    )


def _unit(x: float) -> float:
    """A probability as a finite float in [0, 1] (a broken judge must not break the reward's bounds)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return 0.0
    return min(1.0, max(0.0, v)) if math.isfinite(v) else 0.0
