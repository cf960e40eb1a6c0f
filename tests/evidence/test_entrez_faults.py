"""E-utilities faults through `biocheck search --backend entrez`, end to end in a subprocess.

Each fault kind a server can throw at the client (down, reset, 429/503 every time, truncated XML,
JSON instead of XML, a Retry-After beyond the cap, a gzip bomb, a redirect to another host, a
trickle of bytes) must end the command with one `error:` line on stderr, exit 1, no traceback, and
neither the API key nor the password in BIOCHECK_EUTILS_URL printed. The redirect goes to a catcher
on a second loopback address (127.0.0.2) that records whether the key arrived there.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from tests.helpers.fake_eutils import CORPUS, esearch_xml, pubmed_xml
from tests.helpers.paths import REPO

KEY = "sekrit-KEY-0123456789abcdef"
PASSWORD = "pa55-w0rd-XYZ"

BOMB_MIB = 200  # decoded size of the bomb: over the 64 MiB cap


@functools.cache  # compressed once (a second or so), before any request waits on it
def _bomb() -> bytes:
    return gzip.compress(b"\0" * (BOMB_MIB * 2**20), compresslevel=9)


class _Server:
    """A loopback server that answers every request with one fault and records what arrived."""

    def __init__(self, host: str, fault: str, redirect_to: str | None = None) -> None:
        self.fault, self.redirect_to = fault, redirect_to
        self.requests: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                from urllib.parse import parse_qsl

                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                outer.requests.append(dict(parse_qsl(body)))
                try:
                    outer.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://{host}:{self.httpd.server_address[1]}/entrez/eutils/"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        fault = self.fault
        if fault in ("ok", "slow"):  # slow: every answer whole and right, each after 0.4 s
            if fault == "slow":
                time.sleep(0.4)
            endpoint = h.path.rsplit("/", 1)[-1]
            body = esearch_xml(["31000001"], 1, "aspirin", 1) if endpoint.startswith("esearch") else pubmed_xml(CORPUS[:1])
            return self._send(h, 200, body)
        if fault == "reset":  # RST instead of an answer
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            return
        if fault in ("429", "503"):
            return self._send(h, int(fault), json.dumps({"error": "busy", "api-key": KEY}).encode(),
                              {"Retry-After": "0"}, "application/json")
        if fault == "retry_after":
            return self._send(h, 429, b"{}", {"Retry-After": "100000"}, "application/json")
        if fault == "truncated":
            return self._send(h, 200, esearch_xml(["31000001"], 1, "aspirin", 1)[:60])
        if fault == "json":
            return self._send(h, 200, json.dumps({"esearchresult": {"idlist": []}}).encode(), ctype="application/json")
        if fault == "bomb":
            return self._send(h, 200, _bomb(), {"Content-Encoding": "gzip"})
        if fault == "redirect":
            return self._send(h, 307, b"", {"Location": self.redirect_to + h.path.rsplit("/", 1)[-1]})
        if fault == "trickle":  # a byte every 0.2 s: each read is quick, the whole answer never comes
            body = esearch_xml(["31000001"], 1, "aspirin", 1)
            h.send_response(200)
            h.send_header("Content-Type", "text/xml")
            h.send_header("Content-Length", str(len(body) * 100))
            h.end_headers()
            for _ in range(len(body) * 100):
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(0.2)
            return
        raise AssertionError(fault)

    @staticmethod
    def _send(h, status: int, body: bytes, headers: dict | None = None, ctype: str = "text/xml") -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(body)


def _with_password(url: str) -> str:
    return url.replace("http://", f"http://user:{PASSWORD}@", 1)


def _search(tmp_path: Path, url: str, attempts: int = 1, deadline: float = 2.0,
            before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`biocheck [before] search aspirin --params params.yaml [after]` against `url`."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["search"].update(backend="entrez", max_attempts=attempts, timeout_s=1, deadline_s=deadline)
    params["evidence"]["store"] = str(tmp_path / "evidence.sqlite")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    env = {**os.environ, "BIOCHECK_EUTILS_URL": _with_password(url), "NCBI_API_KEY": KEY,
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "BIOCHECK_RATELIMIT_DIR": str(tmp_path / "rl"),
           "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "80"}
    query = [] if "--batch" in after else ["aspirin"]
    return subprocess.run([sys.executable, "-m", "biocheck", *before, "search", *query, "--params",
                           "params.yaml", *after],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/entrez/eutils/"


FAULTS = [
    pytest.param("down", 1, "failed after 1 attempts (last error: connection error", id="server-down"),
    pytest.param("reset", 1, "failed after 1 attempts (last error: connection error", id="connection-reset"),
    pytest.param("429", 1, "failed after 1 attempts (last error: HTTP 429)", id="429-every-time"),
    pytest.param("503", 1, "failed after 1 attempts (last error: HTTP 503)", id="503-every-time"),
    pytest.param("truncated", 1, "failed after 1 attempts", id="truncated-xml"),
    pytest.param("json", 1, "failed after 1 attempts", id="json-not-xml"),
    pytest.param("retry_after", 2, "asked us to wait 100000 s (Retry-After)", id="retry-after-beyond-cap"),
    pytest.param("bomb", 3, "sent a reply over 64 MiB (decoded); refused", id="gzip-bomb"),
    pytest.param("redirect", 1, "redirects to http://127.0.0.2:", id="redirect-to-another-host"),
    pytest.param("trickle", 1, "no complete answer within 2 s (search.deadline_s)", id="trickle-past-deadline"),
]


@pytest.mark.parametrize(("fault", "attempts", "message"), FAULTS)
def test_every_backend_failure_is_one_redacted_line(tmp_path, fault, attempts, message):
    if fault == "bomb":
        _bomb()
    catcher = _Server("127.0.0.2", "ok")
    server = None if fault == "down" else _Server("127.0.0.1", fault, redirect_to=catcher.url)
    try:
        run = _search(tmp_path, _closed_port_url() if server is None else server.url, attempts)
    finally:
        for s in (server, catcher):
            if s is not None:
                s.close()
    lines = run.stderr.splitlines()
    assert run.returncode == 1, run.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), run.stderr
    assert message in lines[0]
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert PASSWORD not in run.stderr and KEY not in run.stderr
    if fault == "redirect":
        assert catcher.requests == []  # the key never reached the other host (nor did anything else)
    if fault == "bomb":
        assert len(server.requests) == 1  # not retried: a bomb is not a transient fault


def test_the_same_server_answers_when_healthy(tmp_path):
    # The control: the harness itself works, so the failures above are the faults'.
    server = _Server("127.0.0.1", "ok")
    try:
        run = _search(tmp_path, server.url)
    finally:
        server.close()
    assert run.returncode == 0, run.stderr
    assert "31000001" in run.stdout and server.requests[0]["api_key"] == KEY


@pytest.mark.parametrize(("before", "after", "one_line"), [
    pytest.param((), ("--json",), True, id="json"),
    pytest.param(("-v",), (), False, id="verbose"),  # debug lines too, but still no traceback and no secret
])
def test_json_and_verbose_runs_fail_the_same_way(tmp_path, before, after, one_line):
    server = _Server("127.0.0.1", "503")
    try:
        run = _search(tmp_path, server.url, before=before, after=after)
    finally:
        server.close()
    lines = run.stderr.splitlines()
    assert run.returncode == 1 and "Traceback" not in run.stderr and run.stdout == ""
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:]
    assert "(last error: HTTP 503)" in lines[-1]
    assert len(lines) == 1 if one_line else len(lines) > 1
    assert PASSWORD not in run.stderr and KEY not in run.stderr


def test_a_batch_ends_at_its_overall_deadline_however_each_search_keeps_its_own(tmp_path):
    """search.deadline_s bounds each search: a batch of slow but timely answers had no end but its length."""
    (tmp_path / "queries.txt").write_text("".join(f"aspirin {i}\n" for i in range(30)))  # 30 x 2 requests x 0.4 s
    server = _Server("127.0.0.1", "slow")
    try:
        began = time.monotonic()
        run = _search(tmp_path, server.url, deadline=10, after=("--batch", "queries.txt", "--deadline", "3"))
        took = time.monotonic() - began
    finally:
        server.close()
    lines = run.stderr.splitlines()
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--deadline 3 s" in lines[0], run.stderr
    answered = run.stdout.count("31000001")
    assert 0 < answered < 30 and f"{answered} of 30 queries answered, the other {30 - answered} not run" in lines[0]
    assert took < 3 + 10  # the deadline, plus the interpreter's start; never the 24 s the batch needs


def test_the_overall_deadline_cuts_the_search_in_flight(tmp_path):
    server = _Server("127.0.0.1", "trickle")
    try:
        began = time.monotonic()
        run = _search(tmp_path, server.url, deadline=60, after=("--deadline", "1.5"))
        took = time.monotonic() - began
    finally:
        server.close()
    lines = run.stderr.splitlines()
    assert run.returncode == 1 and len(lines) == 1, run.stderr
    assert "cut short: the command's deadline (--deadline 1.5 s) passed" in lines[0]
    assert PASSWORD not in run.stderr and KEY not in run.stderr
    assert took < 30  # not search.deadline_s's 60 s
