"""Rate limiter edges that the E-utilities tests (tests/test_entrez.py) do not reach: the total wait
that acquire/acquire_async report when one wait is not enough, and the machine-wide state file's
permissions and recovery. Time is virtual throughout: the limiter's clocks and sleeps are injected.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys

import pytest

from biocheck.pubmed import ratelimit
from biocheck.pubmed.ratelimit import RateLimiter, requests_per_second, shared_limiter


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
        if len(self.sleeps) == 1:
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
    assert float(state.read_text()) == now + limiter.interval
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
