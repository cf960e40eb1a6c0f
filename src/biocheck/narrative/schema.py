"""The records that leave this package: a claim found in a passage, a span skipped as no claim, an extraction.

Offsets are Python string indices into the passage (`passage[start:end]`), so a span can be shown, highlighted
or compared without re-reading the text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Method = Literal["model", "sentences"]  # how a claim was found: the model's extraction or the sentence rule
METHODS: tuple[str, ...] = ("model", "sentences")
SkipReason = Literal["question", "opinion", "anecdote", "not a claim"]
SKIP_REASONS: tuple[str, ...] = ("question", "opinion", "anecdote", "not a claim")


@dataclass(frozen=True)
class Span:
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"a span needs 0 <= start <= end, got ({self.start}, {self.end})")


@dataclass(frozen=True)
class ExtractedClaim(Span):
    """An atomic, check-worthy claim; `start:end` is the passage text it comes from (the model may reword it,
    and two claims may share one sentence's span)."""

    text: str
    method: Method


@dataclass(frozen=True)
class SkippedSpan(Span):
    """Passage text that holds no claim to check, and why."""

    reason: SkipReason


@dataclass(frozen=True)
class Extraction:
    passage: str
    claims: tuple[ExtractedClaim, ...]
    skipped: tuple[SkippedSpan, ...]
    method: Method
    note: str = ""  # set when the sentence rule stood in for the model: why

    def texts(self) -> list[str]:
        return [c.text for c in self.claims]

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Extraction:
        """The inverse of `dataclasses.asdict` (a cached extraction read back from JSON)."""
        return cls(row["passage"], tuple(ExtractedClaim(**c) for c in row["claims"]),
                   tuple(SkippedSpan(**s) for s in row["skipped"]), row["method"], row.get("note", ""))
