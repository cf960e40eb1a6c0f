"""What every evidence judge shares: the prompt (package data, hashed), the answer words, the protocol.

A judge reads a claim and one paper (title + abstract: abstract-level, as in the paper) and returns, for each
of SUPPORTED / REFUTED / NEI, the probability s = exp(logprob) that its first answer token is that label's.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Protocol, runtime_checkable

from biocheck.errors import BioCheckError
from biocheck.evidence.types import Article
from biocheck.labels import DISPLAY, Label

PROMPT_FILE = "judge_prompt.md"
DEFAULT_MAX_ABSTRACT_CHARS = 6000  # a long structured abstract fits; a pasted full text does not blow the context
KEYS: tuple[str, ...] = tuple(label.value for label in Label)  # "SUPPORTED", "REFUTED", "NEI"
# The words the prompt asks for; each label's answer token is the first token of its word.
ANSWER_WORDS: dict[str, str] = {label.value: DISPLAY[label] for label in Label}

Pair = tuple[str, Article]  # (claim, paper)
Scores = dict[str, float]  # KEYS -> s in [0, 1]; the three sum to at most 1


class JudgeError(BioCheckError):
    """The judge cannot score (bad spec, model without a chat template, server without logprobs, ...)."""


@runtime_checkable
class Judge(Protocol):
    """Scores (claim, paper) pairs. `fingerprint()` and `prompt_hash` make the cache key."""

    spec: str
    prompt_hash: str

    def fingerprint(self) -> str: ...

    def score(self, pairs: Sequence[Pair]) -> list[Scores]: ...


@cache
def prompt_template() -> str:
    return resources.files("biocheck.rewards.judge").joinpath(PROMPT_FILE).read_text(encoding="utf-8").strip()


def _fields(claim: str, article: Article, max_abstract_chars: int | None) -> dict[str, str]:
    abstract = article.abstract or ""
    if max_abstract_chars is not None and len(abstract) > max_abstract_chars:
        abstract = abstract[:max_abstract_chars] + " ..."
    return {"claim": str(claim).strip(), "title": (article.title or "").strip(),
            "abstract": abstract.strip() or "(no abstract)"}


def render_prompt(claim: str, article: Article, max_abstract_chars: int | None = DEFAULT_MAX_ABSTRACT_CHARS) -> str:
    """The judge's user message for one pair (the abstract cut to `max_abstract_chars`)."""
    return prompt_template().format(**_fields(claim, article, max_abstract_chars))


def prompt_spans(claim: str, article: Article, max_abstract_chars: int | None = DEFAULT_MAX_ABSTRACT_CHARS
                 ) -> tuple[str, tuple[int, int], tuple[int, int]]:
    """`render_prompt`'s text with the character spans of the claim and of the paper (title through abstract)."""
    fields = _fields(claim, article, max_abstract_chars)
    template = prompt_template()

    def start(name: str) -> int:  # where the field begins: the template before it, rendered
        return len(template[: template.index("{" + name + "}")].format(**fields))

    text = template.format(**fields)
    claim_at, title_at, abstract_at = start("claim"), start("title"), start("abstract")
    return text, (claim_at, claim_at + len(fields["claim"])), (title_at, abstract_at + len(fields["abstract"]))


def judge_prompt_hash(*settings: object) -> str:
    """sha256 (16 hex) of the template, the answer words and every setting that changes a score."""
    h = hashlib.sha256(prompt_template().encode())
    for key in KEYS:
        h.update(f"\0{key}={ANSWER_WORDS[key]}".encode())
    for s in settings:
        h.update(f"\0{s!r}".encode())
    return h.hexdigest()[:16]


def clean_scores(raw: dict[str, float]) -> Scores:
    """Every key present, each finite in [0, 1], the sum at most 1 (float rounding is scaled away)."""
    out = {}
    for key in KEYS:
        v = float(raw.get(key, 0.0))
        out[key] = min(1.0, max(0.0, v)) if math.isfinite(v) else 0.0
    total = sum(out.values())
    if total > 1.0:
        out = {k: v / total for k, v in out.items()}
        excess = sum(out.values()) - 1.0  # the division itself can round up by an ulp
        if excess > 0:
            top = max(out, key=out.__getitem__)
            out[top] = max(0.0, out[top] - excess)
    return out


def zero_scores() -> Scores:
    return dict.fromkeys(KEYS, 0.0)
