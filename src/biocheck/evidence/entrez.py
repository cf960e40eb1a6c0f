"""The "entrez" search backend: PubMed through NCBI E-utilities (esearch + one batched efetch).

Configuration (constructor arguments win over the environment):
  BIOCHECK_EUTILS_URL  E-utilities base URL (default NCBI's; tests point it at a local fake)
  NCBI_API_KEY         raises NCBI's limit from 3 to 10 requests/s; never logged or stored
  NCBI_EMAIL           sent as `email`, as NCBI asks of every client
  NCBI_TOOL            sent as `tool` (default "biocheck")

The client is synchronous and thread-safe; asyncio code can use `asearch`/`afetch`, which run
the call in a worker thread. All clients in a process that talk to the same host with the
same key share one rate limiter (`ratelimit.shared_limiter`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Self
from urllib.parse import urlsplit

import httpx

from biocheck.evidence.article_xml import EsearchReply, parse_efetch, parse_esearch
from biocheck.evidence.ratelimit import RateLimiter, shared_limiter
from biocheck.evidence.transport import EutilsTransport, ReplyError, RetryPolicy, redact, utc_now
from biocheck.evidence.types import MAX_RESULTS, Article, SearchError, SearchResult
from biocheck.io import InputError

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://eutils.ncbi.nlm.nih.gov/entrez/eutils/"
MAX_RETMAX = MAX_RESULTS  # PubMed's esearch returns at most this many ids per search
EFETCH_BATCH = 200  # ids per efetch request: NCBI asks for batches of about 200
# <ERROR> texts that NCBI emits when its backend is briefly unwell (worth a retry); any other
# <ERROR> means the request itself is wrong.
_TRANSIENT = re.compile(r"backend|temporar|unavailable|time ?out|timed out|try again|unable to obtain|internal", re.IGNORECASE)


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


class EntrezClient:
    """PubMed search over E-utilities, with NCBI's rate limit, retries and backoff."""

    name = "entrez"

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        email: str | None = None,
        tool: str | None = None,
        timeout: float = 10.0,
        max_attempts: int = 5,
        backoff_base: float = 0.5,
        backoff_max: float = 16.0,
        max_retry_after: float = 120.0,
        deadline: float = 60.0,
        limiter: RateLimiter | None = None,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        """`sleep` (backoff waits), `rng` (their jitter) and `now` (UTC time: `searched_at`, Retry-After
        dates) are there for tests; the rate limiter's clock is the limiter's own."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        key = api_key or _env("NCBI_API_KEY")
        self.base_url, host = _base_url(base_url, key)
        self.has_api_key = key is not None
        identity = {"tool": tool or _env("NCBI_TOOL") or "biocheck", "email": email or _env("NCBI_EMAIL") or ""}
        if key:
            identity["api_key"] = key
        self._transport = EutilsTransport(
            base_url=self.base_url,
            identity=identity,
            limiter=limiter or shared_limiter(host, key),
            timeout=timeout,
            policy=RetryPolicy(max_attempts, backoff_base, backoff_max, max_retry_after, deadline),
            http=http,
            sleep=sleep,
            rng=rng,
            now=now,
        )
        self._now = now

    def __repr__(self) -> str:  # never shows the key
        return f"EntrezClient(base_url={self.base_url!r}, api_key={'***' if self.has_api_key else None})"

    @property
    def limiter(self) -> RateLimiter:
        return self._transport.limiter

    # ------------------------------------------------------------------ public API

    def search(self, query: str, n: int = 5) -> SearchResult:
        """Top-`n` PubMed articles for `query` by relevance, in esearch's order. The esearch and the
        efetch share one deadline (`deadline` seconds from now): a search takes no longer, whatever the server does."""
        if not query or not query.strip():
            raise SearchError("empty PubMed query: give some search terms")
        if not 1 <= n <= MAX_RETMAX:
            raise SearchError(f"n must be between 1 and {MAX_RETMAX:,} (PubMed's most per search), got {n}")
        params = {"db": "pubmed", "term": query, "retmax": str(n), "sort": "relevance", "retmode": "xml"}
        deadline = time.monotonic() + self._transport.policy.deadline
        reply = self._transport.call("esearch.fcgi", params, _esearch_parser(query), deadline)
        searched_at = self._now().isoformat(timespec="seconds")
        self._log_notes(query, reply)
        articles = self._fetch(reply.ids[:n], deadline) if reply.ids else []
        return SearchResult(
            query=query,
            backend=self.name,
            articles=articles,
            translation=reply.translation,
            searched_at=searched_at,
            total=reply.count,
        )

    def fetch(self, pmids: list[str]) -> list[Article]:
        """Articles for `pmids`, in the given order; ids PubMed does not return are dropped."""
        return self._fetch(pmids, time.monotonic() + self._transport.policy.deadline)

    def _fetch(self, pmids: list[str], deadline: float) -> list[Article]:
        ids = list(dict.fromkeys(str(p).strip() for p in pmids if str(p).strip()))
        found: dict[str, Article] = {}
        for start in range(0, len(ids), EFETCH_BATCH):
            batch = ids[start : start + EFETCH_BATCH]
            params = {"db": "pubmed", "retmode": "xml", "id": ",".join(batch)}
            for article in self._transport.call("efetch.fcgi", params, parse_efetch, deadline):
                found[article.pmid] = article
        missing = [p for p in ids if p not in found]
        if missing:
            logger.warning("PubMed efetch returned no record for %d id(s): %s", len(missing), ", ".join(missing[:10]))
        return [found[p] for p in ids if p in found]

    async def asearch(self, query: str, n: int = 5) -> SearchResult:
        return await asyncio.to_thread(self.search, query, n)

    async def afetch(self, pmids: list[str]) -> list[Article]:
        return await asyncio.to_thread(self.fetch, pmids)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _log_notes(query: str, reply: EsearchReply) -> None:
        # PhraseNotFound etc. are answers, not failures: PubMed searched what it could.
        if reply.phrase_not_found:
            logger.info("PubMed esearch %r: phrase not found: %s", query, ", ".join(reply.phrase_not_found))
        for warning in reply.warnings:
            logger.info("PubMed esearch %r: %s", query, warning)


def _base_url(explicit: str | None, key: str | None) -> tuple[str, str]:
    """The E-utilities base URL and its host, or an InputError naming where the bad value came from.

    Checked here, once: a URL that cannot work would otherwise fail on every request, or be
    retried with backoff as if NCBI were down.
    """
    if explicit:
        origin, url = "base_url", explicit
    elif _env("BIOCHECK_EUTILS_URL"):
        origin, url = "BIOCHECK_EUTILS_URL", _env("BIOCHECK_EUTILS_URL")
    else:
        return DEFAULT_BASE_URL, urlsplit(DEFAULT_BASE_URL).netloc
    try:
        parts = urlsplit(url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # e.g. "http://[::1" (unclosed IPv6 bracket), a port out of range
        usable = False
    if not usable:
        raise InputError(
            f"{origin}={redact(url, key)!r} is not an http(s) URL with a host; set it to the E-utilities base "
            f"URL (e.g. {DEFAULT_BASE_URL}) or unset it to use NCBI's"
        )
    return url, parts.netloc


def _esearch_parser(query: str):
    def parse(data: bytes) -> EsearchReply:
        reply = parse_esearch(data)
        if reply.error is not None:
            raise ReplyError(f"{reply.error} (query {query!r})", retryable=bool(_TRANSIENT.search(reply.error)))
        return reply

    return parse
