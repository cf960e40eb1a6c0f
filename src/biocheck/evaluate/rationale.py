"""Judge-free evidence scores: a report's citations against SciFact's gold rationales, scored as SciFact's
own shared task scores a system (Wadden et al. 2020; allenai/scifact `verisci/evaluate/lib/metrics.py`).

A report cites evidence items (side, PMID, verbatim quote). Each item is mapped onto the gold abstract:

- the cited id is a corpus document when it is one (the local index serves corpus ids as PMIDs); a live
  PubMed id is matched to the corpus document whose title has the same normal form as the retrieved
  paper's title; anything else is a document outside the corpus (never evidence);
- the quote is located in the document's abstract (sentences joined by one space, as the index shows
  them) with the grounding rule (`agent.report.quotes.find_quote`: case, quote marks, dashes and spacing
  forgiven, nothing else), and selects every sentence its span overlaps: an exact sentence, a part of
  one, or a passage across two;
- a quote that is not in the abstract (invented, paraphrased, or from the title) selects one sentence
  that is in no rationale, so it costs precision. SciFact's predictors cannot produce such an item; a
  report can, and an evidence score that ignored it could be gamed by citing freely;
- the document's predicted label is the side most of its items are filed under (supporting ->
  SUPPORTED, refuting -> REFUTED); a tie has no label and never matches.

Then, per claim (counts), summed over claims and turned into precision / recall / F1:

- abstract level: `relevant` = gold evidence documents; `retrieved` = documents the report cites;
  `label_only` = cited gold documents with the right label; `rationalized` = those whose first 3 selected
  sentences (SciFact's cap) contain every sentence of at least one gold rationale;
- sentence level: `relevant` = gold rationale sentences; `retrieved` = selected sentences (each once per
  document); `selection` = selected sentences of a gold document that belong to a gold rationale whose
  sentences were all selected; `label` = those in documents with the right label.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from biocheck.agent.report.quotes import normalize_text, quoted_sentences
from biocheck.data.gold import check_usable
from biocheck.data.schema import GoldEvidence
from biocheck.evidence.types import Article
from biocheck.labels import Label

MAX_ABSTRACT_SENTS = 3  # SciFact: only the first 3 selected sentences can rationalise an abstract
SIDE_LABEL = {"supporting": Label.SUPPORTED, "refuting": Label.REFUTED}
LEVELS = {"abstract_label_only": ("abstract", "label_only"), "abstract_rationalized": ("abstract", "rationalized"),
          "sentence_selection": ("sentence", "selection"), "sentence_label": ("sentence", "label")}


class RationaleCounts(BaseModel):
    """One claim's counts; every score is a ratio of their sums over claims (so claims can be resampled)."""

    abstract_relevant: int = 0
    abstract_retrieved: int = 0
    abstract_label_only: int = 0
    abstract_rationalized: int = 0
    sentence_relevant: int = 0
    sentence_retrieved: int = 0
    sentence_selection: int = 0
    sentence_label: int = 0


@dataclass(frozen=True)
class Cited:
    """One evidence item of a report, as the reward reads it."""

    side: str  # "supporting" | "refuting"
    pmid: str
    quote: str


@dataclass
class DocPrediction:
    label: Label | None
    sentences: list[int | str]  # selected sentence indices in citation order; "?k": a quote on no sentence


class CorpusSentences:
    """The abstracts of an evidence corpus as sentence lists, and a title index for ids from elsewhere."""

    def __init__(self, docs: Mapping[str, tuple[str, Sequence[str]]]) -> None:
        self.docs = {str(k): (title, [s.strip() for s in sentences]) for k, (title, sentences) in docs.items()}
        self._by_title: dict[str, str | None] = {}
        for doc_id, (title, _) in self.docs.items():
            key = normalize_text(title)
            if key:  # a title two documents share identifies neither
                self._by_title[key] = None if key in self._by_title else doc_id

    @classmethod
    def from_jsonl(cls, path: Path | str) -> CorpusSentences:
        """A prepared corpus (`id`, `title`, `abstract`: [sentence, ...]) or raw SciFact (`doc_id`)."""
        docs = {}
        with Path(path).open(encoding="utf-8") as lines:
            for line in lines:
                if line.strip():
                    r = json.loads(line)
                    abstract = r.get("abstract") or []
                    docs[str(r["id"] if "id" in r else r["doc_id"])] = (
                        r.get("title") or "", abstract if isinstance(abstract, list) else [abstract])
        return cls(docs)

    def resolve(self, pmid: str, article: Article | None = None) -> str | None:
        """The corpus document an item cites: its id, else the retrieved paper's title; None: not in the corpus."""
        if pmid in self.docs:
            return pmid
        if article is not None and article.title:
            return self._by_title.get(normalize_text(article.title))
        return None

    def select(self, doc_id: str, quote: str) -> list[int]:
        """Indices of the sentences the quote's span overlaps in the joined abstract ([] when it is not there)."""
        return quoted_sentences(quote, self.docs[doc_id][1])


def doc_predictions(items: Iterable[Cited], corpus: CorpusSentences,
                    ledger: Mapping[str, Article] | None = None) -> dict[str, DocPrediction]:
    """The report's citations as SciFact document predictions: {document: (label, selected sentences)}."""
    ledger = ledger or {}
    sides: dict[str, Counter] = {}
    picked: dict[str, list[int | str]] = {}
    for k, item in enumerate(items):
        doc = corpus.resolve(item.pmid, ledger.get(item.pmid))
        key = doc if doc is not None else f"pmid:{item.pmid}"  # outside the corpus: cited, never evidence
        sides.setdefault(key, Counter())[item.side] += 1
        chosen = picked.setdefault(key, [])
        hits: list[int | str] = list(corpus.select(doc, item.quote)) if doc is not None else []
        for s in hits or [f"?{k}"]:  # a quote on no sentence still selects one (wrong) sentence
            if s not in chosen:
                chosen.append(s)
    out = {}
    for key, counts in sides.items():
        (top, n), *rest = counts.most_common()
        label = None if rest and rest[0][1] == n else SIDE_LABEL.get(top)
        out[key] = DocPrediction(label=label, sentences=picked[key])
    return out


def gold_docs(evidence: Sequence[GoldEvidence]) -> dict[str, tuple[Label, list[frozenset[int]]]]:
    """{document: (label, rationales)} from a claim's gold evidence (one entry per rationale)."""
    out: dict[str, tuple[Label, list[frozenset[int]]]] = {}
    for ev in evidence:
        label, sets = out.get(ev.doc_id, (ev.label, []))
        out[ev.doc_id] = (label, [*sets, frozenset(ev.sentences)])
    return out


def rationale_counts(evidence: Sequence[GoldEvidence], items: Iterable[Cited], corpus: CorpusSentences,
                     ledger: Mapping[str, Article] | None = None, where: str = "gold evidence") -> RationaleCounts:
    """One claim's SciFact counts for the items a report cites (see the module docstring). Gold that cannot be
    placed in `corpus` (a paper outside it, a sentence outside its abstract) raises InputError naming `where`."""
    check_usable(evidence, lambda d: len(corpus.docs[d][1]) if d in corpus.docs else None, where)
    gold = gold_docs(evidence)
    c = RationaleCounts(abstract_relevant=len(gold),
                        sentence_relevant=sum(len(r) for _, sets in gold.values() for r in sets))
    for doc, pred in doc_predictions(items, corpus, ledger).items():
        c.abstract_retrieved += 1
        c.sentence_retrieved += len(pred.sentences)
        if doc not in gold:
            continue
        label, rationales = gold[doc]
        right_label = pred.label == label
        chosen = set(pred.sentences)
        first = set(pred.sentences[:MAX_ABSTRACT_SENTS])
        if right_label:
            c.abstract_label_only += 1
            c.abstract_rationalized += any(r <= first for r in rationales)
        # a sentence counts when its whole rationale was selected (SciFact: rationales never share a sentence)
        good = sum(1 for s in chosen if any(s in r and r <= chosen for r in rationales))
        c.sentence_selection += good
        c.sentence_label += good if right_label else 0
    return c


def prf(correct: int, retrieved: int, relevant: int) -> dict[str, float]:
    """Precision, recall and F1 from counts (0 where a denominator is 0, as scikit-learn's zero_division=0)."""
    p = correct / retrieved if retrieved else 0.0
    r = correct / relevant if relevant else 0.0
    return {"precision": p, "recall": r, "f1": 2 * correct / (retrieved + relevant) if correct else 0.0}


def sentence_f1(c: RationaleCounts | None) -> float | None:
    """One claim's sentence-level selection + label F1 (None: no gold rationales for it)."""
    return None if c is None else prf(c.sentence_label, c.sentence_retrieved, c.sentence_relevant)["f1"]


def rationale_scores(counts: Iterable[RationaleCounts]) -> dict[str, dict[str, float]]:
    """SciFact's four scores over claims: {abstract_label_only, abstract_rationalized, sentence_selection,
    sentence_label: {precision, recall, f1}} (F1 = 2PR/(P+R) = 2 correct / (retrieved + relevant))."""
    total = Counter()
    for c in counts:
        total.update(c.model_dump())
    return {name: prf(total[f"{level}_{kind}"], total[f"{level}_retrieved"], total[f"{level}_relevant"])
            for name, (level, kind) in LEVELS.items()}
