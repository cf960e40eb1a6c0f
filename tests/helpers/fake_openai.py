"""A local OpenAI-compatible server for tests and benchmarks: POST /v1/chat/completions answered by a function.

`reply(body, headers) -> (status, payload)` decides each answer (payload None: an empty body; bytes: sent as
they are, for answers that are not JSON); every
request is recorded (path, Authorization header, parsed body). One thread per request, loopback only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict[str, Any], Any], tuple[int, Any]]


def assistant(msg: dict[str, Any], usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A chat completion whose one choice is `msg` (role assistant added)."""
    return {"choices": [{"message": {"role": "assistant", **msg}}],
            "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5}}


class FakeOpenAI:
    def __init__(self, reply: Reply, keep_alive: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            if keep_alive:  # httpx reuses connections, as with a real server
                protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    fake.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
                status, payload = reply(body, self.headers)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
