"""In-process search latency of the local index, and how it grows with corpus size.

Part 1: the SciFact corpus, a fixed seeded set of Boolean queries built from claim words
(AND, implicit AND, OR+AND, phrase, field tags, NOT, truncation, [mh]) and the claims
themselves as bm25-mode queries. Each timed call is a full ``LocalIndex.search(q, n=5)``,
articles included, on an index opened from disk.

Part 2 (``--sizes``): synthetic corpora re-assembled from SciFact sentences; build time, index
size, open time and the same query latencies per size.

    .venv/bin/python bench/search_latency.py                           # SciFact + 10k, 100k
    .venv/bin/python bench/search_latency.py --sizes 10000,100000,1000000
    .venv/bin/python bench/search_latency.py --sizes ''                # SciFact only
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from common import (
    DEFAULT_CLAIMS,
    DEFAULT_CORPUS,
    Claim,
    boolean_queries,
    load_articles,
    load_retrieval_claims,
    percentiles_ms,
    synthetic_articles,
)

from biocheck.evidence.local import LocalIndex
from biocheck.evidence.types import SearchError


def time_queries(index: LocalIndex, queries: list[tuple[str, str, str]], repeats: int) -> dict[str, dict]:
    """queries: (group, mode, text). Returns latency percentiles per group and per mode."""
    for _, mode, text in queries[:20]:  # warm caches (page cache, tokenizer objects)
        _search(index, text, mode)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(repeats):
        for group, mode, text in queries:
            started = time.perf_counter()
            _search(index, text, mode)
            elapsed = time.perf_counter() - started
            times[f"{mode}:{group}"].append(elapsed)
            times[f"{mode} (all)"].append(elapsed)
    return {key: percentiles_ms(values) for key, values in sorted(times.items())}


def _search(index: LocalIndex, text: str, mode: str) -> None:
    try:
        index.search(text, n=5, mode=mode)  # type: ignore[arg-type]
    except SearchError:
        pass  # e.g. a query made only of stopwords: still a realistic, timed call


def query_set(claims: list[Claim], count: int, seed: int) -> list[tuple[str, str, str]]:
    boolean = [(kind, "boolean", q) for kind, q in boolean_queries(claims, count, seed)]
    bm25 = [("claim", "bm25", c.text) for c in claims[:count]]
    return boolean + bm25


def measure(articles, workdir: Path, queries, repeats: int, threads: int, progress: bool) -> dict:
    path = workdir / "index"
    started = time.perf_counter()
    LocalIndex.build(articles, path=path, progress=progress, threads=threads)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    index = LocalIndex.open(path)
    open_s = time.perf_counter() - started
    stats = index.stats()
    latency = time_queries(index, queries, repeats)
    shutil.rmtree(path)
    return {
        "docs": stats["docs"],
        "build_s": round(build_s, 2),
        "size_mb": round(stats["size_bytes"] / 1e6, 1),
        "open_ms": round(open_s * 1000, 1),
        "latency": latency,
    }


def print_table(title: str, result: dict) -> None:
    print(
        f"\n### {title}: {result['docs']} docs, build {result['build_s']} s, "
        f"{result['size_mb']} MB, open {result['open_ms']} ms"
    )
    print(
        "| queries | n | p50 (ms) | p99 (ms) | mean (ms) | max (ms) |\n| --- | --- | --- | --- | --- | --- |"
    )
    for key, row in result["latency"].items():
        print(
            f"| {key} | {row['n']} | {row['p50_ms']} | {row['p99_ms']} | {row['mean_ms']} | {row['max_ms']} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--claims", type=Path, default=DEFAULT_CLAIMS)
    parser.add_argument(
        "--split", default="test", help="split of prepared claim records (ignored for raw files)"
    )
    parser.add_argument("--queries", type=int, default=200, help="queries per mode")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes over the query set")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument(
        "--sizes", default="10000,100000", help="synthetic corpus sizes, comma-separated ('' = none)"
    )
    parser.add_argument("--threads", type=int, default=1, help="indexing threads")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where indexes are built (default: a temp dir)"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    articles = load_articles(args.corpus)
    claims = load_retrieval_claims(args.claims, args.split)
    queries = query_set(claims, args.queries, args.seed)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="biocheck-bench-", dir=args.workdir))
    results = {}
    try:
        results["scifact"] = measure(articles, workdir, queries, args.repeats, args.threads, progress=False)
        print_table("SciFact corpus", results["scifact"])
        for size in sizes:
            synthetic = synthetic_articles(articles, size, args.seed)
            results[f"synthetic_{size}"] = measure(
                synthetic, workdir, queries, 1, args.threads, progress=True
            )
            print_table(f"synthetic {size}", results[f"synthetic_{size}"])
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
