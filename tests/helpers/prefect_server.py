"""A real Prefect server for integration tests: `prefect server start` on a free 127.0.0.1 port with its own
PREFECT_HOME (never ~/.prefect), the environment for CLI calls against it, and background processes
(workers) that stop with it.

Every process started here (and whatever it spawns: flow runs, Dask workers) carries a marker in its
environment, so `survivors()` finds any of them still alive after the server stopped, by pid, without
guessing by name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefect_bin() -> str:
    return str(Path(sys.executable).parent / "prefect")


@dataclass
class PrefectServer:
    home: Path
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
        proc = self.spawn("server", "start", "--host", "127.0.0.1", "--port", str(self.port), name="server")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prefect server exited with {proc.returncode}:\n{self.log('server')[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
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
def prefect_server(home: Path, timeout: float = 180) -> Iterator[PrefectServer]:
    """A started server; on exit (also on failure) every process it or its callers spawned is stopped."""
    server = PrefectServer(home)
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()
