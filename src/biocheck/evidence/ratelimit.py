"""A request-rate limiter for NCBI E-utilities, shared by every process of the user on a machine.

NCBI allows 3 requests/s per IP (10/s with an API key) and counts the requests it *receives*, per
second, so bursts are as bad as a high average. Two rules together keep every second at the server
within the limit:

- **Spacing.** Grants go at least `(1 + slack) / rate` apart, so requests are spread evenly.
- **A sliding window of sends.** At most `rate` requests may be "recent" at any time: sent within the
  last `1 + slack` seconds, or granted and not yet sent. A granted request counts from the moment it
  is granted, so a caller that is descheduled between its grant and its send (a saturated CPU, a
  throttled container) holds its place instead of letting the next callers' requests pile up behind
  it: spacing alone, counted from grant times, cannot promise anything about when requests arrive.

A caller that sends at once uses `acquire()` (the grant is its send). The transport uses
`reserve()`, whose `Slot` stays "on its way" until `Slot.sent()` is called once the request is on the
wire (httpcore's trace hook) or the attempt is over. NCBI's clock starts when a request reaches it,
a little after our "sent" stamp; the window's extra `slack` seconds (0.08 s: 80 ms) absorb the
difference in that delay between two requests (network jitter). The slack costs ~7% of the nominal
rate. Why it holds: if `rate + 1` requests reached the server within 1 s (with jitter under the
slack), the last of them to be granted would, at its grant, have seen each other one granted and
either unsent or sent less than `1 + slack` seconds before, i.e. `rate` recent requests, and would
have waited. (`rate` here is rounded down, and at least 1: `capacity`.)

One limiter exists per (host, identity) in a process (`shared_limiter`): every EntrezClient talking
to the same E-utilities host with the same API key (or none) shares it. NCBI counts per IP/key, not
per process, so by default every process of the user shares the state (next allowed grant, recent
send stamps, requests on their way) through a small JSON file locked with flock, in the user's cache
dir ($XDG_CACHE_HOME/biocheck, else ~/.cache/biocheck); BIOCHECK_RATELIMIT_DIR names another
directory (e.g. one shared by several users of a machine). A request on its way whose process has
died, or that has waited over a minute, is taken as sent then. Where no such file can be used (no
POSIX file locks, an unwritable cache dir) the limit falls back to the process, with a warning.

Time comes in through the constructor (`clock`, `wall_clock`, `sleep`, `async_sleep`), so tests
drive the limiter with a virtual clock and check the schedule it grants (`on_grant` sees each
grant's time stamp, taken under the lock) instead of timing real requests.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

log = logging.getLogger(__name__)

DEFAULT_SLACK = 0.08  # spacing and window 8% longer: ~93% of the nominal rate, 80 ms of jitter absorbed
_STALE_AFTER = 300.0  # a shared next-allowed time this far ahead is a clock jump
_STUCK_AFTER = 60.0  # a request granted this long ago and still not sent: taken as sent now
_EPSILON = 1e-9  # float rounding in window arithmetic must never leave a caller waiting 0 s forever
_HOST = socket.gethostname()
_tokens = itertools.count()


@dataclass
class LimitState:
    """What the limiter knows, in one clock: the earliest next grant (spacing, 429 hold-offs), the
    send stamps still inside the window, and the requests granted but not yet sent (token -> grant)."""

    next: float = -math.inf
    sent: list[float] = field(default_factory=list)
    pending: dict[str, float] = field(default_factory=dict)

    def dumps(self) -> str:
        return json.dumps({"next": self.next, "sent": self.sent, "pending": self.pending})

    @classmethod
    def loads(cls, text: str) -> Self:
        """The state in `text`; a bare number (the format before send stamps) is a next-allowed time.
        Empty, torn or foreign content is a fresh state: as if no request had ever gone."""
        try:
            data = json.loads(text)
            if isinstance(data, (int, float)) and not isinstance(data, bool):
                data = {"next": data}
            state = cls(
                next=float(data.get("next", -math.inf)),
                sent=[float(t) for t in data.get("sent", [])],
                pending={str(k): float(v) for k, v in data.get("pending", {}).items()},
            )
        except (ValueError, TypeError, AttributeError):
            return cls()
        if any(math.isnan(t) for t in (state.next, *state.sent, *state.pending.values())):
            return cls()
        return state


def read_state(path: str | os.PathLike[str]) -> LimitState:
    """The shared state kept in a limiter's state file, read under a shared flock (never half-written)."""
    import fcntl

    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_SH)
        return LimitState.loads(f.read().decode("utf-8", "replace"))


class Slot:
    """A granted request that counts as on its way until `sent()` (idempotent; also on leaving a `with`)."""

    def __init__(self, limiter: RateLimiter, token: str) -> None:
        self._limiter = limiter
        self._token = token
        self._done = False
        self._lock = threading.Lock()

    def sent(self) -> None:
        """The request is on the wire (or will never be): it now counts from this moment."""
        with self._lock:
            if self._done:
                return
            self._done = True
        self._limiter._mark_sent(self._token)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sent()  # an attempt that never reported its send: count it from its end (later, so safe)


class RateLimiter:
    """At most `capacity` (`rate` rounded down, at least 1) requests recent in any `1 + slack` seconds,
    granted `(1 + slack) / rate` apart; thread-safe.

    With `state_file`, the state lives in that file (`wall_clock` time: shared by every process,
    unlike `clock`) so that every process using the same file shares one limit (POSIX only).
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
        self.window = 1.0 + slack  # seconds in which at most `capacity` requests may be recent
        self.capacity = max(1, math.floor(rate))
        self._clock = clock
        self._sleep = sleep
        self._async_sleep = async_sleep
        self._wall_clock = wall_clock
        self.on_grant = on_grant
        self._lock = threading.Lock()
        self._state = LimitState()  # used when there is no state file (or it became unusable)
        self.state_file = Path(state_file) if state_file is not None else None
        if self.state_file is not None:
            try:
                import fcntl  # noqa: F401 - POSIX only
            except ImportError:
                raise ValueError("a cross-process rate limit (state_file) needs a POSIX system") from None
            self.state_file.parent.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ taking a slot

    def try_acquire(self) -> float:
        """Take the right to send now (counted as sent now) and return 0, or return how long to wait."""
        return self._update(lambda state, now: self._grant(state, now, None))

    def acquire(self) -> float:
        """Block the calling thread until it may send, and count the request as sent; return the time waited."""
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

    def reserve(self) -> Slot:
        """Block until a request may go; it counts as on its way until the returned slot's `sent()`."""
        token = f"{_HOST}:{os.getpid()}:{next(_tokens)}"
        while (wait := self._update(lambda state, now: self._grant(state, now, token))) > 0:
            self._sleep(wait)
        return Slot(self, token)

    def defer(self, seconds: float) -> None:
        """Let no request go for `seconds` from now (the server said it is overloaded: 429)."""

        def hold_off(state: LimitState, now: float) -> float:
            state.next = max(state.next, now + seconds)
            return 0.0

        self._update(hold_off)

    def _mark_sent(self, token: str) -> None:
        def stamp(state: LimitState, now: float) -> float:
            state.pending.pop(token, None)
            state.sent.append(now)  # even if the grant was lost (state reset): counting more is safe
            return 0.0

        self._update(stamp)

    # ------------------------------------------------------------------ the rules

    def _grant(self, state: LimitState, now: float, token: str | None) -> float:
        """Grant (record it, return 0) or return how long to wait before asking again."""
        wait = state.next - now
        recent = sorted(state.sent)
        excess = len(state.pending) + len(recent) - self.capacity
        if excess >= 0:  # full: the oldest sends must leave the window first
            # requests still on their way leave it no sooner than a window after they are sent
            wait = max(wait, recent[excess] + self.window - now if excess < len(recent) else self.interval)
        if wait > 0:
            return wait
        state.next = now + self.interval
        if token is None:
            state.sent.append(now)
        else:
            state.pending[token] = now
        if self.on_grant is not None:
            self.on_grant(now)
        return 0.0

    def _tidy(self, state: LimitState, now: float) -> None:
        """Forget sends that left the window; take stuck or orphaned requests on their way as sent now."""
        for token, granted in list(state.pending.items()):
            if now - granted > _STUCK_AFTER or not _alive(token):
                del state.pending[token]
                state.sent.append(now)
        # a stamp from the future means the wall clock went back: count it from now
        state.sent = [min(t, now) for t in state.sent if t > now - self.window + _EPSILON]

    # ------------------------------------------------------------------ where the state lives

    def _update(self, change: Callable[[LimitState, float], float]) -> float:
        """Apply `change(state, now)` under the lock (and the file's flock); return its result."""
        with self._lock:
            if self.state_file is not None:
                try:
                    return self._update_file(change)
                except OSError as exc:
                    self._lose_state_file(exc)
            now = self._clock()
            self._tidy(self._state, now)
            return change(self._state, now)

    def _update_file(self, change: Callable[[LimitState, float], float]) -> float:
        import fcntl

        fd = os.open(self.state_file, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            now = self._wall_clock()
            before = os.pread(fd, 1 << 16, 0).decode("utf-8", "replace")
            state = LimitState.loads(before)
            if state.next - now > _STALE_AFTER:
                state.next = now  # a wall-clock jump, not a hold-off
            self._tidy(state, now)
            result = change(state, now)  # on_grant runs here, still under flock: one schedule for all
            after = state.dumps()
            if after != before:
                os.ftruncate(fd, 0)
                os.pwrite(fd, after.encode(), 0)
            return result
        finally:
            os.close(fd)

    def _lose_state_file(self, exc: OSError) -> None:
        # The shared file became unusable (removed dir, full disk, permissions): a request must
        # not fail for it, so keep limiting within this process from now on.
        log.warning("E-utilities rate limit: cannot use %s (%s); limiting this process only",
                    self.state_file, exc.strerror or exc)
        self.state_file = None


def _alive(token: str) -> bool:
    """Whether the process that took `token` ("host:pid:n") may still send; another host's is taken as alive."""
    host, pid, _ = token.rsplit(":", 2) if token.count(":") >= 2 else ("", "", "")
    if host != _HOST or not pid.isdigit():
        return host != _HOST and bool(host)  # foreign: trust it (it expires when stuck); garbage: drop it
    if int(pid) == os.getpid():
        return True
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (a shared BIOCHECK_RATELIMIT_DIR): alive
        return True
    return True


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
