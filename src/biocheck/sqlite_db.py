"""One SQLite file shared by many threads and processes (the evidence store, the judge cache).

WAL mode (readers never block the writer), `busy_timeout`, one connection per thread (sqlite3
connections must not cross threads; a forked child opens its own), every write one
`BEGIN IMMEDIATE` transaction (the write lock up front, so no deadlocking lock upgrade; all or
nothing), and "database is locked/busy" retried with jittered backoff until `lock_timeout`.

A file that is not an SQLite database, or a damaged one (cut short, overwritten), raises
`error` with one line saying which file and what to do (`damaged_hint`), whenever SQLite notices:
when opening, or on the first read of a damaged page.

A new database is made under a temporary name and linked into place complete (schema, WAL mode), so
no process ever sees it half-made. SQLite would take a 0-byte file for an empty database; here such
a file was never written by this code (a copy, download or checkout cut short, `touch`) and is
refused like a damaged one, rather than quietly used as an empty store.
"""

from __future__ import annotations

import os
import random
import secrets
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Self, TypeVar

import tenacity

T = TypeVar("T")


_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26
_BUSY_WAIT = tenacity.wait_exponential(multiplier=0.01, max=0.5)  # another writer usually finishes in ms


def is_busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def is_damaged(exc: sqlite3.DatabaseError) -> bool:
    """Not an SQLite file at all, or one whose pages are damaged (cut short, overwritten)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB):
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


class SQLiteDB:
    """Subclasses set `label`, `error`, `schema` (statements separated by ';') and `schema_version`."""

    label = "database"
    error: type[Exception] = RuntimeError
    schema = ""
    schema_version = 1
    damaged_hint = "move it aside; a new one is created on the next run"

    def __init__(self, path: Path, busy_timeout: float = 30.0, lock_timeout: float = 120.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self.error(f"{self.label} {self.path}: cannot create its folder ({exc.strerror or exc})") from None
        self.busy_timeout = busy_timeout
        self.lock_timeout = lock_timeout  # total time an operation may keep retrying on "busy"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        self._create_or_check()
        self._init_schema()

    def _create_or_check(self) -> None:
        """Make a missing database (complete, then linked into place); refuse a 0-byte file."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            self._create()
            return
        except OSError as exc:
            raise self.error(f"{self.label} {self.path}: cannot read it ({exc.strerror or exc})") from None
        if size == 0 and self.path.is_file():
            raise self.error(f"{self.label} {self.path} is empty (0 bytes), not a database this code wrote (a copy "
                             f"or checkout cut short?); {self.damaged_hint}")

    def _create(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.new")
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))  # the usual mode (umask)
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN IMMEDIATE")
                self._create_schema(conn)
                conn.execute("COMMIT")
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process made it first: that one is used
            except OSError:  # a file system without hard links: a rename, unless one appeared meanwhile
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except sqlite3.DatabaseError as exc:
            raise self._failure("create", exc) from None
        except OSError as exc:
            raise self.error(f"{self.label} {self.path}: cannot create it ({exc.strerror or exc})") from None
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{tmp}{suffix}").unlink(missing_ok=True)

    # -- connections ---------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: no implicit transactions; we BEGIN/COMMIT explicitly.
        try:
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: a crash loses no committed write
        except sqlite3.DatabaseError as exc:
            raise self._failure("open", exc) from None
        return conn

    def _failure(self, what: str, exc: sqlite3.DatabaseError) -> Exception:
        """One line for the user: which file, what went wrong, and what to do about a damaged one."""
        if is_damaged(exc):
            return self.error(f"{self.label} {self.path} is damaged or not an SQLite database ({exc}); "
                              f"{self.damaged_hint}")
        return self.error(f"{self.label} {self.path}: could not {what}: {exc}")

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise self.error(f"{self.label} {self.path} is closed")
        if os.getpid() != self._pid:  # forked: never touch the parent's connections
            self._pid, self._local, self._connections = os.getpid(), threading.local(), []
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    def close(self) -> None:
        """Close every connection this object opened (call once the worker threads are done)."""
        with self._lock:
            for conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:
                    pass
            self._connections.clear()
        self._local = threading.local()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema --------------------------------------------------------------------------------

    def _init_schema(self) -> None:
        conn = self._conn()
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone(), "enable WAL")
        current = self._retry(lambda: conn.execute("PRAGMA user_version").fetchone()[0], "read the schema version")
        if current != self.schema_version:  # only a new (or old) file needs the write lock
            self._write(self._create_schema)

    def _create_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > self.schema_version:
            raise self.error(f"{self.label} {self.path}: schema version {version} is newer than this code "
                             f"({self.schema_version}); upgrade biocheck")
        for statement in self.schema.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {self.schema_version}")

    # -- transactions --------------------------------------------------------------------------

    def _retry(self, fn: Callable[[], T], what: str) -> T:
        """`fn()`, retried while the database is locked/busy (waits from 10 ms doubling to 0.5 s, jittered)
        until `lock_timeout`; any other database error, or the last busy one, as `self.error`."""
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_delay(self.lock_timeout),
            wait=lambda state: _BUSY_WAIT(state) * random.uniform(0.5, 1.5),
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, sqlite3.OperationalError) and is_busy(e)),
            reraise=True,
        )
        try:
            return retrying(fn)
        except sqlite3.DatabaseError as exc:  # OperationalError (busy, locked ...) is one of these
            raise self._failure(what, exc) from None

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run `body` in one BEGIN IMMEDIATE transaction; all or nothing; retried while busy."""
        conn = self._conn()

        def attempt() -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = body(conn)
                conn.execute("COMMIT")
                return out
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

        return self._retry(attempt, "write")

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run `body` in one read transaction (a consistent snapshot)."""
        conn = self._conn()

        def attempt() -> T:
            conn.execute("BEGIN")
            try:
                return body(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

        return self._retry(attempt, "read")
