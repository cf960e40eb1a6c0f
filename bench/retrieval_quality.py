"""Retrieval quality of the local index (bm25 mode) against the bm25s reference, same run.

Claim text is the query; the qrels are each claim's cited_doc_ids. Reports nDCG@10 and
Recall@20 for both systems on the same claims.

    .venv/bin/python bench/retrieval_quality.py                        # prepared data, SciFact dev
    .venv/bin/python bench/retrieval_quality.py --corpus /path/scifact/corpus.jsonl \
        --claims /path/scifact/claims_dev.jsonl                       # raw SciFact files
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from common import (
    DEFAULT_CLAIMS,
    DEFAULT_CORPUS,
    ReferenceBM25,
    load_articles,
    load_retrieval_claims,
    ndcg_at_k,
    recall_at_k,
)

from biocheck.evidence.local import LocalIndex


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--corpus", type=Path, default=DEFAULT_CORPUS, help="corpus JSONL (prepared or raw SciFact)"
    )
    parser.add_argument(
        "--claims",
        type=Path,
        default=DEFAULT_CLAIMS,
        help="claims JSONL: prepared ClaimRecords or raw SciFact claims_*.jsonl",
    )
    parser.add_argument(
        "--split",
        default="test",
        help="split of prepared records to use (SciFact dev = 'test'); ignored for raw files",
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--check", action="store_true", help="exit 1 if ours is below the reference")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    articles = load_articles(args.corpus)
    claims = load_retrieval_claims(args.claims, args.split)
    print(
        f"corpus: {len(articles)} abstracts ({args.corpus}); claims with qrels: {len(claims)} ({args.claims})"
    )

    started = time.perf_counter()
    ours = LocalIndex.build(articles)
    ours_build = time.perf_counter() - started
    started = time.perf_counter()
    reference = ReferenceBM25(articles)
    reference_build = time.perf_counter() - started

    systems = {
        "local (tantivy BM25, bm25 mode)": lambda text: [
            a.pmid for a in ours.search(text, 20, mode="bm25").articles
        ],
        "reference (bm25s + stopwords + Snowball)": lambda text: reference.search(text, 20),
    }
    builds = dict(zip(systems, (ours_build, reference_build), strict=True))
    results = {}
    for name, search in systems.items():
        ndcg, recall = [], []
        for claim in claims:
            ranked = search(claim.text)
            ndcg.append(ndcg_at_k(ranked, claim.relevant, 10))
            recall.append(recall_at_k(ranked, claim.relevant, 20))
        results[name] = {
            "ndcg@10": round(statistics.fmean(ndcg), 4),
            "recall@20": round(statistics.fmean(recall), 4),
            "build_s": round(builds[name], 2),
        }

    print("\n| system | nDCG@10 | Recall@20 | build (s) |\n| --- | --- | --- | --- |")
    for name, row in results.items():
        print(f"| {name} | {row['ndcg@10']:.4f} | {row['recall@20']:.4f} | {row['build_s']:.2f} |")
    ours_row, ref_row = results.values()
    ok = ours_row["ndcg@10"] >= ref_row["ndcg@10"] and ours_row["recall@20"] >= ref_row["recall@20"]
    print(f"\nours >= reference on both metrics: {'yes' if ok else 'NO'}")
    if args.json:
        args.json.write_text(
            json.dumps({"claims": len(claims), "corpus": len(articles), "results": results}, indent=2)
        )
    if args.check and not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
