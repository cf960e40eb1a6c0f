"""Judge throughput: (claim, abstract) pairs scored per second on CPU, batched vs one by one, and the cache.

Pairs are SciFact claims with the abstracts they cite (data/prepared), or synthetic ones when the prepared
data is missing. The judge is the tiny model built into a temp dir (`biocheck model init` defaults) unless
--model is given. Measures: pairs/s one by one (batch of 1 per call) and batched at each --batch-sizes;
then a CachedJudge over a fresh SQLite cache for two epochs: hit rate and pairs/s (target: 100% on the repeat).

    .venv/bin/python bench/judge_throughput.py [--pairs 256] [--model models/base] [--batch-sizes 4,8,16,32]
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from biocheck.evidence.corpus import articles_from_corpus  # noqa: E402
from biocheck.evidence.types import Article  # noqa: E402
from biocheck.rewards.judge import CachedJudge, JudgeCache, TransformersJudge  # noqa: E402

log = logging.getLogger("bench.judge")
CORPUS = ROOT / "data/prepared/corpus.jsonl"
CLAIMS = ROOT / "data/prepared/full/scifact.jsonl"


def load_pairs(n: int, seed: int, corpus: Path = CORPUS, claims: Path = CLAIMS) -> list[tuple[str, Article]]:
    """n (claim, cited abstract) pairs from SciFact, or synthetic ones without the prepared data."""
    rng = random.Random(seed)
    if corpus.is_file() and claims.is_file():
        docs = {a.pmid: a for a in articles_from_corpus(corpus)}
        pairs = []
        for line in claims.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            pairs += [(rec["claim"], docs[d]) for d in rec.get("cited_doc_ids") or [] if d in docs]
        rng.shuffle(pairs)
        return pairs[:n]
    words = ["vitamin", "fracture", "aspirin", "bleeding", "statin", "memory", "trial", "cohort", "risk",
             "mortality", "patients", "dose"]
    return [(" ".join(rng.choices(words, k=10)) + ".",
             Article(pmid=str(i), title=" ".join(rng.choices(words, k=8)),
                     abstract=" ".join(rng.choices(words, k=220)))) for i in range(n)]


def build_tiny(out: Path, corpus: Path) -> Path:
    from biocheck.agent.prompts import prompt_texts
    from biocheck.base_model.tiny import TinyModelConfig, build_tiny_model

    cfg = TinyModelConfig(out_dir=out / "base", corpus=corpus)
    if not corpus.is_file():
        synthetic = out / "corpus.jsonl"
        synthetic.write_text("".join(json.dumps({"id": a.pmid, "title": a.title, "abstract": a.abstract}) + "\n"
                                     for _, a in load_pairs(200, 1, corpus)))
        cfg = TinyModelConfig(out_dir=out / "base", corpus=synthetic)
    build_tiny_model(cfg, prompt_texts())
    return cfg.out_dir


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    fn()
    return round(n / (time.perf_counter() - t0), 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="judge model dir (default: build the tiny model into a temp dir)")
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="prepared corpus (synthetic pairs if missing)")
    ap.add_argument("--claims", type=Path, default=CLAIMS, help="prepared SciFact claims")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--one-by-one", type=int, default=64, help="pairs for the one-by-one measurement")
    ap.add_argument("--batch-sizes", default="4,8,16,32")
    ap.add_argument("--cache-batch-size", type=int, default=8, help="judge batch size behind the cache")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    import torch

    torch.set_num_threads(args.threads)
    pairs = load_pairs(args.pairs, args.seed, args.corpus, args.claims)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or build_tiny(Path(tmp), args.corpus)
        sizes = [int(x) for x in args.batch_sizes.split(",") if x]
        judge = TransformersJudge(model, batch_size=max(sizes))
        judge.score(pairs[:8])  # warm-up
        result = {"model": str(args.model or "tiny (model init defaults)"), "pairs": len(pairs),
                  "threads": args.threads, "mean_prompt_tokens": round(
                      sum(len(judge.prompt_ids(c, a)) for c, a in pairs) / len(pairs), 1)}
        single = pairs[: args.one_by_one]
        result["pairs_per_s_one_by_one"] = rate(lambda: [judge.score([p]) for p in single], len(single))
        for b in sizes:
            judge.batch_size = b
            result[f"pairs_per_s_batch_{b}"] = rate(lambda: judge.score(pairs), len(pairs))
        judge.batch_size = args.cache_batch_size
        cached = CachedJudge(judge, JudgeCache(Path(tmp) / "cache"))
        result["cache_epoch1_pairs_per_s"] = rate(lambda: cached.score(pairs), len(pairs))
        result["cache_epoch1_hit_rate"] = cached.stats()["hit_rate"]
        cached.reset_stats()
        result["cache_epoch2_pairs_per_s"] = rate(lambda: cached.score(pairs), len(pairs))
        result["cache_epoch2_hit_rate"] = cached.stats()["hit_rate"]
        cached.cache.close()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["cache_epoch2_hit_rate"] == 1.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
