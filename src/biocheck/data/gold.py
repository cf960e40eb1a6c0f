"""When a claim's gold evidence can be scored: the rules `data validate` checks and scoring refuses to break.

SciFact's rationales are sentence numbers of corpus abstracts, and a SciFact claim is SUPPORTED or REFUTED
exactly when it has rationales, all on its side (NEI has none). Gold that breaks these rules cannot be
scored: a rationale outside its abstract or a paper outside the corpus is never found, and a SUPPORTED claim
without rationales drops out of every evidence score. `data validate` fails on such records; the scorers
(evaluate/rationale.py, rewards/funnel.py, the evaluation harness) raise instead of scoring around them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from biocheck.io import InputError
from biocheck.labels import LABELS, Label

EVIDENCE_DATASETS = ("scifact",)  # the datasets whose records carry gold rationales
REVALIDATE = "Run `biocheck data validate`: it names every such record."


def sentence_problem(sentences: Any, doc_id: str | None, n: int | None) -> str | None:
    """Why a rationale's sentence numbers cannot be looked up in an abstract of `n` sentences (None: they can;
    also when `n` is None, an unknown paper, which `paper_problem` names)."""
    if not isinstance(sentences, list) or not sentences or not all(type(i) is int for i in sentences):
        return f"{sentences!r} is not a list of sentence numbers"
    past = [i for i in sentences if n is not None and not 0 <= i < n]
    return f"sentence {past[0]} of doc {doc_id}, which has {n}" if past else None


def label_problem(dataset: Any, label: Any, evidence_labels: Iterable[Any]) -> str | None:
    """Why a record's label and its rationales' labels disagree (None: they agree, or the dataset has none, or
    a label is not one of ours, which the label rules name)."""
    label = label.value if isinstance(label, Label) else label
    if dataset not in EVIDENCE_DATASETS or label not in LABELS:
        return None
    found = [x.value if isinstance(x, Label) else x for x in evidence_labels]
    if label == Label.NEI.value:
        return f"NEI with {len(found)} gold rationale(s); an NEI claim has none" if found else None
    if not found:
        return f"{label} with no gold rationale; a {dataset} {label} claim has at least one"
    other = next((x for x in found if x in LABELS and x != label), None)
    return f"{label} with a {other} rationale; every rationale is on the claim's side" if other else None


def check_usable(evidence: Sequence[Any], n_sentences: Callable[[str], int | None], where: str) -> None:
    """Raise InputError naming `where` (the claim) and the rule when a rationale cannot be placed: its paper
    is not in the corpus (`n_sentences(doc_id)` is None) or a sentence number is outside the abstract."""
    for ev in evidence:
        n = n_sentences(ev.doc_id)
        if n is None:
            raise InputError(f"{where}: gold paper {ev.doc_id} is not in the corpus, so its rationale "
                             f"{ev.sentences} cannot be scored. {REVALIDATE}")
        if problem := sentence_problem(list(ev.sentences), ev.doc_id, n):
            raise InputError(f"{where}: gold {problem}, so it cannot be scored. {REVALIDATE}")
