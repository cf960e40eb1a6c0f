"""Throughput of the Entrez client under NCBI's rate limit, against the local fake E-utilities.

For each limit (3/s without a key, 10/s with one) a fake server counts every request that
breaks the limit in any 1-second sliding window, while N caller threads run searches
(esearch + efetch) back to back for a fixed time through one shared EntrezClient. With
`--processes P`, P processes each run their own client and N threads at once, as parallel
`biocheck search` runs do: they share the limit through the limiter's state file. Pass when
the server saw at least 90% of the limit and zero violations.

    .venv/bin/python bench/entrez_throughput.py                      # 8 callers, 10 s per limit
    .venv/bin/python bench/entrez_throughput.py --processes 4 --callers 2
    .venv/bin/python bench/entrez_throughput.py --duration 30 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]  # run as a plain script; tests/ holds the fake server

from tests.helpers.fake_eutils import FakeEutils

from biocheck.evidence.entrez import EntrezClient

QUERIES = ["aspirin", "vitamin d", "statin cholesterol", "coffee mortality", "metformin cancer", "influenza"]
BENCH_KEY = "bench-key-not-a-real-key"


def search_until(url: str, api_key: str | None, callers: int, deadline: float) -> tuple[list[float], list[str]]:
    """`callers` threads searching back to back through one client until `deadline` (monotonic)."""
    client = EntrezClient(base_url=url, api_key=api_key)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def caller(i: int) -> None:
        k = i
        while time.monotonic() < deadline:
            start = time.monotonic()
            try:
                client.search(QUERIES[k % len(QUERIES)], n=3)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(exc))
            with lock:
                latencies.append(time.monotonic() - start)
            k += 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    client.close()
    return latencies, errors


def _process(url: str, api_key: str | None, callers: int, start, duration: float, out) -> None:
    start.wait()  # all processes begin together (CLOCK_MONOTONIC is system-wide on Linux)
    out.put(search_until(url, api_key, callers, time.monotonic() + duration))


def run(rate: int, callers: int, duration: float, latency: float, processes: int = 1) -> dict:
    api_key = BENCH_KEY if rate == 10 else None
    with FakeEutils(max_per_second=rate, latency=latency) as server:
        assert EntrezClient(base_url=server.url, api_key=api_key).limiter.rate == rate, "the limit comes from the key"
        t0 = time.monotonic()
        if processes == 1:
            latencies, errors = search_until(server.url, api_key, callers, t0 + duration)
        else:
            ctx = multiprocessing.get_context("spawn")
            start, out = ctx.Barrier(processes + 1), ctx.Queue()
            procs = [ctx.Process(target=_process, args=(server.url, api_key, callers, start, duration, out))
                     for _ in range(processes)]
            for proc in procs:
                proc.start()
            start.wait()
            t0 = time.monotonic()
            replies = [out.get(timeout=duration + 120) for _ in procs]
            for proc in procs:
                proc.join()
            latencies = [x for lat, _ in replies for x in lat]
            errors = [e for _, errs in replies for e in errs]
        deadline = t0 + duration
        in_window = [r for r in server.requests if t0 <= r.time <= deadline]
        throughput = len(in_window) / duration
        arrivals = sorted(r.time for r in server.requests)
        gaps = [b - a for a, b in pairwise(arrivals)]
        return {
            "limit_per_s": rate,
            "api_key": rate == 10,
            "processes": processes,
            "callers": callers,
            "duration_s": duration,
            "requests": len(in_window),
            "throughput_per_s": round(throughput, 3),
            "fraction_of_limit": round(throughput / rate, 3),
            "violations": server.violations,
            "max_in_any_1s_window": server.max_in_window(1.0),
            "min_gap_ms": round(1000 * min(gaps), 1) if gaps else None,  # spacing is (1 + slack) / limit
            "searches": len(latencies),
            "search_latency_p50_s": round(statistics.median(latencies), 3) if latencies else None,
            "errors": len(errors),
            "passed": throughput >= 0.9 * rate and server.violations == 0 and not errors,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per limit (default 10)")
    parser.add_argument("--callers", type=int, default=8, help="concurrent caller threads per process (default 8)")
    parser.add_argument("--processes", type=int, default=1, help="processes, each with its own client (default 1)")
    parser.add_argument("--rates", default="3,10", help="limits to test: 3 (no key) and/or 10 (key)")
    parser.add_argument("--latency", type=float, default=0.02, help="simulated server latency in s (default 0.02)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    results = []
    # The limiter's state files (one per fake server port) go to a throw-away dir, not ~/.cache.
    with tempfile.TemporaryDirectory(prefix="biocheck-bench-ratelimit-") as state_dir:
        os.environ.setdefault("BIOCHECK_RATELIMIT_DIR", state_dir)
        for rate in (int(r) for r in args.rates.split(",")):
            if rate not in (3, 10):
                parser.error(f"NCBI's limits are 3/s (no key) and 10/s (key), not {rate}")
            results.append(run(rate, args.callers, args.duration, args.latency, args.processes))

    print("| limit | key | processes | callers | duration | requests | throughput | of limit | max in 1 s | min gap "
          "| violations | pass |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['limit_per_s']}/s | {'yes' if r['api_key'] else 'no'} | {r['processes']} | {r['callers']} "
            f"| {r['duration_s']:g} s "
            f"| {r['requests']} | {r['throughput_per_s']:.2f}/s | {r['fraction_of_limit']:.1%} "
            f"| {r['max_in_any_1s_window']} | {r['min_gap_ms']} ms | {r['violations']} | {'yes' if r['passed'] else 'NO'} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
