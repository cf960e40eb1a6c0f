"""Read an abstract corpus (JSON lines) as Articles for the local index."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from biocheck.evidence.types import Article


def articles_from_corpus(path: Path | str, source: str = "corpus:scifact") -> Iterator[Article]:
    """Yield one Article per line of a corpus file.

    Accepts the prepared format (``id``: str) and raw SciFact (``doc_id``: int). ``abstract`` is
    a list of sentences, joined with single spaces. Optional ``mesh``, ``year`` and ``journal``
    keys are kept when present. Blank lines are skipped; a malformed line raises ValueError
    naming the line, because a silently shorter corpus would skew every evaluation.
    """
    path = Path(path)
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                yield _article(record, source)
            except (ValueError, KeyError, TypeError) as exc:
                raise ValueError(f"{path}:{number}: not a corpus record ({exc})") from exc


def _article(record: dict, source: str) -> Article:
    doc_id = record["id"] if "id" in record else record["doc_id"]
    abstract = record.get("abstract") or ""
    if isinstance(abstract, list):
        abstract = " ".join(sentence.strip() for sentence in abstract)
    return Article(
        pmid=str(doc_id),
        title=record.get("title") or "",
        abstract=abstract,
        year=record.get("year"),
        journal=record.get("journal"),
        mesh=list(record.get("mesh") or []),
        source=source,
    )
