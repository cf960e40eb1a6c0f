"""A real Prefect server for integration tests: `prefect server start` on a free 127.0.0.1 port with its own
PREFECT_HOME (never ~/.prefect), the environment for CLI calls against it, and background processes
(workers) that stop with it.

Every process started here (and whatever it spawns: flow runs, Dask workers) carries a marker in its
environment, so `survivors()` finds any of them still alive after the server stopped, by pid, without
guessing by name.

Also the temporary API server that the tests running flows in this process share (`start_test_api`,
`using_api`; the `prefect_api` fixture in tests/conftest.py): one for the session instead of one per module.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

MARKER = "BIOCHECK_TEST_PREFECT_RUN"  # env var inherited by every descendant (see survivors)
STOP_GRACE_S = 15  # SIGTERM, then SIGKILL
# The server as tests need it: deployments just created are scheduled within a second (default 5 s), and no
# UI is built or served (no test opens it).
SERVER_SETTINGS = {"PREFECT_SERVER_SERVICES_SCHEDULER_RECENT_DEPLOYMENTS_LOOP_SECONDS": "1",
                   "PREFECT_SERVER_UI_ENABLED": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_bin() -> str:
    return str(Path(sys.executable).parent / "prefect")


# A new database costs a server's first start ~15 s of migrations; migrated_db() pays them once per session.
MIGRATE = ("import asyncio\nfrom prefect.server.database import provide_database_interface\n"
           "asyncio.run(provide_database_interface().create_db())\n")


def migrated_db(path: Path) -> Path:
    """An empty Prefect database at `path` with every migration applied, made by a process of its own (its own
    PREFECT_HOME beside it); servers start on copies of it (copy_db)."""
    home = path.parent / "migrate-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{path}")
    p = subprocess.run([sys.executable, "-c", MIGRATE], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"migrating a Prefect database failed ({p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}")
    return path


def copy_db(src: Path, dest: Path) -> Path:
    """A consistent copy of SQLite database `src` (its write-ahead log included) at `dest`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(src)) as a, contextlib.closing(sqlite3.connect(dest)) as b:
        a.backup(b)
    return dest


@dataclass
class PrefectServer:
    home: Path
    db: Path | None = None  # a migrated database (migrated_db) to start from, copied; else a new one
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def env(self) -> dict[str, str]:
        """The test's environment pointed at this server only (its own home, no telemetry, no prompts)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        return {**env, MARKER: self.token, "PREFECT_HOME": str(self.home), "PREFECT_API_URL": self.api_url,
                "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_CLI_PROMPT": "false",
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}

    def cli(self, *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None,
            ) -> subprocess.CompletedProcess:
        """`prefect ARGS` against this server; stdout and stderr together in .stdout."""
        return subprocess.run([prefect_bin(), *args], cwd=cwd, env={**self.env, **(env or {})}, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)

    def spawn(self, *args: str, name: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.Popen:
        """`prefect ARGS` in the background (own process group, output to log(name)), stopped by stop()."""
        with open(self.home / f"{name}.log", "ab") as out:
            proc = subprocess.Popen([prefect_bin(), *args], cwd=cwd, env={**self.env, **(env or {})},
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.home / f"{name}.log").read_text(errors="replace")

    def start(self, timeout: float = 180) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if self.db is not None:
            copy_db(self.db, self.home / "prefect.db")  # where the server keeps its database by default
        proc = self.spawn("server", "start", "--host", "127.0.0.1", "--port", str(self.port), name="server",
                          env=SERVER_SETTINGS)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited with {proc.returncode}:\n{self.log('server')[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"prefect server not healthy after {timeout} s:\n{self.log('server')[-3000:]}")

    def stop(self) -> None:
        """Every process started here, newest first: SIGTERM to its group, then SIGKILL after a grace period;
        then any descendant that escaped its group (a new session), by the marker."""
        for proc in reversed(self.procs):
            _stop_group(proc)
        for pid in self.survivors() if Path("/proc").is_dir() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def survivors(self) -> list[int]:
        """Pids of live processes (not zombies) that carry this server's marker: ours, still running (Linux)."""
        needle = f"{MARKER}={self.token}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0") and _alive(entry):
                    found.append(int(entry.name))
        return found


def _alive(proc_dir: Path) -> bool:
    state = (proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _stop_group(proc: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)  # the group: a worker's flow runs and their Dask processes too
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
            deadline = time.monotonic() + wait_s  # the leader is gone; give the rest of its group a moment
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not _group_alive(proc.pid):
                return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def prefect_server(home: Path, timeout: float = 180, db: Path | None = None) -> Iterator[PrefectServer]:
    """A started server (on a copy of the migrated database `db`, if given); on exit (also on failure) every
    process it or its callers spawned is stopped."""
    server = PrefectServer(home, db=db)
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()


# --- one temporary Prefect API for the tests that run flows in this process (tests/conftest.py) -----------

def start_test_api(db: Path, timeout: int = 120):
    """What `prefect.testing.utilities.prefect_test_harness` starts (an API server on a free port with its own
    SQLite database `db`, new or migrated), to be started once and shared: each harness costs ~20 s of
    server start-up."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    with temporary_settings({PREFECT_SERVER_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{db}"}):
        server = SubprocessASGIServer(port=free_port())  # its environment carries the database setting
        server.start(timeout=timeout)
    return server


@contextlib.contextmanager
def using_api(server) -> Iterator[str]:
    """Inside the block this process's flows, tasks, logs and artifacts go to `server` (PREFECT_API_URL), as
    inside prefect_test_harness; queued log lines and events are sent before it ends. Outside it, nothing
    points at the server, so tests that expect no Prefect API see none."""
    import prefect.context
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.utilities.asyncutils import run_coro_as_sync

    with temporary_settings({PREFECT_API_URL: server.api_url}), \
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
        yield server.api_url

        async def drain() -> None:  # as the harness does on its way out
            with contextlib.suppress(RuntimeError):  # no log worker started
                result = APILogWorker.instance().drain()
                if hasattr(result, "__await__"):
                    await result
            result = EventsWorker.drain_all()
            if hasattr(result, "__await__"):
                await result

        run_coro_as_sync(drain())
