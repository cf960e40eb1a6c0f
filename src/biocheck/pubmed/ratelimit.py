"""A process-wide request-rate limiter for NCBI E-utilities (optionally machine-wide).

NCBI allows 3 requests/s per IP (10/s with an API key) and counts requests per second, so
bursts are as bad as a high average. The limiter spaces requests evenly, `(1 + slack) / rate`
apart, so no second ever holds more than `rate` of them. A caller checks under a lock
(microseconds) whether the interval since the last granted request has passed; if not it
sleeps outside the lock and checks again. The grant is stamped with the time the caller
actually proceeds, not the time it was scheduled for: a thread that wakes late (a busy CPU)
pushes the next request back instead of letting it follow too closely. The slack absorbs the
remaining jitter between "granted" and "reached the server" (sending, the server's own
scheduling). Safe across threads; `acquire_async` lets asyncio tasks wait without blocking
the event loop.

One limiter exists per (host, identity) in a process (`shared_limiter`): every EntrezClient
talking to the same E-utilities host with the same API key (or none) shares it. NCBI counts
per IP/key, not per process, so by default every process of the user shares the slot clock
through a small file locked with flock, in the user's cache dir ($XDG_CACHE_HOME/biocheck, else
~/.cache/biocheck); BIOCHECK_RATELIMIT_DIR names another directory (e.g. one shared by several
users of a machine). Where no such file can be used (no POSIX file locks, an unwritable cache
dir) the limit falls back to the process, with a warning.

Time comes in through the constructor (`clock`, `wall_clock`, `sleep`, `async_sleep`), so tests
drive the limiter with a virtual clock and check the schedule it grants (`on_grant` sees each
grant's time stamp, taken under the lock) instead of timing real requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_SLACK = 0.08  # 8% spacing margin: ~93% of the nominal rate, ~80 ms jitter tolerance
_STALE_AFTER = 300.0  # a shared next-allowed time this far ahead is a clock jump


class RateLimiter:
    """Requests at most every `(1 + slack) / rate` seconds; thread-safe; no bursts.

    With `state_file`, the last grant time lives in that file (`wall_clock` time: shared by every
    process, unlike `clock`) so that every process using the same file shares one limit (POSIX only).
    `on_grant(t)` is called under the lock (the file's flock included) with each grant's time.
    """

    def __init__(
        self,
        rate: float,
        slack: float = DEFAULT_SLACK,
        clock: Callable[[], float] = time.monotonic,
        state_file: str | os.PathLike[str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        async_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        wall_clock: Callable[[], float] = time.time,
        on_grant: Callable[[float], None] | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate!r}")
        self.rate = rate
        self.interval = (1.0 + slack) / rate
        self._clock = clock
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._wall_clock = wall_clock
        self.on_grant = on_grant
        self._lock = threading.Lock()
        self._next = float("-inf")  # earliest time the next request may go
        self.state_file = Path(state_file) if state_file is not None else None
        if self.state_file is not None:
            try:
                import fcntl  # noqa: F401 - POSIX only
            except ImportError:
                raise ValueError("a cross-process rate limit (state_file) needs a POSIX system") from None
            self.state_file.parent.mkdir(parents=True, exist_ok=True)

    def try_acquire(self) -> float:
        """Take the right to send now and return 0, or return how long to wait before retrying."""
        with self._lock:
            if self.state_file is not None:
                try:
                    return self._shared(grant=True)
                except OSError as exc:
                    self._lose_state_file(exc)
            now = self._clock()
            if now >= self._next:
                self._next = now + self.interval
                self._granted(now)
                return 0.0
            return self._next - now

    def acquire(self) -> float:
        """Block the calling thread until it may send; return the time waited."""
        waited = 0.0
        while (wait := self.try_acquire()) > 0:
            self._sleep(wait)
            waited += wait
        return waited

    async def acquire_async(self) -> float:
        """Wait until the caller may send, without blocking the event loop."""
        waited = 0.0
        while (wait := self.try_acquire()) > 0:
            await self._async_sleep(wait)
            waited += wait
        return waited

    def defer(self, seconds: float) -> None:
        """Let no request go for `seconds` from now (the server said it is overloaded: 429)."""
        with self._lock:
            if self.state_file is not None:
                try:
                    self._shared(grant=False, defer=seconds)
                    return
                except OSError as exc:
                    self._lose_state_file(exc)
            self._next = max(self._next, self._clock() + seconds)

    def _lose_state_file(self, exc: OSError) -> None:
        # The shared file became unusable (removed dir, full disk, permissions): a request must
        # not fail for it, so keep limiting within this process from now on.
        log.warning("E-utilities rate limit: cannot use %s (%s); limiting this process only",
                    self.state_file, exc.strerror or exc)
        self.state_file = None

    def _granted(self, now: float) -> None:
        if self.on_grant is not None:
            self.on_grant(now)

    def _shared(self, grant: bool, defer: float = 0.0) -> float:
        """try_acquire/defer on the next-allowed time kept in the state file, under flock."""
        import fcntl

        fd = os.open(self.state_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            now = self._wall_clock()
            try:
                nxt = float(os.pread(fd, 64, 0) or b"0")
            except ValueError:  # torn or foreign content: start afresh
                nxt = 0.0
            if nxt - now > _STALE_AFTER:
                nxt = now
            if grant:
                if now < nxt:
                    return nxt - now
                nxt = now + self.interval
            else:
                nxt = max(nxt, now + defer)
            os.ftruncate(fd, 0)
            os.pwrite(fd, repr(nxt).encode(), 0)
            if grant:
                self._granted(now)  # still under flock: stamps of all processes form one schedule
            return 0.0
        finally:
            os.close(fd)


_registry: dict[tuple[str, str, str], RateLimiter] = {}
_registry_lock = threading.Lock()


def requests_per_second(api_key: str | None) -> float:
    """NCBI's published limit for this identity."""
    return 10.0 if api_key else 3.0


def state_dir() -> Path | None:
    """Where processes share the slot clock: BIOCHECK_RATELIMIT_DIR, else the user's cache dir.

    None where none can be named (no home directory). The XDG spec says a relative
    XDG_CACHE_HOME is to be ignored.
    """
    override = os.environ.get("BIOCHECK_RATELIMIT_DIR", "").strip()
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "biocheck"
    try:
        return Path.home() / ".cache" / "biocheck"
    except RuntimeError:  # no HOME and no passwd entry
        return None


def shared_limiter(host: str, api_key: str | None, slack: float = DEFAULT_SLACK) -> RateLimiter:
    """The process's one limiter for `host` and this API key (or none), sharing its schedule with
    the user's other processes through a state file (see `state_dir`).

    The key is hashed so neither the registry nor a state file name holds it in clear.
    """
    identity = hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else "anonymous"
    directory = state_dir()
    with _registry_lock:
        # Keyed by the directory too: a changed BIOCHECK_RATELIMIT_DIR means another schedule.
        key = (host, identity, str(directory))
        limiter = _registry.get(key)
        if limiter is None:
            limiter = _make_limiter(requests_per_second(api_key), slack, directory, host, identity)
            _registry[key] = limiter
        return limiter


def _make_limiter(rate: float, slack: float, directory: Path | None, host: str, identity: str) -> RateLimiter:
    if directory is None:
        return RateLimiter(rate, slack=slack)
    name = hashlib.sha256(f"{host}|{identity}".encode()).hexdigest()[:16]
    try:
        return RateLimiter(rate, slack=slack, state_file=directory / f"eutils-{name}.next")
    except ValueError:  # no POSIX file locks (Windows): the process's own limit is all there is
        return RateLimiter(rate, slack=slack)
    except OSError as exc:
        log.warning("E-utilities rate limit: cannot use %s (%s); limiting this process only (set "
                    "BIOCHECK_RATELIMIT_DIR to a writable directory to share it)", directory, exc.strerror or exc)
        return RateLimiter(rate, slack=slack)
