"""`biocheck evidence refresh`: re-run the PubMed queries recorded in the evidence store, live.

Replay (and a repeated `entrez` search) answers a query from the store, so without a refresh the
agent never sees a paper published after the query was first asked. A refresh sends every recorded
`entrez` query to E-utilities again (never answered from the store), stores the new answer in place
of the old one (`EvidenceStore.put(..., replace=True)`, articles upserted, one transaction per query)
and reports, per query, which ids came and went.

Only rows recorded under the `entrez` backend are refreshed: they are PubMed's answers. Nothing else
writes query rows in normal use (local and replay searches record nothing); a row from another
backend is left alone, since PubMed could not answer it the same way.

Requests go through the same client and rate limiter as every `entrez` search: NCBI's limit holds
for all processes of the user on one machine (the limiter shares a flock'd file), so parallel Dask
workers on one host stay within it together. Workers on several hosts each have their own limiter:
run a refresh on one worker host, or give each host its own NCBI_API_KEY.

A query that fails (after the client's retries) is recorded with its error and keeps its old answer;
the others go on. When the first `give_up_after` queries all fail, NCBI is taken to be unreachable
and the rest are not tried; when no query at all could be refreshed, `write_report` raises
`RefreshError` and writes nothing (the store is unchanged as well).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, computed_field

from biocheck.bounds import Count
from biocheck.evidence.search import SearchConfig
from biocheck.evidence.types import MAX_RESULTS, SearchError
from biocheck.io import InputError, write_json_atomic

log = logging.getLogger(__name__)

BACKEND = "entrez"  # the store's name for PubMed's answers (what CachedSearch records them under)
NOT_TRIED = "not tried"  # the error of a query skipped once NCBI looked unreachable


class NothingToRefresh(InputError):
    """The evidence store holds no PubMed query (or does not exist): a refresh has nothing to re-run."""


class RefreshError(SearchError):
    """No recorded query could be refreshed (NCBI unreachable, every request refused)."""


@dataclass
class RefreshConfig:
    """Where the store is and how to reach PubMed come from `search:` (the entrez settings, with
    `evidence.store`): one set of settings for searching and refreshing."""

    search: SearchConfig = field(default_factory=lambda: SearchConfig(backend=BACKEND))
    report_path: Path = Path("reports/evidence_refresh.json")  # per query: what changed
    metrics_path: Path | None = Path("metrics/evidence_refresh.json")  # the counts
    limit: Count | None = None  # refresh only the first N recorded queries (a smoke run)
    give_up_after: Count = 3  # this many failures before any success: NCBI is unreachable, stop
    progress: bool = True

    def __post_init__(self) -> None:
        self.report_path = Path(self.report_path)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None
        if self.search.backend != BACKEND:
            raise ValueError(f"a refresh re-runs PubMed queries: its search backend must be {BACKEND!r}, "
                             f"not {self.search.backend!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ValueError(f"--limit {self.limit!r}: must be a number of queries, 1 or more")
        if self.give_up_after < 1:
            raise ValueError(f"give_up_after: {self.give_up_after} must be >= 1")


class QueryChange(BaseModel):
    """One recorded query before and after its refresh (new_ids is None when it failed)."""

    query: str
    n: int  # papers asked for
    old_ids: list[str]
    new_ids: list[str] | None = None
    added: list[str] = []  # in new_ids, not in old_ids (new order)
    removed: list[str] = []  # in old_ids, not in new_ids (old order)
    total_before: int | None = None  # PubMed's hit count (esearch Count)
    total_after: int | None = None
    error: str | None = None

    @computed_field
    @property
    def changed(self) -> bool:
        """The store now answers this query differently (other papers, or another order)."""
        return self.error is None and self.new_ids != self.old_ids


def _store(cfg: RefreshConfig):
    """The evidence store, which must exist already (looking must not create an empty one)."""
    from biocheck.evidence.store import EvidenceStore, resolve_path

    path = resolve_path(cfg.search.store)
    if not path.is_file():
        raise NothingToRefresh(f"nothing to refresh: there is no evidence store at {path}; run searches with "
                         "search.backend: entrez first (or set evidence.store)")
    return EvidenceStore(path)  # a damaged file: StoreError, one line with the fix


def recorded_queries(cfg: RefreshConfig) -> list[str]:
    """The PubMed (entrez) queries recorded in the store, oldest first; the first `cfg.limit` of them."""
    with _store(cfg) as store:
        queries = store.queries(BACKEND, cfg.limit)
        if not queries:
            raise NothingToRefresh(f"nothing to refresh: the evidence store {store.path} has no PubMed queries; run "
                             "searches with search.backend: entrez first")
    return queries


def refresh_queries(cfg: RefreshConfig, queries: list[str]) -> list[QueryChange]:
    """Re-run `queries` through live E-utilities, store each new answer, return what changed (in order).

    A query's failure is recorded in its QueryChange and never stops the others; a damaged store does.
    """
    from tqdm.auto import tqdm

    from biocheck.evidence.search import open_backend
    from biocheck.evidence.store import StoreError

    _store(cfg).close()  # open_backend would create a missing store: refuse first
    cached = open_backend(cfg.search)  # CachedSearch(EntrezClient, store): the entrez backend as configured
    client, store = cached.backend, cached.store
    changes: list[QueryChange] = []
    succeeded = changed = 0
    bar = tqdm(queries, desc="refresh", unit="query", disable=not cfg.progress, dynamic_ncols=True)
    try:
        for i, query in enumerate(bar):
            if not succeeded and i >= cfg.give_up_after:  # nothing has worked yet: do not wait out every query
                why = f"{NOT_TRIED}: the first {i} queries all failed (last: {changes[-1].error})"
                changes += [_as_recorded(q, store, cfg, why) for q in queries[i:]]
                break
            change = _as_recorded(query, store, cfg)
            try:
                result = client.search(query, change.n)  # the live answer, never the stored one
                store.put(result.model_copy(update={"backend": BACKEND}), replace=True)
            except StoreError:
                raise
            except SearchError as e:
                change.error = str(e)
                log.warning("evidence refresh: %r failed: %s", query, e)
            else:
                new_ids = [a.pmid for a in result.articles]
                old, new = set(change.old_ids), set(new_ids)
                change = change.model_copy(update={
                    "new_ids": new_ids, "total_after": result.total,
                    "added": [p for p in new_ids if p not in old],
                    "removed": [p for p in change.old_ids if p not in new]})
                succeeded, changed = succeeded + 1, changed + change.changed
            changes.append(change)
            bar.set_postfix(changed=changed, failed=len(changes) - succeeded)
    finally:
        bar.close()
        client.close()
        store.close()
    return changes


def _as_recorded(query: str, store, cfg: RefreshConfig, error: str | None = None) -> QueryChange:
    """The query as recorded; `n` asks for at least as many papers as before (a stored answer serves any
    n up to its length) and at least search.max_results (an answer that held every hit may grow)."""
    old = store.get(query, BACKEND)
    old_ids = [a.pmid for a in old.articles] if old is not None else []
    n = min(MAX_RESULTS, max(len(old_ids), cfg.search.max_results))
    return QueryChange(query=query, n=n, old_ids=old_ids, total_before=old.total if old else None, error=error)


def summarize(changes: list[QueryChange]) -> dict[str, int]:
    """The counts of a refresh (its metrics)."""
    failed = [c for c in changes if c.error is not None]
    return {
        "queries": len(changes),
        "refreshed": len(changes) - len(failed),
        "changed": sum(c.changed for c in changes),
        "added": sum(len(c.added) for c in changes),  # (query, paper) pairs new to an answer
        "removed": sum(len(c.removed) for c in changes),
        "new_papers": len({p for c in changes for p in c.added}),  # distinct papers new to some answer
        "errors": len(failed),
    }


def write_report(cfg: RefreshConfig, changes: list[QueryChange]) -> dict[str, Any]:
    """Write the change report and the metrics (each atomically); return the report.

    RefreshError, and nothing written, when no query could be refreshed.
    """
    counts = summarize(changes)
    if changes and counts["refreshed"] == 0:
        tried = sum(not c.error.startswith(NOT_TRIED) for c in changes)
        raise RefreshError(f"evidence refresh: none of the {len(changes)} recorded PubMed queries could be "
                           f"refreshed ({tried} tried, all failed); the evidence store {cfg.search.store} is "
                           f"unchanged and no report was written. First error: {changes[0].error}")
    report = {
        "store": str(cfg.search.store),
        "report_path": str(cfg.report_path),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "summary": counts,
        "queries": [c.model_dump() for c in changes],
    }
    write_json_atomic(cfg.report_path, report)
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, counts)
    log.info("evidence refresh: %d queries, %d changed (+%d / -%d papers), %d failed; report %s",
             counts["queries"], counts["changed"], counts["added"], counts["removed"], counts["errors"],
             cfg.report_path)
    return report


def refresh(cfg: RefreshConfig, queries: list[str] | None = None) -> dict[str, Any]:
    """Refresh `queries` (default: every recorded PubMed query, up to cfg.limit); write and return the report."""
    return write_report(cfg, refresh_queries(cfg, recorded_queries(cfg) if queries is None else queries))

