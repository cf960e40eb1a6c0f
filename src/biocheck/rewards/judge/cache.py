"""The judge's score cache: a pair is never scored twice, across steps, runs and processes.

One SQLite file (WAL: readers never block the writer; `busy_timeout`; every write one `BEGIN IMMEDIATE`
transaction, retried while busy), one connection per thread, reopened after a fork. Key:

  (judge fingerprint, judge prompt hash, sha256(claim), pmid, sha256(title + abstract))

The issue's key is (judge, prompt hash, claim, pmid); the paper's text hash is added because ids are only
unique within a source (a SciFact S2ORC id can equal a PMID) and a re-fetched abstract may change. Claims
and texts are stored as hashes: the file holds scores, not data.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from biocheck.errors import BioCheckError
from biocheck.evidence.types import Article
from biocheck.rewards.judge.base import KEYS, Judge, JudgeError, Pair, Scores, clean_scores
from biocheck.sqlite_db import SQLiteDB

log = logging.getLogger(__name__)

T = TypeVar("T")
DEFAULT_FILENAME = "judge_cache.sqlite"
SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
    judge       TEXT NOT NULL,
    prompt_hash TEXT NOT NULL,
    claim_sha   TEXT NOT NULL,
    pmid        TEXT NOT NULL,
    doc_sha     TEXT NOT NULL,
    supported   REAL NOT NULL,
    refuted     REAL NOT NULL,
    nei         REAL NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (judge, prompt_hash, claim_sha, pmid, doc_sha)
) WITHOUT ROWID
"""
_COLUMNS = {"SUPPORTED": "supported", "REFUTED": "refuted", "NEI": "nei"}
Key = tuple[str, str, str, str, str]


class JudgeCacheError(BioCheckError):
    """The cache file could not be read or written."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def pair_key(judge_fingerprint: str, prompt_hash: str, claim: str, article: Article) -> Key:
    return (judge_fingerprint, prompt_hash, _sha(str(claim)), article.pmid,
            _sha(f"{article.title}\0{article.abstract}"))


class JudgeCache(SQLiteDB):
    """SQLite-backed (key -> scores) map, safe for many threads and processes."""

    label = "judge cache"
    error = JudgeCacheError
    schema = _SCHEMA
    schema_version = SCHEMA_VERSION

    def __init__(self, path: str | os.PathLike[str], busy_timeout: float = 30.0, lock_timeout: float = 120.0) -> None:
        p = Path(path)
        super().__init__(p if p.suffix in (".sqlite", ".sqlite3", ".db") else p / DEFAULT_FILENAME,
                         busy_timeout, lock_timeout)

    def get_many(self, keys: Sequence[Key]) -> dict[Key, Scores]:
        """The cached scores of those keys that are cached."""
        conn = self._conn()
        found: dict[Key, Scores] = {}

        def read() -> None:
            for key in dict.fromkeys(keys):
                row = conn.execute(
                    "SELECT supported, refuted, nei FROM scores WHERE judge=? AND prompt_hash=? AND claim_sha=? "
                    "AND pmid=? AND doc_sha=?", key).fetchone()
                if row is not None:
                    found[key] = dict(zip(KEYS, (float(v) for v in row), strict=True))

        self._retry(read, "read")
        return found

    def put_many(self, items: dict[Key, Scores]) -> None:
        """Store scores; a key already there keeps its first value (a judge is deterministic)."""
        if not items:
            return
        now = datetime.now(UTC).isoformat(timespec="seconds")
        rows = [(*key, *(float(s[k]) for k in KEYS), now) for key, s in items.items()]
        self._write(lambda c: c.executemany("INSERT OR IGNORE INTO scores VALUES (?,?,?,?,?,?,?,?,?)", rows))

    def __len__(self) -> int:
        return self._retry(lambda: self._conn().execute("SELECT COUNT(*) FROM scores").fetchone()[0], "count")


class CachedJudge:
    """A judge behind the cache: looks every pair up, scores only the misses (deduplicated) in ONE call."""

    def __init__(self, judge: Judge, cache: JudgeCache) -> None:
        self.judge, self.cache = judge, cache
        self.spec = judge.spec
        self.prompt_hash = judge.prompt_hash
        self.hits = 0  # pairs answered from the cache (or by an identical pair earlier in the same call)
        self.misses = 0  # pairs sent to the judge
        self._lock = threading.Lock()

    def fingerprint(self) -> str:
        return self.judge.fingerprint()

    def score(self, pairs: Sequence[Pair]) -> list[Scores]:
        if not pairs:
            return []
        fp = self.judge.fingerprint()
        keys = [pair_key(fp, self.prompt_hash, claim, article) for claim, article in pairs]
        known = self.cache.get_many(keys)
        todo: dict[Key, Pair] = {}
        for key, pair in zip(keys, pairs, strict=True):
            if key not in known and key not in todo:
                todo[key] = pair
        if todo:
            fresh = [clean_scores(s) for s in self.judge.score(list(todo.values()))]
            if len(fresh) != len(todo):  # say so here: a short answer must not be cached against the wrong pairs
                raise JudgeError(f"judge {self.judge.spec} returned {len(fresh)} scores for {len(todo)} pairs")
            new = dict(zip(todo, fresh, strict=True))
            self.cache.put_many(new)
            known.update(new)
        with self._lock:
            self.misses += len(todo)
            self.hits += len(pairs) - len(todo)
        return [dict(known[k]) for k in keys]

    def stats(self) -> dict[str, float]:
        total = self.hits + self.misses
        return {"hits": self.hits, "misses": self.misses, "hit_rate": self.hits / total if total else 0.0}

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = 0
