"""The rate limiter and the Retry-After wait under the real clock, seen from a local fake E-utilities.

The tests check the schedule the limiter grants under a virtual clock; this measures what a server
actually receives, in real time, on this machine (request arrival times at the fake server):

- threads:   8 threads x 3 fetches through one client (10/s with a key): max requests in any 1-s
             window, smallest gap between arrivals, and the run's length against (n - 1) / rate;
- processes: 2 processes x 4 threads x 3 fetches sharing the limit through BIOCHECK_RATELIMIT_DIR;
- 429:       a 429 with Retry-After: 1 s, then the gap between the refused request and its retry.

Pass: no 1-s window above the limit (no violations), and the retry no sooner than Retry-After.

    .venv/bin/python bench/ratelimit_wallclock.py               # ~10 s
    .venv/bin/python bench/ratelimit_wallclock.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # run as a plain script; tests/ holds the fake server

from tests.helpers.fake_eutils import FakeEutils

from biocheck.evidence.entrez import EntrezClient

BENCH_KEY = "bench-key-not-a-real-key"
PMIDS = ["31000001", "31000002", "31000003"]
RATE = 10


def _fetch_all(client: EntrezClient, threads: int) -> int:
    with ThreadPoolExecutor(threads) as pool:
        got = list(pool.map(lambda _: [client.fetch([p])[0].pmid for p in PMIDS], range(threads)))
    return sum(len(g) for g in got)


def _arrivals(server: FakeEutils, elapsed: float, expected: int) -> dict:
    times = sorted(r.time for r in server.requests)
    gaps = [b - a for a, b in pairwise(times)]
    return {
        "requests": len(times),
        "expected": expected,
        "elapsed_s": round(elapsed, 3),
        "lower_bound_s": round((expected - 1) / RATE, 3),  # (n - 1) / rate: the fastest legal run
        "max_in_any_1s_window": server.max_in_window(1.0),
        "min_gap_ms": round(1000 * min(gaps), 1) if gaps else None,
        "violations": server.violations,
        "passed": server.violations == 0 and len(times) == expected,
    }


def run_threads() -> dict:
    with FakeEutils(max_per_second=RATE) as server, EntrezClient(base_url=server.url, api_key=BENCH_KEY) as client:
        t0 = time.monotonic()
        _fetch_all(client, threads=8)
        return {"case": "8 threads, one process", **_arrivals(server, time.monotonic() - t0, 8 * len(PMIDS))}


def _child(url: str, state_dir: str, start, done) -> None:
    os.environ["BIOCHECK_RATELIMIT_DIR"] = state_dir
    with EntrezClient(base_url=url, api_key=BENCH_KEY) as client:
        start.wait()
        done.put(_fetch_all(client, threads=4))


def run_processes() -> dict:
    ctx = multiprocessing.get_context("spawn")
    with FakeEutils(max_per_second=RATE) as server, tempfile.TemporaryDirectory() as state_dir:
        start, done = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_child, args=(server.url, state_dir, start, done)) for _ in range(2)]
        for p in procs:
            p.start()
        start.wait()
        t0 = time.monotonic()
        fetched = [done.get(timeout=120) for _ in procs]
        elapsed = time.monotonic() - t0
        for p in procs:
            p.join(30)
        row = {"case": "2 processes x 4 threads", **_arrivals(server, elapsed, 2 * 4 * len(PMIDS))}
        row["passed"] = row["passed"] and fetched == [12, 12]
        return row


def run_retry_after(retry_after: float = 1.0) -> dict:
    with FakeEutils() as server, EntrezClient(base_url=server.url, api_key=BENCH_KEY, backoff_base=0.01) as client:
        server.inject("status", endpoint="esearch", status=429, retry_after=f"{retry_after:g}")
        client.search("coffee", n=1)
        refused, retried = server.requests_to("esearch")
        gap = retried.time - refused.time
        return {"case": f"429, Retry-After {retry_after:g} s", "retry_gap_s": round(gap, 3),
                "passed": refused.status == 429 and gap >= retry_after}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    rows = [run_threads(), run_processes(), run_retry_after()]
    print("| case | requests | elapsed | (n-1)/rate | max in 1 s | min gap | violations | retry gap | pass |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r.get('requests', '-')} | {r.get('elapsed_s', '-')} s | {r.get('lower_bound_s', '-')} s "
              f"| {r.get('max_in_any_1s_window', '-')} | {r.get('min_gap_ms', '-')} ms | {r.get('violations', '-')} "
              f"| {r.get('retry_gap_s', '-')} s | {'yes' if r['passed'] else 'NO'} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
