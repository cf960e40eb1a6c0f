"""NCBI's limit holds at the server when the searching processes are short of CPU.

Four processes search PubMed through the real client and its machine-wide limiter (state file,
flock), against the local fake E-utilities in a process of its own, while busy loops (two per
core) keep every core taken. The server stamps each request when it reads it (time.monotonic, in
the server process) and the test counts arrivals in every 1-second window: NCBI counts the requests
it receives, so the limit is checked there, not at the client. Only counts are asserted, never
durations.

A starved process runs only now and then: the one that was just granted a slot may be frozen
before its request leaves (a saturated CPU, or a container whose CPU quota ran out, frozen until
the next period), while the others keep taking slots. Busy loops alone showed it only in some
runs on a 2-core machine, and only with the searchers at a low priority (nice 19): 4 requests in one
second without a key, 11-13 with one, in 30-80 s per run. To show it every time within seconds, each
client's HTTP transport also holds every request back, between the grant and the send, until the
next tick of a 0.5 s clock shared by all processes, as such a quota does. A limiter that counts a
request from its grant rather than its send lets the requests of several ticks arrive within one
second (it did: 4-5 at 3/s and 13-14 at 10/s, in every run).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from itertools import pairwise

import httpx
import pytest

from biocheck.evidence.ratelimit import requests_per_second
from tests.helpers.fake_eutils import FakeEutils, max_in_window

KEY = "sekrit-KEY-0123456789abcdef"
PROCESSES = 4
THREADS = {None: 1, KEY: 3}  # searchers per process: enough to keep taking every slot the limit allows
SEARCHES = 2  # per searcher, each an esearch + an efetch
QUERIES = ["aspirin", "vitamin", "metformin", "statin"]
TICK = 0.5  # s: a frozen process sends only at these instants (longer than a slot's spacing at 3/s)


class FrozenUntilTick(httpx.HTTPTransport):
    """Holds each request, after the limiter granted it and before it is written, until the next tick."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        time.sleep(TICK - time.monotonic() % TICK)  # CLOCK_MONOTONIC: one clock for every process here
        return super().handle_request(request)


def _spin(stop) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


@contextmanager
def saturated_cpu(ctx, hogs: int):
    """`hogs` busy-loop processes for the duration: every request competes for a core."""
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(hogs)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()


def _server(ready, stop, arrivals) -> None:
    """Child process: the fake E-utilities; sends back the arrival time of every request."""
    with FakeEutils() as server:
        ready.put(server.url)
        stop.wait()
        arrivals.put([r.time for r in server.requests])


def _searcher(url: str, api_key: str | None, state_dir: str, start, done) -> None:
    """Child process: THREADS searchers sharing one client, hence the process's shared limiter."""
    os.environ["BIOCHECK_RATELIMIT_DIR"] = state_dir
    from biocheck.evidence.entrez import EntrezClient

    http = httpx.Client(transport=FrozenUntilTick(), timeout=30.0)
    with EntrezClient(base_url=url, api_key=api_key, timeout=30.0, http=http) as client:
        start.wait()
        with ThreadPoolExecutor(THREADS[api_key]) as pool:
            found = list(pool.map(lambda _: [len(client.search(q, n=2).articles) for q in QUERIES[:SEARCHES]],
                                  range(THREADS[api_key])))
    done.put(found)


@pytest.mark.parametrize("api_key", [None, KEY], ids=["no-key-3-per-s", "key-10-per-s"])
def test_starved_processes_stay_within_the_limit_at_the_server(tmp_path, api_key):
    rate = requests_per_second(api_key)
    ctx = multiprocessing.get_context("spawn")
    ready, stop, arrivals = ctx.Queue(), ctx.Event(), ctx.Queue()
    server = ctx.Process(target=_server, args=(ready, stop, arrivals), daemon=True)
    server.start()
    clients = []
    try:
        url = ready.get(timeout=60)
        start, done = ctx.Barrier(PROCESSES + 1), ctx.Queue()
        clients = [ctx.Process(target=_searcher, args=(url, api_key, str(tmp_path), start, done), daemon=True)
                   for _ in range(PROCESSES)]
        for p in clients:
            p.start()
        with saturated_cpu(ctx, 2 * (os.cpu_count() or 2)):
            start.wait(timeout=120)  # every client is ready: the load starts with the searches
            found = [done.get(timeout=120) for _ in clients]
        stop.set()
        times = sorted(arrivals.get(timeout=30))
    finally:
        stop.set()
        for p in [*clients, server]:
            p.join(30)
            if p.is_alive():
                p.kill()
    expected = [len(FakeEutils().search(q, 2)[0]) for q in QUERIES[:SEARCHES]]
    assert found == [[expected] * THREADS[api_key]] * PROCESSES  # every search answered, with its articles
    assert len(times) == 2 * SEARCHES * THREADS[api_key] * PROCESSES  # esearch + efetch each, nothing retried
    gaps_ms = [round(1000 * (b - a)) for a, b in pairwise(times)]
    most = max_in_window(times, 1.0)
    assert most <= rate, f"{most} requests in one second, more than {rate:g}; gaps (ms): {gaps_ms}"
