"""HTTP to E-utilities: rate limiting, retries with backoff (tenacity), and secret redaction.

Every attempt (first try or retry) takes a slot from the shared rate limiter, because NCBI
counts every request (each redirect hop too). The slot counts as "on its way" from its grant
until the request body is on the wire (httpcore's `trace` hook reports it; without the hook, e.g.
a mock transport, until the answer is in): a caller descheduled between grant and send cannot
make requests bunch up at the server. Retryable: HTTP 429/5xx, timeouts, connection errors and responses
whose XML does not parse (`XMLParseError`, e.g. cut short); the wait doubles per attempt
with jitter and is at least the server's `Retry-After`. Anything else fails at once.

Parameters travel in a POST body (E-utilities accept POST everywhere), never in the URL:
httpx logs every request URL at INFO level, and the API key must not reach any log. The key is
bound to its host: a redirect to another host, or to plain http on a host that is not loopback,
is refused in one line instead of carrying `api_key=…` there.

A reply is read as a stream: its decoded size is capped while it is decompressed (a gzip bomb
stops at the cap, never inflated in full), and every request has an overall deadline (all
attempts, waits and reads together) beside the per-read timeout, so a server that trickles
bytes cannot hold a search past it.

The backoff's `sleep`, its jitter source (`rng`) and the clock that reads a Retry-After date
(`now`) are constructor arguments, so tests check the waits a run asks for without waiting.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import logging
import random
import re
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar
from urllib.parse import urljoin

import httpx
import tenacity

from biocheck.evidence.article_xml import MissingDTDError, XMLParseError
from biocheck.evidence.ratelimit import RateLimiter, Slot
from biocheck.evidence.types import BackendError, SearchError

logger = logging.getLogger(__name__)

T = TypeVar("T")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
MAX_REPLY_BYTES = 64 * 1024 * 1024  # decoded; an efetch of 200 records is a few MB
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
_LOOPBACK = re.compile(r"^(localhost|127(\.\d{1,3}){3}|::1)$")
# A whole command's deadline (e.g. `search --batch --deadline`): (time.monotonic() instant, what set it). Every
# request made within `command_deadline` ends by then, besides its own deadline (search.deadline_s).
_COMMAND_DEADLINE: contextvars.ContextVar[tuple[float, str] | None] = contextvars.ContextVar(
    "command_deadline", default=None)


@contextlib.contextmanager
def command_deadline(seconds: float, what: str) -> Iterator[float]:
    """Requests made inside end within `seconds` from now, all of them together; `what` says in an error what set
    the deadline (e.g. "--deadline 30 s"). Yields the instant (time.monotonic()) for the caller's own checks."""
    until = time.monotonic() + seconds
    token = _COMMAND_DEADLINE.set((until, what))
    try:
        yield until
    finally:
        _COMMAND_DEADLINE.reset(token)


class CommandDeadline(BackendError):
    """The command's overall deadline (`command_deadline`) passed during a request."""


_KEY_PARAM = re.compile(r"(api[_-]key[\"'=:\s]+)[^&\s\"',}]+", re.IGNORECASE)


class ReplyError(Exception):
    """E-utilities answered 200 but reported an error in the body (an <ERROR> element)."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class _Deadline(Exception):
    """The request's overall deadline passed (raised inside an attempt; never retried)."""


class _Retry(Exception):
    def __init__(self, reason: str, retry_after: float | None = None, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.status = status


def _failure(state: tenacity.RetryCallState) -> _Retry:
    """The `_Retry` the attempt just made raised (the only exception tenacity retries here)."""
    exc = state.outcome.exception() if state.outcome else None
    assert isinstance(exc, _Retry)
    return exc


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    backoff_base: float = 0.5  # first retry waits 0.25-0.5 s, then doubles
    backoff_max: float = 16.0
    max_retry_after: float = 120.0  # a longer Retry-After fails now instead of blocking a rollout
    deadline: float = 60.0  # seconds for a whole request: every attempt, wait and read together

    def delay(self, attempt: int, retry_after: float | None, rng: random.Random | None = None) -> float:
        """Wait before attempt `attempt + 1`: exponential with jitter, at least Retry-After."""
        backoff = min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1))
        backoff *= (rng or random).uniform(0.5, 1.0)  # jitter: callers that failed together retry apart
        return max(backoff, retry_after or 0.0)


def redact(text: str, secret: str | None) -> str:
    """Remove an API key from any text headed for a log, an exception or a record."""
    if secret:
        text = text.replace(secret, "***")
    return _KEY_PARAM.sub(r"\1***", text)


def _loopback(host: str | None) -> bool:
    return bool(host) and bool(_LOOPBACK.match(host.lower().strip("[]")))


def credential_may_follow(origin: httpx.URL, target: httpx.URL) -> bool:
    """May a request that carries a credential for `origin` be re-sent to `target` (a redirect)?
    Only to the same host, and only over https unless that host is loopback (tests, a local mirror)."""
    if (target.host or "").lower() != (origin.host or "").lower():
        return False
    return target.scheme == "https" or _loopback(target.host)


def _on_sent(slot: Slot) -> Callable[[str, dict[str, object]], None]:
    """An httpcore `trace` hook that stamps the slot once the request body has been written."""

    def hook(event: str, info: dict[str, object]) -> None:
        if event.endswith(".send_request_body.complete"):  # "http11." or "http2."
            slot.sent()

    return hook


def utc_now() -> datetime:
    return datetime.now(UTC)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date, counted from `now`, default the
    current UTC time); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or utc_now())).total_seconds())


class EutilsTransport:
    """Send one E-utilities request with NCBI's identity parameters; retry what is transient."""

    def __init__(
        self,
        base_url: str,
        identity: dict[str, str],
        limiter: RateLimiter,
        timeout: float,
        policy: RetryPolicy,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.base_url = base_url if base_url.endswith("/") else base_url + "/"
        self._identity = {k: v for k, v in identity.items() if v}
        self._secret = identity.get("api_key") or None
        self.limiter = limiter
        self.timeout = timeout
        self.policy = policy
        # Redirects are followed by `_post`, hop by hop (a slot each, the credential checked each time).
        self._http = http or httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=True,
                                          headers={"Accept-Encoding": ", ".join(_DECODERS)})
        self.max_reply_bytes = MAX_REPLY_BYTES
        self._sleep = sleep
        self._rng = rng  # None: the random module's shared generator
        self._now = now

    def close(self) -> None:
        self._http.close()

    def redact(self, text: str) -> str:
        return redact(text, self._secret)

    def call(self, endpoint: str, params: dict[str, str], parse: Callable[[bytes], T],
             deadline: float | None = None) -> T:
        """Request `endpoint` (e.g. "esearch.fcgi") and return `parse(body)`; raise SearchError.

        `deadline`: a `time.monotonic()` instant shared by several calls (one search's esearch and
        efetch); default the policy's deadline from now."""
        url = urljoin(self.base_url, endpoint)
        what = endpoint.removesuffix(".fcgi")
        fields = {**params, **self._identity}
        attempts = self.policy.max_attempts
        if deadline is None:
            deadline = time.monotonic() + self.policy.deadline
        command = _COMMAND_DEADLINE.get()
        cut = command is not None and command[0] < deadline  # the command's deadline comes first
        if cut:
            deadline = command[0]
        try:
            if attempts < 1:  # tenacity always makes a first attempt; a policy without attempts sends nothing
                raise _Retry("no attempt made")
            return self._retrying(what, deadline)(self._attempt, url, what, fields, parse, deadline)
        except _Deadline:
            if cut:
                raise CommandDeadline(f"PubMed {what} cut short: the command's deadline ({command[1]}) passed before "
                                      f"{self.redact(url)} answered") from None
            raise BackendError(
                f"PubMed {what} got no complete answer within {self.policy.deadline:g} s (search.deadline_s) "
                f"from {self.redact(url)}; NCBI may be slow or down: retry later, or raise search.deadline_s"
            ) from None
        except _Retry as retry:
            # Not a text for the model: "no evidence" because NCBI was down would be a wrong report (exit 0, NEI).
            raise BackendError(
                f"PubMed {what} failed after {attempts} attempts (last error: {self.redact(retry.reason)}) "
                f"at {self.redact(url)}; NCBI may be down or throttling this client: retry later, "
                "set NCBI_API_KEY for a higher rate limit, or use the replay backend offline"
            ) from None

    def _retrying(self, what: str, deadline: float) -> tenacity.Retrying:
        """Retry `_Retry` up to the policy's attempts; the last one's `_Retry` is re-raised to `call`."""
        policy, attempts = self.policy, self.policy.max_attempts

        def wait(state: tenacity.RetryCallState) -> float:
            if state.attempt_number >= attempts:  # tenacity asks for a wait before it stops: draw no jitter
                return 0.0
            return policy.delay(state.attempt_number, _failure(state).retry_after, self._rng)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            retry, delay = _failure(state), state.upcoming_sleep
            if retry.retry_after is not None and retry.retry_after > policy.max_retry_after:
                raise BackendError(
                    f"PubMed {what} asked us to wait {retry.retry_after:.0f} s (Retry-After), more than "
                    f"the {policy.max_retry_after:.0f} s allowed; NCBI is throttling this client, "
                    "try again later or set NCBI_API_KEY"
                ) from None
            if time.monotonic() + delay >= deadline:  # the wait alone would pass the deadline
                raise _Deadline()
            if retry.status == 429:
                self.limiter.defer(delay)  # every caller holds off, not just this one
            logger.warning(
                "PubMed %s: %s; retrying in %.2f s (attempt %d/%d)",
                what, self.redact(retry.reason), delay, state.attempt_number + 1, attempts,
            )

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(attempts),
            wait=wait,
            retry=tenacity.retry_if_exception_type(_Retry),
            before_sleep=before_sleep,
            sleep=self._sleep,
            reraise=True,
        )

    def _post(self, url: str, what: str, fields: dict[str, str], deadline: float) -> httpx.Response:
        """POST under the rate limit; the answer comes back unread (streamed). Redirects (if the client
        follows them) are followed here, not by httpx: each hop is a request the server counts, so each
        takes a slot of its own, and a hop that would carry the API key off its host is refused."""
        request = self._http.build_request("POST", url, data=fields)
        for _ in range(self._http.max_redirects + 1):
            with self.limiter.reserve() as slot:  # on its way until written (trace hook) or answered
                request.extensions["trace"] = _on_sent(slot)
                request.extensions["timeout"] = self._timeout(deadline)
                response = self._http.send(request, follow_redirects=False, stream=True)
            if not (self._http.follow_redirects and response.next_request is not None):
                return response
            response.close()
            target = response.next_request
            if self._secret and not credential_may_follow(request.url, target.url):
                raise BackendError(
                    f"PubMed {what}: {self.redact(str(request.url))} redirects to {self.redact(str(target.url))}; "
                    "refused: NCBI_API_KEY is sent only to the E-utilities host over https (set "
                    "BIOCHECK_EUTILS_URL to the final address if the move is genuine)"
                )
            request = target
        raise BackendError(
            f"PubMed {what}: more than {self._http.max_redirects} redirects from {self.redact(url)}; "
            "check BIOCHECK_EUTILS_URL (it must name the E-utilities base URL)"
        )

    def _timeout(self, deadline: float) -> dict[str, float]:
        """httpx's per-request timeouts: the per-read timeout, never past the overall deadline."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise _Deadline()
        wait = min(self.timeout, left)
        return {"connect": wait, "read": wait, "write": wait, "pool": wait}

    def _read(self, response: httpx.Response, what: str, deadline: float) -> bytes:
        """The decoded body, at most `max_reply_bytes` of it, decompressed as it arrives (never a whole
        bomb), read by the overall deadline (a trickle of bytes does not reset it)."""
        if hasattr(response, "_content"):  # already in memory (an in-process stub such as httpx.MockTransport)
            return response.content
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity") and encoding not in _DECODERS:
            raise BackendError(f"PubMed {what} answered with Content-Encoding {encoding!r}, which BioCheck "
                               f"does not ask for; check BIOCHECK_EUTILS_URL")
        inflate = zlib.decompressobj(_DECODERS[encoding]) if encoding in _DECODERS else None
        cap, parts, size = self.max_reply_bytes, [], 0
        for chunk in response.iter_raw():
            if time.monotonic() > deadline:
                raise _Deadline()
            while chunk:
                if inflate is None:
                    data, chunk = chunk, b""
                else:
                    try:
                        data = inflate.decompress(chunk, cap - size + 1)
                    except zlib.error as exc:
                        raise _Retry(f"reply cannot be decompressed ({exc})") from None
                    chunk = inflate.unconsumed_tail
                size += len(data)
                if size > cap:
                    raise BackendError(
                        f"PubMed {what} sent a reply over {cap // 2**20} MiB (decoded); refused before "
                        "reading the rest: check BIOCHECK_EUTILS_URL"
                    )
                parts.append(data)
        return b"".join(parts)

    def _attempt(self, url: str, what: str, fields: dict[str, str], parse: Callable[[bytes], T],
                 deadline: float) -> T:
        try:
            response = self._post(url, what, fields, deadline)
            try:
                if response.status_code == 200:
                    content = self._read(response, what, deadline)
                elif response.status_code not in RETRYABLE_STATUS:
                    content = self._read(response, what, deadline)[:4096]
            finally:
                response.close()
        except httpx.TimeoutException:
            if time.monotonic() >= deadline:
                raise _Deadline() from None
            raise _Retry(f"no response within {self.timeout:g} s") from None
        except httpx.TransportError as exc:
            raise _Retry(f"connection error ({type(exc).__name__}: {self.redact(str(exc))})") from None
        status = response.status_code
        if status in RETRYABLE_STATUS:
            retry_after = parse_retry_after(response.headers.get("Retry-After"), self._now())
            raise _Retry(f"HTTP {status}", retry_after, status)
        if status != 200:
            body = self.redact(content.decode("utf-8", "replace"))[:200].strip()  # redact first: a cut must not split the key
            raise SearchError(
                f"PubMed {what} refused the request with HTTP {status} ({body!r}); check the query "
                "and the NCBI_API_KEY / BIOCHECK_EUTILS_URL settings"
            )
        try:
            return parse(content)
        except XMLParseError as exc:
            raise _Retry(self.redact(str(exc))) from None
        except MissingDTDError as exc:
            raise SearchError(f"PubMed {what} reply cannot be parsed: {exc}") from None
        except ReplyError as exc:
            if exc.retryable:
                raise _Retry(f"server error {self.redact(str(exc))!r}") from None
            raise SearchError(f"PubMed {what} rejected the request: {self.redact(str(exc))}") from None
