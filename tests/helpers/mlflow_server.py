"""A real MLflow tracking server for integration tests: `mlflow server` on a free 127.0.0.1 port over a SQLite
file (a fresh one, or a copy of an existing `mlflow.db`), artifacts proxied into its own folder, the REST API
for the tests, and a stop that leaves no process behind (the server, its uvicorn worker and anything they
spawn carry a marker in their environment, found by pid as in tests/helpers/prefect_server.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.helpers.prefect_server import _alive, _stop_group, free_port

MARKER = "BIOCHECK_TEST_MLFLOW_RUN"  # env var inherited by every descendant (see survivors)
START_TIMEOUT_S = 180  # a cold start on 2 busy cores takes 15-40 s (imports, table creation)


def mlflow_bin() -> str:
    return str(Path(sys.executable).parent / "mlflow")


@dataclass
class MlflowServer:
    home: Path  # the log, the database (when none is given) and the artifacts live here
    db: Path | None = None  # an existing SQLite file to serve; None: home/mlflow.db, created on start
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db_path(self) -> Path:
        return self.db or self.home / "mlflow.db"

    @property
    def env(self) -> dict[str, str]:
        """The caller's environment without its MLflow settings, plus the marker; no telemetry, and no job
        runner (its consumers are 7 extra processes and 20 s of start-up that the tests never use)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
        return {**env, MARKER: self.token, "MLFLOW_DISABLE_TELEMETRY": "true",
                "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}

    def log(self) -> str:
        path = self.home / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        args = [mlflow_bin(), "server", "--backend-store-uri", f"sqlite:///{self.db_path.resolve()}",
                "--artifacts-destination", str((self.home / "artifacts").resolve()),
                "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"]
        with open(self.home / "server.log", "ab") as out:
            self.proc = subprocess.Popen(args, cwd=self.home, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)  # its own group: stop() ends uvicorn too
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        raise TimeoutError(f"mlflow server not healthy on {self.url} after {timeout} s (raise "
                           f"tests/mlflow_server.START_TIMEOUT_S on a slow machine); its log:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM to the server's group, SIGKILL after a grace period; then any marked process left."""
        if self.proc is not None:
            _stop_group(self.proc)
        for pid in self.survivors() if Path("/proc").is_dir() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def survivors(self) -> list[int]:
        """Pids of live processes (not zombies) that carry this server's marker (Linux)."""
        needle = f"{MARKER}={self.token}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if needle in (entry / "environ").read_bytes().split(b"\0") and _alive(entry):
                    found.append(int(entry.name))
        return found

    # -- the REST API (https://mlflow.org/docs/latest/api_reference/rest-api.html) --------------------

    def get(self, endpoint: str, **query: Any) -> dict[str, Any]:
        """GET /api/2.0/mlflow/<endpoint>?query; the JSON answer, or an AssertionError quoting the server."""
        return _answer(httpx.get(f"{self.url}/api/2.0/mlflow/{endpoint}", params=query, timeout=30))

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        return _answer(httpx.post(f"{self.url}/api/2.0/mlflow/{endpoint}", json=body, timeout=30))

    def search_runs(self, experiment_id: str, filter: str = "") -> list[dict[str, Any]]:  # noqa: A002 (the API's name)
        """Every run of an experiment matching `filter` (MLflow's search syntax), all pages, newest first."""
        runs: list[dict[str, Any]] = []
        body: dict[str, Any] = {"experiment_ids": [experiment_id], "filter": filter, "max_results": 1000,
                                "order_by": ["attributes.start_time DESC"]}
        while True:
            page = self.post("runs/search", body)
            runs += page.get("runs", [])
            if not page.get("next_page_token"):
                return runs
            body["page_token"] = page["next_page_token"]


def _answer(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 200, f"{r.request.method} {r.request.url}: {r.status_code} {r.text[:500]}"
    return r.json()


@contextlib.contextmanager
def mlflow_server(home: Path, db: Path | None = None, timeout: float = START_TIMEOUT_S) -> Iterator[MlflowServer]:
    """A started server; on exit (also on failure) it and every process it spawned is stopped."""
    server = MlflowServer(home, db)
    try:
        server.start(timeout)
        yield server
    finally:
        server.stop()
