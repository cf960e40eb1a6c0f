"""Why tantivy: the candidate engines for the local index, measured on the same SciFact run.

Free-text (bm25-mode) retrieval with claim text as the query, on the dev claims and on the
train claims (the split used to make choices such as "no title boost"):

* SQLite FTS5 (stdlib): porter stemmer, bm25() with title weight 1 or 2; query = OR of the
  non-stopword words, each quoted.
* bm25s + PyStemmer: numpy/scipy sparse BM25, the reference pipeline (stands in for an
  own numpy inverted index: same ranking, but phrases, fields and incremental adds would all be
  ours to write).
* tantivy, per-field BM25 (title and abstract scored separately and summed).
* tantivy, one combined title+abstract field (what LocalIndex uses), optionally plus a boosted
  title field.

    .venv/bin/python bench/backend_candidates.py
    .venv/bin/python bench/backend_candidates.py --corpus .../corpus.jsonl \
        --dev-claims .../claims_dev.jsonl --train-claims .../claims_train.jsonl
"""

from __future__ import annotations

import argparse
import re
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import tantivy
from common import (
    DEFAULT_CLAIMS,
    DEFAULT_CORPUS,
    Claim,
    ReferenceBM25,
    load_articles,
    load_retrieval_claims,
    ndcg_at_k,
    percentiles_ms,
    recall_at_k,
)

from biocheck.evidence.local import LocalIndex
from biocheck.evidence.local_analysis import STEM, query_analyzer, stem_analyzer
from biocheck.evidence.types import Article

Search = Callable[[str], list[str]]


def dir_size(path: Path) -> int:
    return (
        sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        if path.is_dir()
        else path.stat().st_size
    )


def fts5(articles: list[Article], where: Path, title_weight: float) -> tuple[Search, int]:
    from bm25s.stopwords import STOPWORDS_EN

    stop = set(STOPWORDS_EN)
    db_path = where / f"fts5_{title_weight}.sqlite"
    db = sqlite3.connect(db_path)
    db.execute(
        "CREATE VIRTUAL TABLE f USING fts5(pmid UNINDEXED, title, abstract, "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    db.executemany("INSERT INTO f VALUES (?, ?, ?)", [(a.pmid, a.title, a.abstract) for a in articles])
    db.commit()

    def search(text: str) -> list[str]:
        words = [
            w for w in dict.fromkeys(re.findall(r"[^\W_]+", text.lower())) if w not in stop and len(w) > 1
        ]
        # Each word double-quoted (quotes doubled inside): FTS5 syntax can never leak in.
        expression = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = db.execute(
            "SELECT pmid FROM f WHERE f MATCH ? ORDER BY bm25(f, 0, ?, 1), pmid LIMIT 20",
            (expression, title_weight),
        ).fetchall()
        return [r[0] for r in rows]

    return search, dir_size(db_path)


def tantivy_variant(
    articles: list[Article], where: Path, combined: bool, title_boost: float
) -> tuple[Search, int]:
    path = where / f"tantivy_{combined}_{title_boost}"
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("pmid", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", tokenizer_name=STEM, index_option="freq")
    builder.add_text_field("abstract", tokenizer_name=STEM, index_option="freq")
    builder.add_text_field("text", tokenizer_name=STEM, index_option="freq")
    schema = builder.build()
    index = tantivy.Index(schema, path=str(path))
    index.register_tokenizer(STEM, stem_analyzer())
    writer = index.writer(200_000_000, 1)
    for a in articles:
        doc = tantivy.Document(pmid=a.pmid, title=a.title, abstract=a.abstract)
        doc.add_text("text", a.title)
        doc.add_text("text", a.abstract)
        writer.add_document(doc)
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    searcher = index.searcher()
    fields = ["text"] if combined else ["title", "abstract"]

    def search(text: str) -> list[str]:
        clauses = []
        for token in dict.fromkeys(query_analyzer().analyze(text)):
            clauses += [(tantivy.Occur.Should, tantivy.Query.term_query(schema, f, token)) for f in fields]
            if title_boost:
                title = tantivy.Query.term_query(schema, "title", token)
                clauses.append((tantivy.Occur.Should, tantivy.Query.boost_query(title, title_boost)))
        hits = searcher.search(tantivy.Query.boolean_query(clauses), 20).hits
        return [searcher.doc(address).get_first("pmid") for _, address in hits]

    return search, dir_size(path)


def evaluate(search: Search, claims: list[Claim]) -> tuple[float, float, list[float]]:
    ndcg, recall, times = [], [], []
    for claim in claims:
        started = time.perf_counter()
        ranked = search(claim.text)
        times.append(time.perf_counter() - started)
        ndcg.append(ndcg_at_k(ranked, claim.relevant, 10))
        recall.append(recall_at_k(ranked, claim.relevant, 20))
    return statistics.fmean(ndcg), statistics.fmean(recall), times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument(
        "--dev-claims", type=Path, default=DEFAULT_CLAIMS, help="SciFact dev (prepared split 'test')"
    )
    parser.add_argument(
        "--train-claims", type=Path, default=DEFAULT_CLAIMS, help="SciFact train (prepared 'train'+'val')"
    )
    args = parser.parse_args()

    articles = load_articles(args.corpus)
    dev = load_retrieval_claims(args.dev_claims, "test")
    train = load_retrieval_claims(args.train_claims, "train") + (
        load_retrieval_claims(args.train_claims, "val") if args.train_claims == DEFAULT_CLAIMS else []
    )
    print(f"corpus {len(articles)}; dev claims {len(dev)}; train claims {len(train)}")
    where = Path(tempfile.mkdtemp(prefix="biocheck-candidates-"))
    try:
        candidates: dict[str, Callable[[], tuple[Search, int]]] = {
            "SQLite FTS5 porter, bm25() title weight 1": lambda: fts5(articles, where, 1.0),
            "SQLite FTS5 porter, bm25() title weight 2": lambda: fts5(articles, where, 2.0),
            "bm25s + PyStemmer (reference)": lambda: _reference(articles, where),
            "tantivy, per-field BM25 summed": lambda: tantivy_variant(articles, where, False, 0.0),
            "tantivy, combined field + title boost 0.2": lambda: tantivy_variant(articles, where, True, 0.2),
            "tantivy, combined field + title boost 0.3": lambda: tantivy_variant(articles, where, True, 0.3),
            "LocalIndex (tantivy, combined field)": lambda: _ours(articles, where),
        }
        print(
            "\n| engine | dev nDCG@10 | dev R@20 | train nDCG@10 | train R@20 | build (s) | size (MB) "
            "| p50 (ms) | p99 (ms) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
        )
        for name, make in candidates.items():
            started = time.perf_counter()
            search, size = make()
            build = time.perf_counter() - started
            dev_ndcg, dev_recall, times = evaluate(search, dev)
            train_ndcg, train_recall, _ = evaluate(search, train)
            lat = percentiles_ms(times)
            print(
                f"| {name} | {dev_ndcg:.4f} | {dev_recall:.4f} | {train_ndcg:.4f} | {train_recall:.4f} "
                f"| {build:.2f} | {size / 1e6:.1f} | {lat['p50_ms']:.3f} | {lat['p99_ms']:.3f} |",
                flush=True,
            )
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _reference(articles: list[Article], where: Path) -> tuple[Search, int]:
    reference = ReferenceBM25(articles)
    reference.retriever.save(str(where / "bm25s"))
    return (lambda text: reference.search(text, 20)), dir_size(where / "bm25s")


def _ours(articles: list[Article], where: Path) -> tuple[Search, int]:
    index = LocalIndex.build(articles, path=where / "local")
    return (lambda text: [a.pmid for a in index.search(text, 20, mode="bm25").articles]), index.stats()[
        "size_bytes"
    ]


if __name__ == "__main__":
    main()
