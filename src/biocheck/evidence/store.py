"""The evidence store: every answered query and every article seen, in one SQLite file.

Schema (version 1, `PRAGMA user_version`):
  queries(id, query, norm, backend, searched_at, translation, total, namespace, result_ids, stored_at)
      one row per (norm, backend); `norm` is the query lowercased with whitespace collapsed;
      `result_ids` is the JSON list of article ids in the backend's order.
  articles(id, namespace, pmid, title, abstract, year, journal, mesh, source, first_seen)
      one row per (namespace, pmid); `mesh` is a JSON list. Ids are only unique within a
      namespace: "pubmed" for PubMed records (sources "entrez" and "baseline:*"), otherwise the
      source itself (e.g. "corpus:scifact", whose S2ORC ids would collide with PMIDs).

Concurrency: WAL mode (readers never block the writer), `busy_timeout`, every write in a
`BEGIN IMMEDIATE` transaction (takes the write lock up front, so no deadlocking lock upgrade)
retried while the database is busy. A query row and its articles are written in the same
transaction, so a crash mid-write leaves nothing behind. One connection per thread (sqlite3
connections must not be shared across threads); a forked child opens its own.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import unicodedata
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from biocheck.evidence.types import Article, SearchError, SearchResult
from biocheck.sqlite_db import SQLiteDB

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_FILENAME = "evidence.sqlite"
SCHEMA_VERSION = 1
PUBMED = "pubmed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS queries (
    id          INTEGER PRIMARY KEY,
    query       TEXT NOT NULL,
    norm        TEXT NOT NULL,
    backend     TEXT NOT NULL,
    searched_at TEXT,
    translation TEXT,
    total       INTEGER,
    namespace   TEXT,
    result_ids  TEXT NOT NULL,
    stored_at   TEXT NOT NULL,
    UNIQUE (norm, backend)
);
CREATE TABLE IF NOT EXISTS articles (
    id          INTEGER PRIMARY KEY,
    namespace   TEXT NOT NULL,
    pmid        TEXT NOT NULL,
    title       TEXT NOT NULL,
    abstract    TEXT NOT NULL,
    year        INTEGER,
    journal     TEXT,
    mesh        TEXT NOT NULL,
    source      TEXT NOT NULL,
    first_seen  TEXT NOT NULL,
    UNIQUE (namespace, pmid)
);
"""


class StoreError(SearchError):
    """The evidence store could not complete an operation (damaged file, locked too long ...).

    A SearchError: the search tool reports it as text, and the CLI prints it as one line.
    """


def normalize_query(query: str) -> str:
    """The lookup key of a query: Unicode-normalised, lowercased, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFKC", query).lower().split())


def namespace_of(source: str) -> str:
    """The id space an article's id belongs to (see module docstring)."""
    if source in ("entrez", PUBMED) or source.startswith("baseline:"):
        return PUBMED
    return source


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A path ending in .sqlite/.sqlite3/.db is the file; anything else is its directory."""
    p = Path(path)
    return p if p.suffix in (".sqlite", ".sqlite3", ".db") else p / DEFAULT_FILENAME


class EvidenceStore(SQLiteDB):
    """SQLite-backed record of queries and articles, safe for many threads and processes."""

    label = "evidence store"
    error = StoreError
    schema = _SCHEMA
    schema_version = SCHEMA_VERSION
    # Never deleted for the user: it holds every query and abstract fetched so far.
    damaged_hint = ("move it aside (or restore it: `dvc checkout data/evidence/evidence.sqlite`), then run "
                    "`biocheck evidence build` (or `dvc repro -f -s evidence`) to start a new, empty store")

    def __init__(self, path: str | os.PathLike[str], busy_timeout: float = 30.0, lock_timeout: float = 120.0) -> None:
        super().__init__(resolve_path(path), busy_timeout, lock_timeout)

    # ------------------------------------------------------------------ writes

    def put(self, result: SearchResult, replace: bool = False) -> bool:
        """Store a query's answer and its articles in one transaction.

        The first answer stored for a (normalised query, backend) stays unless `replace`; the
        articles are upserted either way. Returns True when the query row was written.
        """
        namespaces = {namespace_of(a.source) for a in result.articles}
        if len(namespaces) > 1:
            raise ValueError(f"one result mixes id namespaces {sorted(namespaces)}; store them separately")
        row = {
            "query": result.query,
            "norm": normalize_query(result.query),
            "backend": result.backend,
            "searched_at": result.searched_at or _now(),
            "translation": result.translation,
            "total": result.total,
            "namespace": next(iter(namespaces), None),
            "result_ids": json.dumps([a.pmid for a in result.articles]),
            "stored_at": _now(),
        }

        def body(conn: sqlite3.Connection) -> bool:
            written = _write_query(conn, row, replace)
            _upsert_articles(conn, result.articles, row["stored_at"])
            return written

        return self._write(body)

    def put_articles(self, articles: Iterable[Article], batch: int = 1000) -> int:
        """Upsert articles without a query (e.g. from baseline files); one transaction per batch."""
        count = 0
        chunk: list[Article] = []
        for article in articles:
            chunk.append(article)
            if len(chunk) >= batch:
                count += self._write(lambda conn, c=chunk: _upsert_articles(conn, c, _now()))
                chunk = []
        if chunk:
            count += self._write(lambda conn: _upsert_articles(conn, chunk, _now()))
        return count

    # ------------------------------------------------------------------ reads

    def get(self, query: str, backend: str) -> SearchResult | None:
        """The stored answer to `query` (matched on its normalised text) from `backend`."""

        def body(conn: sqlite3.Connection) -> SearchResult | None:
            row = conn.execute(
                "SELECT query, backend, searched_at, translation, total, namespace, result_ids"
                " FROM queries WHERE norm = ? AND backend = ?",
                (normalize_query(query), backend),
            ).fetchone()
            if row is None:
                return None
            stored_query, backend_, searched_at, translation, total, namespace, ids_json = row
            ids = json.loads(ids_json)
            articles = _select_articles(conn, namespace or PUBMED, ids)
            if len(articles) != len(ids):
                logger.warning("evidence store %s: query %r lists ids with no article row", self.path, query)
            return SearchResult(
                query=stored_query,
                backend=backend_,
                articles=articles,
                translation=translation,
                searched_at=searched_at,
                total=total,
            )

        return self._read(body)

    def articles(self, ids: Iterable[str], namespace: str = PUBMED) -> list[Article]:
        """Stored articles for `ids`, in that order; unknown ids are skipped."""
        wanted = [str(i) for i in ids]
        return self._read(lambda conn: _select_articles(conn, namespace, wanted))

    def iter_articles(self, namespace: str | None = None, batch: int = 1000) -> Iterator[Article]:
        """Every stored article (optionally one namespace), in insertion order, batch by batch."""
        last = 0
        while True:
            sql = f"SELECT id, {_ARTICLE_COLUMNS} FROM articles WHERE id > ?"
            args: list[Any] = [last]
            if namespace is not None:
                sql += " AND namespace = ?"
                args.append(namespace)
            sql += " ORDER BY id LIMIT ?"
            args.append(batch)
            rows = self._read(lambda conn, s=sql, a=tuple(args): conn.execute(s, a).fetchall())
            if not rows:
                return
            for row in rows:
                yield _article(row[1:])
            last = rows[-1][0]

    def queries(self, backend: str, limit: int | None = None) -> list[str]:
        """The queries stored from `backend`, oldest first (the first `limit` of them)."""
        sql, args = "SELECT query FROM queries WHERE backend = ? ORDER BY id", (backend,)
        if limit is not None:
            sql, args = sql + " LIMIT ?", (*args, limit)
        return [q for (q,) in self._read(lambda conn: conn.execute(sql, args).fetchall())]

    def stats(self) -> dict[str, Any]:
        def body(conn: sqlite3.Connection) -> dict[str, Any]:
            by_backend = dict(conn.execute("SELECT backend, COUNT(*) FROM queries GROUP BY backend").fetchall())
            by_namespace = dict(conn.execute("SELECT namespace, COUNT(*) FROM articles GROUP BY namespace").fetchall())
            empty = conn.execute("SELECT COUNT(*) FROM queries WHERE result_ids = '[]'").fetchone()[0]
            no_abstract = conn.execute("SELECT COUNT(*) FROM articles WHERE abstract = ''").fetchone()[0]
            return {
                "path": str(self.path),
                "queries": sum(by_backend.values()),
                "queries_by_backend": by_backend,
                "empty_queries": empty,
                "articles": sum(by_namespace.values()),
                "articles_by_namespace": by_namespace,
                "articles_without_abstract": no_abstract,
            }

        out = self._read(body)
        out["size_bytes"] = sum(
            p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists()
        )
        return out


# ---------------------------------------------------------------------- SQL helpers
# Module-level (not methods) so a test can inject a failure between the two writes of put().

_ARTICLE_COLUMNS = "pmid, title, abstract, year, journal, mesh, source"


def _write_query(conn: sqlite3.Connection, row: dict[str, Any], replace: bool) -> bool:
    columns = ", ".join(row)
    marks = ", ".join(f":{k}" for k in row)
    if replace:
        updates = ", ".join(f"{k} = excluded.{k}" for k in row if k not in ("norm", "backend"))
        conflict = f"DO UPDATE SET {updates}"
    else:
        conflict = "DO NOTHING"
    cur = conn.execute(
        f"INSERT INTO queries ({columns}) VALUES ({marks}) ON CONFLICT (norm, backend) {conflict}", row
    )
    return cur.rowcount > 0


def _upsert_articles(conn: sqlite3.Connection, articles: Iterable[Article], seen: str) -> int:
    """Insert new articles, refresh known ones (first_seen is kept); returns rows touched."""
    rows = [
        (
            namespace_of(a.source), a.pmid, a.title, a.abstract, a.year, a.journal,
            json.dumps(a.mesh, ensure_ascii=False), a.source, seen,
        )
        for a in articles
    ]
    conn.executemany(
        "INSERT INTO articles (namespace, pmid, title, abstract, year, journal, mesh, source, first_seen)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (namespace, pmid) DO UPDATE SET"
        " title = excluded.title, abstract = excluded.abstract, year = excluded.year,"
        " journal = excluded.journal, mesh = excluded.mesh, source = excluded.source",
        rows,
    )
    return len(rows)


def _article(row: tuple[Any, ...]) -> Article:
    pmid, title, abstract, year, journal, mesh, source = row
    return Article(
        pmid=pmid, title=title, abstract=abstract, year=year, journal=journal, mesh=json.loads(mesh), source=source
    )


def _select_articles(conn: sqlite3.Connection, namespace: str, ids: list[str]) -> list[Article]:
    found: dict[str, Article] = {}
    for start in range(0, len(ids), 500):  # stay under SQLite's bound-parameter limit
        chunk = ids[start : start + 500]
        marks = ", ".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT {_ARTICLE_COLUMNS} FROM articles WHERE namespace = ? AND pmid IN ({marks})",
            (namespace, *chunk),
        ).fetchall()
        for row in rows:
            found[row[0]] = _article(row)
    return [found[i] for i in ids if i in found]
