"""Offline PubMed-style search over an abstract corpus (tantivy index, BM25 ranking).

Usage::

    index = LocalIndex.build(articles_from_corpus("data/prepared/corpus.jsonl"), path)
    index = LocalIndex.open(path)                    # later, fast: memory-mapped files
    index.search('(aspirin OR ibuprofen) AND "heart attack"[tiab]', n=5)
    index.search("aspirin reduces the risk of heart attack", mode="bm25")

Why tantivy, the query language and the BM25 variant: docs/search.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import tantivy
from tqdm import tqdm

from biocheck.evidence import local_schema as S
from biocheck.evidence.corpus import articles_from_corpus
from biocheck.evidence.local_analysis import register
from biocheck.evidence.local_compile import Compiled, QueryCompiler
from biocheck.evidence.local_files import DamagedFile, check_files, looks_like_index, name_segments, staging_dir
from biocheck.evidence.query import MAX_QUERY_CHARS, parse, to_string
from biocheck.evidence.types import MAX_RESULTS, Article, BackendError, SearchError, SearchResult
from biocheck.io import InputError, write_json_atomic

__all__ = ["IndexMissing", "IndexUnavailable", "LocalIndex", "NotAnIndex", "articles_from_corpus",
           "index_fingerprint"]

log = logging.getLogger(__name__)

META_FILE = "biocheck_index.json"
FORMAT_VERSION = 2  # bump when the schema or analyzers change: old indexes must be rebuilt
MAX_N = MAX_RESULTS  # as many as PubMed's esearch returns
REBUILD = "rebuild it with `biocheck evidence build` (or `dvc repro -f -s evidence`)"
BM25 = {
    "variant": "tantivy (Lucene-style) BM25, idf = ln(1 + (N - df + 0.5) / (df + 0.5))",
    "k1": 1.2,
    "b": 0.75,
}
_TIE_FETCH_LIMIT = 5000  # enough candidates to order score ties by pmid
# Timings of this process (stats(), the log, MLflow), never written to META_FILE: the index is a DVC output, and
# the same articles must give the same bytes on any machine.
_RUN_ONLY = ("build_seconds", "open_seconds")


class IndexUnavailable(SearchError, ValueError):
    """The index at a path cannot be used (damaged, another format); the message says how to fix it.

    Also a ValueError, as `open` raised before it had its own class.
    """


class IndexMissing(IndexUnavailable, FileNotFoundError):
    """No index at the path at all."""


class NotAnIndex(InputError, FileExistsError):
    """`build` refuses to replace a directory that holds something other than an index."""


class LocalIndex:
    """A searchable set of Articles, in memory or in a directory (a DVC output).

    Searches may run from several threads; ``add`` swaps in a new searcher when it is done.
    """

    name = "local"  # backend name, as in SearchResult.backend

    def __init__(self, index: tantivy.Index, path: Path | None, meta: dict[str, Any]) -> None:
        self._index = index
        self._path = path
        self._meta = meta
        self._refresh()

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        articles: Iterable[Article],
        path: Path | None = None,
        progress: bool = False,
        threads: int = 1,
        heap_mb: int = 256,
    ) -> LocalIndex:
        """Index ``articles`` into a new index; ``path=None`` keeps it in memory.

        On disk the index is written to a temporary sibling directory and renamed into place at
        the end, so ``path`` never holds a half-built index. An existing index at ``path`` is
        replaced; any other non-empty directory is refused, so a wrong path cannot wipe files.
        A pmid seen twice keeps its last version.
        """
        started = time.perf_counter()
        digest = hashlib.sha256()
        articles = _digesting(articles, digest)
        if path is None:
            index = tantivy.Index(S.build_schema())
            register(index)
            count = _write(index, articles, upsert=False, progress=progress, threads=threads, heap_mb=heap_mb)
            return cls(index, None, {**_build_meta(count, digest),
                                     "build_seconds": round(time.perf_counter() - started, 3)})
        path = Path(path)
        _check_replaceable(path)
        # The staging folder is removed on failure; one left by a killed build is removed here.
        with staging_dir(path) as staging:
            index = tantivy.Index(S.build_schema(), path=str(staging), reuse=False)
            register(index)
            count = _write(index, articles, upsert=False, progress=progress, threads=threads, heap_mb=heap_mb)
            del index  # release the files before the directory moves
            meta = _build_meta(count, digest)
            segments = name_segments(staging, meta["content_digest"])
            if segments > 1:  # the same articles, other bytes next time (local_files.name_segments)
                log.warning("the index has %d segments (%d writer threads): the same articles give other bytes in "
                            "another build, so DVC sees a new index and reruns what follows; one thread (evidence."
                            "threads: 1) writes one segment for a corpus the size of SciFact's", segments, threads)
            write_json_atomic(staging / META_FILE, meta)
            if path.exists():
                shutil.rmtree(path)
            staging.rename(path)
        seconds = round(time.perf_counter() - started, 3)
        log.info("Indexed %d articles in %.1fs into %s", count, seconds, path)
        built = cls.open(path)
        built._meta["build_seconds"] = seconds
        return built

    @classmethod
    def open(cls, path: Path, verify: bool = True) -> LocalIndex:
        """Open an index written by ``build``.

        Raises IndexMissing or IndexUnavailable (a missing or damaged file, another format or
        tantivy version), whose message names the path, the file and how to rebuild. Every file
        ``meta.json`` implies must be there; ``verify`` also checks every segment file's checksum
        (one read of the index), so damage is found here and not as a crash in the middle of a
        search.
        """
        path = Path(path)
        meta_file = path / META_FILE
        if not meta_file.is_file():
            raise IndexMissing(f"No local search index at {path} (missing {META_FILE}); build it with "
                               "`biocheck evidence build` (or `dvc repro evidence`)")
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            stored_format = meta.get("format")
        except (OSError, ValueError, AttributeError) as exc:
            raise IndexUnavailable(f"Local index at {path} is damaged ({META_FILE}: {_brief(exc)}); {REBUILD}") from None
        if stored_format != FORMAT_VERSION:
            raise IndexUnavailable(
                f"Local index at {path} has format {stored_format}, this code reads {FORMAT_VERSION}; {REBUILD}"
            )
        started = time.perf_counter()
        try:
            check_files(path, checksums=verify)  # a missing file always; the checksums when asked
            index = tantivy.Index.open(str(path))
        except (DamagedFile, OSError) as exc:
            raise IndexUnavailable(f"Local index at {path} is damaged ({_brief(exc)}); {REBUILD}") from None
        except ValueError as exc:
            built_with = meta.get("tantivy_version")
            raise IndexUnavailable(
                f"Cannot open local index at {path} (built with tantivy {built_with}, running "
                f"{version('tantivy')}): {_brief(exc)}; {REBUILD}"
            ) from None
        register(index)
        try:
            opened = cls(index, path, meta)
        except (ValueError, OSError) as exc:
            raise IndexUnavailable(f"Local index at {path} is damaged ({_brief(exc)}); {REBUILD}") from None
        opened._meta["open_seconds"] = round(time.perf_counter() - started, 4)
        return opened

    def _stored_meta(self) -> dict[str, Any]:
        return {k: v for k, v in self._meta.items() if k not in _RUN_ONLY}

    def add(self, articles: Iterable[Article], progress: bool = False) -> int:
        """Add or replace (same pmid) articles; searches see them on return. Returns the count."""
        old = self._meta.get("content_digest")
        digest = hashlib.sha256(f"{old}".encode())  # what was there, then what was added (upserts included)
        count = _write(self._index, _digesting(articles, digest), upsert=True, progress=progress, threads=1,
                       heap_mb=64)
        if old:  # an index built without a digest keeps none: index_fingerprint then hashes its files
            self._meta["content_digest"] = digest.hexdigest()
        # no "updated_at": a date would give the same articles other bytes (see _RUN_ONLY)
        self._meta["added_docs"] = self._meta.get("added_docs", 0) + count
        if self._path is not None:
            write_json_atomic(self._path / META_FILE, self._stored_meta())
        self._refresh()
        return count

    # -- reading ------------------------------------------------------------------------------

    def search(self, query: str, n: int = 5, mode: Literal["boolean", "bm25"] = "boolean") -> SearchResult:
        """Top ``n`` articles for ``query``, best first; ties broken by pmid.

        ``boolean``: PubMed syntax selects the matches, BM25 orders them; ``total`` is the
        number of matches. ``bm25``: free text, any query word may match (``total`` is None).
        Raises SearchError for a malformed query or an impossible ``n``.
        """
        if not isinstance(n, int) or not 1 <= n <= MAX_N:
            raise SearchError(f"n must be an integer between 1 and {MAX_N} (got {n!r})")
        view = self._view  # one consistent snapshot even if add() swaps in a new one meanwhile
        translation: str | None = None
        if mode == "boolean":
            node = parse(query)
            translation = to_string(node)
        elif mode == "bm25":
            if not query.strip():
                raise SearchError("Empty query: give at least one search term")
            if len(query) > MAX_QUERY_CHARS:
                raise SearchError(f"Query too long ({len(query)} characters; the limit is {MAX_QUERY_CHARS})")
        else:
            raise ValueError(f"mode must be 'boolean' or 'bm25', not {mode!r}")
        try:
            if mode == "boolean":
                compiled = view.compiler.boolean(node)
            else:
                compiled = view.compiler.free_text(query)
            addresses, total = _top(view.searcher, compiled, n, count=mode == "boolean")
            articles = [S.from_document(view.searcher.doc(address)) for address in addresses]
        except SearchError:
            raise
        except BaseException as exc:  # tantivy reports failures as ValueError/OSError, or panics
            if not isinstance(exc, (ValueError, OSError)) and type(exc).__name__ != "PanicException":
                raise
            log.debug("Local search failed for %r", query, exc_info=True)
            where = f"; the index at {self._path} may be damaged: {REBUILD}" if self._path else ""
            raise BackendError(f"Local search failed ({_brief(exc)}){where}") from None
        return SearchResult(
            query=query,
            backend="local",
            articles=articles,
            translation=translation,
            searched_at=_now(),
            total=total,
        )

    def get(self, pmid: str) -> Article | None:
        searcher = self._view.searcher
        hits = searcher.search(tantivy.Query.term_query(self._index.schema, S.PMID, pmid), 1).hits
        return S.from_document(searcher.doc(hits[0][1])) if hits else None

    def __len__(self) -> int:
        return self._view.searcher.num_docs

    def stats(self) -> dict[str, Any]:
        """Numbers worth logging (MLflow): size, MeSH coverage, BM25 parameters, build time (built by this process)."""
        size = None
        if self._path is not None:
            size = sum(f.stat().st_size for f in self._path.rglob("*") if f.is_file())
        return {
            **self._meta,
            "docs": len(self),
            "docs_with_mesh": self._view.searcher.doc_freq(S.FLAGS, S.HAS_MESH_FLAG),
            "segments": self._view.searcher.num_segments,
            "size_bytes": size,
            "path": str(self._path) if self._path else None,
            "bm25": BM25,
        }

    # -- internals ----------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._index.reload()
        searcher = self._index.searcher()
        has_mesh = searcher.doc_freq(S.FLAGS, S.HAS_MESH_FLAG) > 0
        self._view = _View(searcher, QueryCompiler(self._index.schema, searcher, has_mesh=has_mesh))


@dataclass(frozen=True)
class _View:
    """A searcher and the compiler made for it (wildcards expand on that searcher's words)."""

    searcher: tantivy.Searcher
    compiler: QueryCompiler


def _top(
    searcher: tantivy.Searcher, compiled: Compiled, n: int, count: bool
) -> tuple[list[tantivy.DocAddress], int | None]:
    """The n best hits, ties ordered by pmid, and the match count when asked for."""
    if not compiled.rank_terms:
        # Nothing to score (e.g. only a quoted stopword): every score ties, pmid decides.
        result = searcher.search(
            compiled.query, n, count=count, order_by_field=S.PMID, order=tantivy.Order.Asc
        )
        return [address for _, address in result.hits], result.count if count else None
    limit = n + 16
    while True:
        result = searcher.search(compiled.query, limit, count=count)
        hits = result.hits
        # Done when the fetched list holds every document tied with the n-th score.
        if len(hits) < limit or hits[n - 1][0] > hits[-1][0] or limit >= _TIE_FETCH_LIMIT:
            break
        limit *= 4
    ties = Counter(score for score, _ in hits)

    def key(i: int) -> tuple[float, str]:
        # Only tied hits need their stored pmid read; reading every hit would cost more.
        score, address = hits[i]
        return -score, searcher.doc(address).get_first(S.PMID) if ties[score] > 1 else ""

    order = sorted(range(len(hits)), key=key)[:n]
    return [hits[i][1] for i in order], result.count if count else None


def _check_replaceable(path: Path) -> None:
    """An index, even a damaged one, is replaced; anything else is a wrong path, never wiped."""
    if not path.exists():
        return
    if not path.is_dir() or not ((path / META_FILE).is_file() or looks_like_index(path)):
        raise NotAnIndex(f"{path} exists and is not a local search index; refusing to overwrite it "
                         "(check evidence.index_dir)")


def _brief(exc: BaseException, limit: int = 240) -> str:
    """An exception's text on one line, cut short: tantivy's can span lines and run long."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _build_meta(count: int, digest: Any) -> dict[str, Any]:
    """What META_FILE keeps: what the index holds and how to read it; no time, no path (see _RUN_ONLY)."""
    return {
        "format": FORMAT_VERSION,
        "backend": "tantivy",
        "tantivy_version": version("tantivy"),
        "built_docs": count,
        "content_digest": digest.hexdigest(),  # every article indexed, in order (index_fingerprint)
    }


def _digesting(articles: Iterable[Article], digest: Any) -> Iterator[Article]:
    """`articles` as they are, each one's JSON fed to `digest` on the way."""
    for article in articles:
        digest.update(article.model_dump_json().encode() + b"\n")
        yield article


def index_fingerprint(path: Path | str) -> str | None:
    """A short hash of what the index at `path` holds (a batch's resume key): the content digest recorded when
    it was built or added to, with its format and tantivy version, so an identical rebuild keeps it and any
    other change (a new paper, another corpus) does not; an index built without one hashes its metadata
    files instead. None when there is no readable index metadata at `path`."""
    path = Path(path)
    try:
        meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict):
        return None
    h = hashlib.sha256()
    if meta.get("content_digest"):
        h.update(f"{meta.get('format')}|{meta.get('tantivy_version')}|{meta['content_digest']}".encode())
    else:
        for name in (META_FILE, "meta.json"):  # ours and tantivy's: a new segment or build changes them
            try:
                h.update((path / name).read_bytes())
            except OSError:
                pass
    return h.hexdigest()[:16]


def _write(
    index: tantivy.Index,
    articles: Iterable[Article],
    upsert: bool,
    progress: bool,
    threads: int,
    heap_mb: int,
) -> int:
    writer = index.writer(heap_mb * 1_000_000, threads)
    seen: set[str] = set()
    count = 0
    try:
        for article in tqdm(articles, desc="indexing", unit="doc", disable=not progress):
            if not article.pmid:
                raise ValueError(f"Article without pmid: {article.title[:80]!r}")
            # Deleting by pmid first makes a repeated pmid replace the older document.
            if upsert or article.pmid in seen:
                writer.delete_documents_by_term(S.PMID, article.pmid)
            if not upsert:
                seen.add(article.pmid)
            writer.add_document(S.to_document(article))
            count += 1
        writer.commit()
    except BaseException:
        writer.rollback()
        raise
    finally:
        writer.wait_merging_threads()  # also releases the writer lock
    return count


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
