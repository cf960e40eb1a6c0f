"""Rate limiter edges that the E-utilities tests (tests/evidence/test_entrez.py) do not reach: the total wait
that acquire/acquire_async report when one wait is not enough, and the machine-wide state file's
permissions and recovery. Time is virtual throughout: the limiter's clocks and sleeps are injected.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import httpx
import pytest

from biocheck.evidence import ratelimit
from biocheck.evidence.ratelimit import RateLimiter, requests_per_second, shared_limiter
from biocheck.evidence.transport import EutilsTransport, RetryPolicy
from biocheck.evidence.types import SearchError
from tests.helpers.fake_eutils import max_in_window


class Clock:
    """Virtual time; the first sleep also lets another caller report a 429 (`defer`)."""

    def __init__(self, start: float = 50.0) -> None:
        self.now = start
        self.sleeps: list[float] = []
        self.limiter: RateLimiter | None = None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if len(self.sleeps) == 1 and self.limiter is not None:
            self.limiter.defer(1.5)  # meanwhile someone got a 429: the caller must wait again

    async def async_sleep(self, seconds: float) -> None:
        self.sleep(seconds)
        await asyncio.sleep(0)


@pytest.mark.parametrize("use_async", [False, True], ids=["acquire", "acquire_async"])
def test_acquire_reports_the_sum_of_every_wait(use_async):
    clock = Clock()
    limiter = clock.limiter = RateLimiter(4, slack=0.0, clock=clock, sleep=clock.sleep, async_sleep=clock.async_sleep)
    acquire = (lambda: asyncio.run(limiter.acquire_async())) if use_async else limiter.acquire
    assert acquire() == 0.0 and clock.sleeps == []  # a free slot: no wait at all
    waited = acquire()
    assert clock.sleeps == [limiter.interval, 1.5]  # the spacing, then the hold-off that came meanwhile
    assert waited == sum(clock.sleeps)


def test_the_state_file_is_private_to_its_user(tmp_path):
    state = tmp_path / "eutils-test.next"
    old = os.umask(0)  # so the mode is the limiter's own choice, not the umask's
    try:
        RateLimiter(3, state_file=state, wall_clock=lambda: 1000.0).try_acquire()
    finally:
        os.umask(old)
    assert stat.S_IMODE(state.stat().st_mode) == 0o600


@pytest.mark.parametrize("content", ["", "garbage", "1e9999x"])
@pytest.mark.parametrize("now", [0.0, 0.5, 1_700_000_000.0])
def test_an_empty_or_unreadable_state_file_holds_nothing_back_at_any_clock_reading(tmp_path, content, now):
    state = tmp_path / "eutils-test.next"
    state.write_text(content)
    limiter = RateLimiter(4, slack=0.0, state_file=state, wall_clock=lambda: now)
    assert limiter.try_acquire() == 0.0  # start afresh: as if no request had ever gone
    assert ratelimit.read_state(state).next == now + limiter.interval
    assert limiter.try_acquire() == limiter.interval


# --- the process's limiters ----------------------------------------------------------------------------

KEY = "sekrit-KEY-0123456789abcdef"


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """A fresh process-wide registry (as in a new process); BIOCHECK_RATELIMIT_DIR unset and the
    user's cache dir ($XDG_CACHE_HOME) in tmp_path/xdg, never the real ~/.cache."""
    monkeypatch.setattr(ratelimit, "_registry", {})
    monkeypatch.delenv("BIOCHECK_RATELIMIT_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return ratelimit._registry


def test_one_limiter_per_host_and_identity_kept_for_the_process(registry):
    mine = shared_limiter("h:1", KEY, slack=0.0)
    assert shared_limiter("h:1", KEY) is mine and mine.interval == 1 / requests_per_second(KEY)
    anonymous = shared_limiter("h:1", None)
    assert anonymous is not mine and anonymous is shared_limiter("h:1", "")  # no key, or an empty one
    assert shared_limiter("h:2", KEY) is not mine
    assert anonymous.interval == (1 + ratelimit.DEFAULT_SLACK) / requests_per_second(None)
    assert KEY not in repr(list(registry))  # the key is held hashed


def test_by_default_processes_share_the_limit_through_the_users_cache_dir(registry, tmp_path):
    first = shared_limiter("h:1", KEY, slack=0.0)
    assert first.state_file is not None and first.state_file.parent == tmp_path / "xdg" / "biocheck"
    registry.clear()  # in effect another process of the same user
    second = shared_limiter("h:1", KEY, slack=0.0)
    assert second is not first and second.state_file == first.state_file
    assert first.try_acquire() == 0.0 and second.try_acquire() > 0  # one slot for the user, not per process


def test_without_xdg_cache_home_the_cache_dir_is_home_dot_cache(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for xdg in (None, "", "relative/cache"):  # unset, empty, or relative (the XDG spec says: ignore it)
        registry.clear()
        if xdg is None:
            monkeypatch.delenv("XDG_CACHE_HOME")
        else:
            monkeypatch.setenv("XDG_CACHE_HOME", xdg)
        assert shared_limiter("h:1", None).state_file.parent == tmp_path / "home" / ".cache" / "biocheck"


def test_the_env_override_still_wins(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("BIOCHECK_RATELIMIT_DIR", str(tmp_path / "override"))
    assert shared_limiter("h:1", None).state_file.parent == tmp_path / "override"


def test_a_changed_state_dir_gets_its_own_limiter(registry, tmp_path, monkeypatch):
    default = shared_limiter("h:1", None)
    monkeypatch.setenv("BIOCHECK_RATELIMIT_DIR", str(tmp_path / "other"))
    assert shared_limiter("h:1", None) is not default  # not the one keyed to the old file


def test_an_unusable_cache_dir_falls_back_to_the_process_wide_limit(registry, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache dir should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    limiter = shared_limiter("h:1", None)
    assert limiter.state_file is None and limiter.try_acquire() == 0.0
    assert "rate limit" in caplog.text and str(blocker) in caplog.text  # said once, as a warning


def test_a_state_file_that_becomes_unwritable_falls_back_instead_of_failing_requests(tmp_path, caplog):
    state = tmp_path / "gone" / "eutils-x.next"
    limiter = RateLimiter(4, slack=0.0, state_file=state, clock=lambda: 7.0)
    state.parent.rmdir()
    (tmp_path / "gone").write_text("now a file")  # the state dir is replaced by a file
    assert limiter.try_acquire() == 0.0 and limiter.state_file is None
    assert limiter.try_acquire() == limiter.interval  # still limited, within the process
    assert "rate limit" in caplog.text


def test_without_posix_file_locks_the_default_is_process_wide(registry, monkeypatch):
    monkeypatch.setitem(sys.modules, "fcntl", None)  # as on Windows
    assert shared_limiter("h:1", None).state_file is None


def test_with_a_state_dir_every_process_shares_one_file_per_host_and_key(registry, tmp_path, monkeypatch):
    monkeypatch.setenv("BIOCHECK_RATELIMIT_DIR", f"  {tmp_path}  ")  # stray spaces from a .env file
    first = shared_limiter("h:1", KEY, slack=0.0)
    assert first.state_file is not None and first.state_file.parent == tmp_path
    registry.clear()  # in effect another process
    second = shared_limiter("h:1", KEY, slack=0.0)
    assert second is not first and second.state_file == first.state_file
    assert first.try_acquire() == 0.0 and second.try_acquire() > 0  # one slot, machine-wide
    others = {shared_limiter(host, key).state_file for host, key in (("h:1", None), ("h:2", KEY), ("h:2", None))}
    assert len(others | {first.state_file}) == 4  # each host and identity has its own file
    names = [p.name for p in tmp_path.iterdir()]
    assert names == [first.state_file.name] and KEY not in str(others | {first.state_file})


@pytest.mark.parametrize("rate", [0.5, 1.0, 3.0])
def test_any_positive_rate_spaces_requests_by_its_inverse(rate):
    limiter = RateLimiter(rate, slack=0.0, clock=lambda: 10.0)
    assert limiter.interval == 1.0 / rate
    assert limiter.try_acquire() == 0.0 and limiter.try_acquire() == pytest.approx(1.0 / rate)


def test_a_machine_wide_limit_without_posix_file_locks_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fcntl", None)  # as on Windows: `import fcntl` fails
    with pytest.raises(ValueError, match=r"^a cross-process rate limit \(state_file\) needs a POSIX system$"):
        RateLimiter(3, state_file=tmp_path / "eutils-x.next")
    assert RateLimiter(3).state_file is None  # the process-wide limit still works


def test_the_state_dir_is_created_when_missing(tmp_path):
    state = tmp_path / "shared" / "ratelimit" / "eutils-x.next"  # BIOCHECK_RATELIMIT_DIR need not exist yet
    limiter = RateLimiter(3, state_file=state, wall_clock=lambda: 1000.0)
    assert state.parent.is_dir()
    assert limiter.try_acquire() == 0.0 and state.exists()
    RateLimiter(3, state_file=state)  # and a second limiter on it is fine


# --- a request counts from its grant until it is sent -------------------------------------------------


def _limiter(kind: str, tmp_path, clock, rate: float = 3, slack: float = 0.0) -> RateLimiter:
    """The same limiter kept in the process or in a state file (the rules must not differ)."""
    if kind == "process":
        return RateLimiter(rate, slack=slack, clock=clock)
    return RateLimiter(rate, slack=slack, state_file=tmp_path / "eutils-test.next", wall_clock=clock)


@pytest.mark.parametrize("kind", ["process", "state file"])
def test_a_caller_frozen_between_grant_and_send_keeps_its_place(kind, tmp_path):
    """Three slots at 3/s, 0.36 s apart; the first is sent late, at 0.9 s (its process was descheduled
    after its grant). Counted from grants, a fourth would go at 1.08 s: four requests would reach the
    server within 0.72 s. It waits until the oldest send (0.36 s) has left the 1.08 s window."""
    clock = Clock(0.0)
    limiter = _limiter(kind, tmp_path, clock, slack=ratelimit.DEFAULT_SLACK)
    first = limiter.reserve()
    clock.now = limiter.interval
    limiter.reserve().sent()
    clock.now = 2 * limiter.interval
    limiter.reserve().sent()
    clock.now = 0.9
    first.sent()  # at last on the wire
    clock.now = 3 * limiter.interval  # spacing alone would grant now ...
    assert limiter.try_acquire() == pytest.approx(limiter.interval + limiter.window - clock.now)  # ... it waits
    clock.now = limiter.interval + limiter.window
    assert limiter.try_acquire() == 0.0
    sends = [limiter.interval, 2 * limiter.interval, 0.9, clock.now]
    assert max_in_window(sends, 1.0) == 3  # what the server sees stays within the limit


def test_a_slot_on_its_way_holds_its_place_however_long_it_takes():
    clock = Clock(0.0)
    limiter = RateLimiter(3, clock=clock)
    slots = [limiter.reserve()]
    for _ in range(2):
        clock.now += limiter.interval
        slots.append(limiter.reserve())
    clock.now = 30.0  # none of them sent yet: each may reach the server at any moment
    assert limiter.try_acquire() == limiter.interval  # nothing to count down from: ask again soon
    slots[0].sent()
    assert limiter.try_acquire() == pytest.approx(limiter.window)


@pytest.mark.parametrize("kind", ["process", "state file"])
def test_a_slot_is_stamped_once_and_on_leaving_its_block(kind, tmp_path):
    clock = Clock(10.0)
    limiter = _limiter(kind, tmp_path, clock, rate=1)
    with limiter.reserve() as slot:
        clock.now = 11.0
        slot.sent()
        clock.now = 11.5
        slot.sent()  # a second report (trace hook, then the end of the attempt) changes nothing
    assert limiter.try_acquire() == pytest.approx(0.5)  # counted from 11.0, the first report
    clock.now = 20.0
    with limiter.reserve():
        clock.now = 21.0  # the attempt ends without a report (a mock transport, an error)
    assert limiter.try_acquire() == pytest.approx(1.0)  # counted from the end: later, so safe


def test_a_request_on_its_way_from_a_dead_process_or_stuck_is_taken_as_sent(tmp_path):
    ctx = __import__("multiprocessing").get_context("spawn")
    gone = ctx.Process(target=int)
    gone.start()
    gone.join()
    state = tmp_path / "eutils-test.next"
    host = ratelimit._HOST
    state.write_text(json.dumps({"next": 0, "pending": {f"{host}:{gone.pid}:0": 100.0}}))
    clock = Clock(100.5)
    limiter = RateLimiter(1, slack=0.0, state_file=state, wall_clock=clock)
    assert limiter.try_acquire() == pytest.approx(1.0)  # sent, as far as anyone knows, just now
    assert ratelimit.read_state(state).pending == {} and ratelimit.read_state(state).sent == [100.5]
    alive = f"{host}:{os.getpid()}:999999"  # a live process that took a slot and has not sent yet
    state.write_text(json.dumps({"next": 0, "pending": {alive: 100.0}}))
    clock.now = 100.0 + ratelimit._STUCK_AFTER  # however long it takes: it may send at any moment
    assert limiter.try_acquire() == limiter.interval and alive in ratelimit.read_state(state).pending
    clock.now = 100.0 + ratelimit._STUCK_AFTER + 1  # but not forever
    assert limiter.try_acquire() == pytest.approx(1.0) and ratelimit.read_state(state).pending == {}


def test_send_stamps_from_a_clock_that_went_back_count_from_now(tmp_path):
    state = tmp_path / "eutils-test.next"
    state.write_text(json.dumps({"next": 0, "sent": [5000.0]}))  # written before the clock was set back
    limiter = RateLimiter(1, slack=0.0, state_file=state, wall_clock=lambda: 1000.0)
    assert limiter.try_acquire() == pytest.approx(1.0)  # one window from now, not 4001 s


@pytest.mark.parametrize("content", [b"[1, 2]", b'{"next": "soon"}', b'{"sent": [NaN]}', b'{"pending": [1]}', b"\xff\xfe"])
def test_a_state_file_of_the_wrong_shape_is_a_fresh_start(tmp_path, content):
    state = tmp_path / "eutils-test.next"
    state.write_bytes(content)
    limiter = RateLimiter(4, slack=0.0, state_file=state, wall_clock=lambda: 70.0)
    assert limiter.try_acquire() == 0.0 and ratelimit.read_state(state).sent == [70.0]


# --- the transport holds its slot until the request is on the wire ----------------------------------------


def test_the_transport_stamps_its_slot_when_the_request_is_written_before_the_reply(tmp_path):
    """The server looks at the shared state while it holds the reply back: the request it is reading
    is already stamped as sent (httpcore's trace hook), not counted as on its way until the reply."""
    state = tmp_path / "eutils-test.next"
    limiter = RateLimiter(10, state_file=state)
    seen: list[ratelimit.LimitState] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            for _ in range(500):  # the client stamps right after its write returns: wait for it (<= 5 s)
                if not ratelimit.read_state(state).pending:
                    break
                time.sleep(0.01)
            seen.append(ratelimit.read_state(state))
            self.send_response(200)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"<ok/>")

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        transport = EutilsTransport(f"http://127.0.0.1:{server.server_port}/", {}, limiter, timeout=10.0,
                                    policy=RetryPolicy(max_attempts=1))
        assert transport.call("esearch.fcgi", {"term": "x"}, lambda body: body) == b"<ok/>"
        transport.close()
    finally:
        server.shutdown()
        server.server_close()
    assert len(seen) == 1 and seen[0].pending == {} and len(seen[0].sent) == 1  # stamped before the reply
    assert ratelimit.read_state(state).sent == seen[0].sent  # and only once


def test_without_a_trace_hook_the_slot_is_on_its_way_for_the_whole_attempt(tmp_path):
    state = tmp_path / "eutils-test.next"
    during: list[ratelimit.LimitState] = []

    def handler(request: httpx.Request) -> httpx.Response:  # a mock transport reports no write
        during.append(ratelimit.read_state(state))
        return httpx.Response(503 if len(during) == 1 else 200, content=b"<ok/>")

    transport = EutilsTransport("http://eutils.test/", {}, RateLimiter(10, state_file=state), timeout=1.0,
                                policy=RetryPolicy(max_attempts=2), http=httpx.Client(transport=httpx.MockTransport(handler)),
                                sleep=lambda s: None)
    assert transport.call("esearch.fcgi", {}, lambda body: body) == b"<ok/>"
    assert [len(s.pending) for s in during] == [1, 1]  # each attempt (the retry too) holds a slot of its own
    assert len(during[1].sent) == 1  # the first attempt was stamped when it ended
    after = ratelimit.read_state(state)
    assert after.pending == {} and len(after.sent) == 2


def test_each_redirect_hop_takes_a_slot_of_its_own_and_a_loop_is_a_clear_error(tmp_path):
    state = tmp_path / "eutils-test.next"
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        assert len(ratelimit.read_state(state).pending) == 1  # this hop is on its way: one slot, not shared
        if request.url.path.startswith(("/old/", "/loop/")):
            return httpx.Response(308, headers={"Location": request.url.path.replace("/old/", "/new/")})
        return httpx.Response(200, content=b"<ok/>")

    http = httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True, max_redirects=3)
    limiter = RateLimiter(10, state_file=state)
    transport = EutilsTransport("http://eutils.test/old/", {}, limiter, timeout=1.0, policy=RetryPolicy(), http=http)
    assert transport.call("esearch.fcgi", {}, lambda body: body) == b"<ok/>"
    assert paths == ["/old/esearch.fcgi", "/new/esearch.fcgi"] and len(ratelimit.read_state(state).sent) == 2
    loop = EutilsTransport("http://eutils.test/loop/", {}, limiter, timeout=1.0, policy=RetryPolicy(), http=http)
    with pytest.raises(SearchError, match=r"^PubMed esearch: more than 3 redirects from http://eutils.test/loop/"):
        loop.call("esearch.fcgi", {}, lambda body: body)
