"""The passage benchmark: passages composed from held-out claims whose atomic claims and labels are known.

Each passage is 2 to 4 claims (`MIN_CLAIMS`, `MAX_CLAIMS`), in that order, a connective sentence of
`CONNECTIVES` between each two, and one sentence of `NON_CLAIMS` (a question or an opinion, with the reason the
sentence rule gives it) at a seeded position. A claim that does not end in . ! or ? is followed by a full stop,
outside its span; white space inside a claim is collapsed to single spaces, so its span holds exactly its text.

Deterministic: the claims are sorted by id and shuffled with `random.Random(seed)`; every later choice (how many
claims, which connective, which non-claim and where) comes from the same generator in a fixed order, so the same
claims and seed give byte-identical passages. Each claim is used once, so `n_passages` is a ceiling: the pool
runs out after about len(claims) / 3 passages.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from biocheck.data.prepare import load_full
from biocheck.data.schema import ClaimRecord
from biocheck.io import InputError, atomic_path, dump_jsonl, read_jsonl
from biocheck.labels import Label
from biocheck.narrative.schema import SkippedSpan, SkipReason, Span

MIN_CLAIMS, MAX_CLAIMS = 2, 4
# Plain sentences that join claims and state nothing to check (the sentence rule still counts them as claims:
# that is the one-claim-per-sentence baseline's cost)
CONNECTIVES: tuple[str, ...] = (
    "Another study looked at a related question.",
    "A separate line of research reports a further finding.",
    "Researchers have also examined a different point.",
    "A second report adds another observation.",
)
NON_CLAIMS: tuple[tuple[str, SkipReason], ...] = (
    ("Is that true for everyone, though?", "question"),
    ("What does this mean for patients?", "question"),
    ("I think this deserves a closer look.", "opinion"),
    ("In my opinion, the evidence is still thin.", "opinion"),
)


class HeldOutClaim(Protocol):
    """What a benchmark claim needs (a `ClaimRecord` has it)."""

    id: str
    claim: str
    label: Label


@dataclass(frozen=True)
class GoldClaim(Span):
    claim_id: str
    text: str
    label: Label


@dataclass(frozen=True)
class BenchPassage:
    id: str
    text: str
    claims: tuple[GoldClaim, ...]
    non_claim: SkippedSpan
    connectives: tuple[Span, ...]

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for c in row["claims"]:
            c["label"] = Label(c["label"]).value
        return row


def held_out_claims(prepared_dir: Path | str = "data/prepared") -> list[ClaimRecord]:
    """SciFact's held-out claims: every claim of the release's test split (SciFact dev), not only the subset."""
    return [c for c in load_full("scifact", prepared_dir) if c.split == "test"]


class _Claim(NamedTuple):
    id: str
    text: str  # white space collapsed: the exact text of the passage's span
    label: Label


def build_passages(claims: Iterable[HeldOutClaim], seed: int, n_passages: int) -> list[BenchPassage]:
    """Up to `n_passages` passages from `claims` (module docstring); fewer when the claims run out."""
    if n_passages < 1:
        raise InputError(f"n_passages is {n_passages}; ask for at least 1 passage.")
    pool = sorted(_Claim(str(c.id), " ".join(c.claim.split()), Label(c.label)) for c in claims)
    pool = [c for c in pool if c.text]
    rng = random.Random(seed)
    rng.shuffle(pool)
    passages: list[BenchPassage] = []
    while len(passages) < n_passages and len(pool) >= MIN_CLAIMS:
        k = min(rng.randint(MIN_CLAIMS, MAX_CLAIMS), len(pool))
        chosen, pool = pool[:k], pool[k:]
        passages.append(_compose(f"p{len(passages):04d}", chosen, rng))
    return passages


def _compose(passage_id: str, chosen: list[_Claim], rng: random.Random) -> BenchPassage:
    # the sentences in order: a claim, or (sentence, "connective" or the non-claim's reason)
    order: list[_Claim | tuple[str, str]] = []
    for i, claim in enumerate(chosen):
        if i:
            order.append((rng.choice(CONNECTIVES), "connective"))
        order.append(claim)
    non_claim, reason = rng.choice(NON_CLAIMS)
    at_non_claim = rng.randint(0, len(order))
    order.insert(at_non_claim, (non_claim, reason))
    text, claims, connectives, spans = "", [], [], []
    for piece in order:
        text += " " if text else ""
        start = len(text)
        if isinstance(piece, _Claim):
            claims.append(GoldClaim(start, start + len(piece.text), claim_id=piece.id, text=piece.text,
                                    label=piece.label))
            text += piece.text if piece.text.endswith((".", "!", "?")) else piece.text + "."
        else:
            text += piece[0]
            if piece[1] == "connective":
                connectives.append(Span(start, len(text)))
        spans.append(Span(start, len(text)))
    skipped = SkippedSpan(spans[at_non_claim].start, spans[at_non_claim].end, reason=reason)
    return BenchPassage(passage_id, text, tuple(claims), skipped, tuple(connectives))


def write_passages(dest: Path | str, passages: Iterable[BenchPassage]) -> int:
    """The passages as JSON lines, written atomically; the number written."""
    with atomic_path(dest) as tmp:
        return dump_jsonl(tmp, (p.to_row() for p in passages))


def read_passages(path: Path | str) -> list[BenchPassage]:
    """The passages `write_passages` wrote (InputError naming the file and line when one is not such a row)."""
    if not Path(path).is_file():
        raise InputError(f"{path}: no such file; compose the passages first: `dvc repro narrative_passages` (or "
                         "`biocheck narratives passages`).")
    out = []
    for i, row in enumerate(read_jsonl(path, fix="Rebuild it: `dvc repro narrative_passages`."), 1):
        try:
            out.append(BenchPassage(
                row["id"], row["text"],
                tuple(GoldClaim(c["start"], c["end"], claim_id=str(c["claim_id"]), text=c["text"],
                                label=Label(c["label"])) for c in row["claims"]),
                SkippedSpan(**row["non_claim"]), tuple(Span(**s) for s in row["connectives"])))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}, line {i}: not a benchmark passage ({type(e).__name__}: {e}); rebuild it: "
                             "`dvc repro narrative_passages`.") from None
    return out
