"""The retries done with tenacity keep their old contract: how many attempts, which errors are retried, the
waits (exponential, jittered, through a `time.sleep` a test can replace) and the final message."""

from __future__ import annotations

import socket
import sqlite3

import pytest

from biocheck.llm.base import LLMError
from biocheck.llm.openai_backend import OpenAIChat
from biocheck.sqlite_db import SQLiteDB


class _DB(SQLiteDB):
    label = "test db"
    error = RuntimeError
    schema = "CREATE TABLE IF NOT EXISTS t (x INTEGER)"


def _flaky(failures: list[Exception], answer: str = "ok"):
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return answer

    return fn, calls


def test_a_busy_database_is_retried_with_growing_waits_until_it_answers(tmp_path, monkeypatch):
    db = _DB(tmp_path / "t.sqlite", lock_timeout=60.0)
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    fn, calls = _flaky([sqlite3.OperationalError("database is locked")] * 3)
    assert db._retry(fn, "read") == "ok" and len(calls) == 4
    assert len(slept) == 3
    for k, wait in enumerate(slept):  # 10 ms doubling (at most 0.5 s), times a jitter in [0.5, 1.5]
        assert 0.5 * min(0.01 * 2**k, 0.5) <= wait <= 1.5 * min(0.01 * 2**k, 0.5)


def test_a_database_busy_past_lock_timeout_or_damaged_fails_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: None)
    db = _DB(tmp_path / "t.sqlite", lock_timeout=0.0)
    fn, calls = _flaky([sqlite3.OperationalError("database is locked")] * 100)
    with pytest.raises(RuntimeError, match=r"^test db .*t\.sqlite: could not write: database is locked$"):
        db._retry(fn, "write")
    assert len(calls) == 1  # no time left to retry
    db.lock_timeout = 60.0
    fn, calls = _flaky([sqlite3.OperationalError("no such table: x")])
    with pytest.raises(RuntimeError, match="could not read: no such table: x"):
        db._retry(fn, "read")
    assert len(calls) == 1  # not busy: never retried


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there: every connection is refused


def test_the_openai_backend_retries_refused_connections_with_exponential_jittered_waits(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)
    llm = OpenAIChat("m", base_url=_closed_port_url(), api_key="", max_attempts=4)
    with pytest.raises(LLMError, match=r"no answer after 4 attempts \(ConnectError\)\. Is the server up\?"):
        llm.chat([{"role": "user", "content": "hi"}], [])
    assert len(slept) == 3  # between the attempts, not after the last
    for k, wait in enumerate(slept):  # 0.5 s doubling, times a jitter in [0.75, 1.25]
        assert 0.75 * 0.5 * 2**k <= wait <= 1.25 * 0.5 * 2**k


def test_an_openai_backend_without_attempts_sends_nothing(monkeypatch):
    monkeypatch.setattr("time.sleep", lambda s: pytest.fail("no attempt, no wait"))
    llm = OpenAIChat("m", base_url=_closed_port_url(), api_key="", max_attempts=0)
    with pytest.raises(LLMError, match=r"no answer after 0 attempts \(\)"):
        llm.chat([{"role": "user", "content": "hi"}], [])
