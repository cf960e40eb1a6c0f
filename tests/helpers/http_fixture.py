"""A scriptable local HTTP server for download tests (loopback only, stops with the test)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# A behaviour takes (handler, attempt number) and writes the whole response itself.
Behaviour = Callable[[BaseHTTPRequestHandler, int], None]


def ok(body: bytes) -> Behaviour:
    def run(h, _attempt):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)
    return run


def status(code: int) -> Behaviour:
    def run(h, _attempt):
        h.send_response(code)
        h.send_header("Content-Length", "0")
        h.end_headers()
    return run


def truncated(body: bytes, keep: int) -> Behaviour:
    def run(h, _attempt):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body[:keep])
        h.wfile.flush()
        h.close_connection = True
    return run


def slow(body: bytes, delay_s: float) -> Behaviour:
    def run(h, _attempt):
        time.sleep(delay_s)
        ok(body)(h, _attempt)
    return run


def drip(body: bytes, chunk: int, every_s: float) -> Behaviour:
    """Send the body a little at a time (to interrupt a download half-way)."""
    def run(h, _attempt):
        h.send_response(200)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        for i in range(0, len(body), chunk):
            try:
                h.wfile.write(body[i:i + chunk])
                h.wfile.flush()
            except OSError:
                return
            time.sleep(every_s)
    return run


def sequence(*behaviours: Behaviour) -> Behaviour:
    """Attempt 1 gets the first behaviour, attempt 2 the second, ...; the last one repeats."""
    def run(h, attempt):
        behaviours[min(attempt, len(behaviours)) - 1](h, attempt)
    return run


class Server:
    def __init__(self, routes: dict[str, Behaviour]):
        self.routes = routes
        self.hits: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                server.hits[path] = server.hits.get(path, 0) + 1
                behaviour = server.routes.get(path, status(404))
                behaviour(self, server.hits[path])

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
