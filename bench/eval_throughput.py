"""Evaluation throughput (claims/s) vs `workers`, through the real harness (evaluate.harness.run_system).

Two model set-ups, each side by side in one run:

  server        `openai:fake` behind a local OpenAI-compatible server (in this script) that answers every
                chat completion after --latency-ms (a stand-in for `vllm serve` or `transformers serve
                --continuous-batching`): the agent (`base`: --searches searches, then a report) and
                `no_retrieval` (one turn), workers 1/2/4/8. Target: speed-up >= 0.7 x workers.
  transformers  the in-process backend with a tiny Qwen3 (built like the tests' `tiny_model`, or --model),
                workers 1/2, median of --tf-repeats interleaved runs: one generate at a time (the backend holds
                a lock), so little gain is expected. One torch thread by default (--torch-threads).

Systems come from evaluate.systems.make_system, the search is the local index over --corpus (the tests'
five-abstract corpus when the prepared SciFact corpus is missing). Every run writes to a fresh folder, so no
episode is served from the cache. Results: a table, and bench/results/eval_throughput.json.

    .venv/bin/python bench/eval_throughput.py [--claims 32] [--latency-ms 200] [--workers 1 2 4 8]
    .venv/bin/python bench/eval_throughput.py --server-url http://127.0.0.1:8000/v1 --server-model MODEL
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.helpers.fake_openai import FakeOpenAI, assistant  # noqa: E402

from biocheck.agent.episode import AgentConfig  # noqa: E402
from biocheck.data.schema import ClaimRecord  # noqa: E402
from biocheck.evaluate.harness import make_scorer, run_system  # noqa: E402
from biocheck.evaluate.systems import make_system  # noqa: E402
from biocheck.evidence.search import SearchConfig  # noqa: E402
from biocheck.labels import Label  # noqa: E402

RESULTS = ROOT / "bench/results"
QUERIES = ["vitamin D AND fracture*", "statin* AND memory", "aspirin AND bleeding", "exercise AND depress*",
           "coffee AND arrhythmia"]
REPORT = """## Supporting evidence
- PMID: 101
  Quote: "Vitamin D supplementation reduced hip fractures in older adults."
  Context: a trial in older adults
## Refuting evidence
None
## Summary
Support reasons: a trial found fewer fractures.
Refutation reasons: none found.
Consensus and context check: one study, older adults.
Justification: direct evidence for the claim.
## Conclusion
SUPPORTED
"""
TEMPLATES = [("Vitamin D supplementation lowers fracture risk in group {i}.", Label.SUPPORTED),
             ("Statins cause memory loss in cohort {i}.", Label.REFUTED),
             ("Aspirin lowers cardiovascular mortality in trial {i}.", Label.REFUTED),
             ("Coffee causes arrhythmia in teenagers, variant {i}.", Label.NEI)]


def make_claims(n: int) -> list[ClaimRecord]:
    """`n` distinct SciFact-like test claims over the tests' corpus topics, labels cycling S/R/R/NEI."""
    return [ClaimRecord(id=str(i), dataset="scifact", split="test", claim=TEMPLATES[i % 4][0].format(i=i),
                        label=TEMPLATES[i % 4][1]) for i in range(n)]


def build_index(corpus: Path | None, workdir: Path) -> SearchConfig:
    """The local index + store over `corpus` (prepared corpus.jsonl), or over the tests' tiny corpus."""
    from biocheck.evidence.build import EvidenceConfig, build_evidence

    if corpus is None or not corpus.exists():
        from tests.helpers.builders import CORPUS

        corpus = workdir / "corpus.jsonl"
        corpus.write_text("".join(json.dumps({"id": str(d["doc_id"]), "title": d["title"], "abstract": d["abstract"],
                                              "structured": d["structured"]}) + "\n" for d in CORPUS))
    cfg = EvidenceConfig(corpus=corpus, index_dir=workdir / "index", store=workdir / "ev.sqlite",
                         metrics_path=None, progress=False)
    build_evidence(cfg)
    return SearchConfig(index_dir=cfg.index_dir, store=cfg.store)


def agent_turns(searches: int) -> list[dict]:
    """The agent's script: `searches` tool calls (one per turn), then the report."""
    return [{"tool_calls": [{"name": "search_pubmed", "arguments": {"query": QUERIES[k % len(QUERIES)]}}]}
            for k in range(searches)] + [{"content": REPORT}]


def fake_server(latency: float, searches: int) -> FakeOpenAI:
    """/v1/chat/completions after `latency` seconds, in a thread per request (concurrent, like a batching
    server whose per-request latency does not grow with load). With tools: turn k of the conversation is a
    search until `searches`, then the report; without tools (no_retrieval): the report, whose conclusion
    is the verdict."""

    def reply(body, _headers):
        time.sleep(latency)
        k = sum(1 for m in body["messages"] if m["role"] == "assistant")
        msg: dict = {"content": REPORT}
        if body.get("tools") and k < searches:
            msg = {"content": None, "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                "name": "search_pubmed", "arguments": json.dumps({"query": QUERIES[k % len(QUERIES)]})}}]}
        return 200, assistant(msg, usage={"prompt_tokens": 100, "completion_tokens": 20})

    return FakeOpenAI(reply, keep_alive=True)


def measure(name: str, llm: str, agent_cfg: AgentConfig, search: SearchConfig, claims: list[ClaimRecord],
            workers: list[int], workdir: Path, repeats: int = 1) -> dict:
    """claims/s of one system at each worker count (median of `repeats` runs, the worker counts interleaved
    so that a burst of load from other jobs does not land on one of them); each run in a fresh folder."""
    system = make_system(name, llm=llm, agent_cfg=agent_cfg, search_cfg=search)
    system.fingerprint()  # build it (model load, index open) outside the timed runs
    scorer = make_scorer(judge=None)  # EHR as the stage computes it; the judge (EQS) is timed in judge_throughput
    warm = ClaimRecord(id="warm-up", dataset="scifact", split="test", claim=claims[0].claim, label=claims[0].label)
    run_system(system, [warm], "scifact", Path(tempfile.mkdtemp(dir=workdir)), progress=False, scorer=scorer)
    walls: dict[int, list[float]] = {w: [] for w in workers}
    searches: dict[int, float] = {}
    tokens: dict[int, float] = {}
    for _ in range(repeats):
        for w in workers:
            out = Path(tempfile.mkdtemp(prefix=f"{name}-w{w}-", dir=workdir))
            t0 = time.perf_counter()
            preds = run_system(system, claims, "scifact", out, workers=w, progress=False, scorer=scorer)
            walls[w].append(time.perf_counter() - t0)
            errors = [p.error for p in preds if p.error]
            if errors:
                raise SystemExit(f"{name}: {len(errors)} claims failed, e.g. {errors[0]}")
            searches[w] = sum(p.searches for p in preds) / len(preds)
            tokens[w] = sum(p.tokens for p in preds) / len(preds)
    rows = {}
    for w in workers:
        wall = statistics.median(walls[w])
        rows[w] = {"seconds": round(wall, 3), "claims_per_s": round(len(claims) / wall, 2),
                   "runs_s": [round(x, 2) for x in walls[w]], "searches_per_claim": searches[w],
                   "tokens_per_claim": round(tokens[w], 1)}
    base = rows[workers[0]]["seconds"]
    for w, r in rows.items():
        r["speedup"] = round(base / r["seconds"], 2)
        r["efficiency"] = round(base / r["seconds"] / (w / workers[0]), 2)  # speed-up / ideal speed-up
    system.close()
    return rows


def tiny_model(workdir: Path) -> Path:
    """The tests' tiny Qwen3 (vocab 600, hidden 64, 2 layers), built into `workdir` (a few seconds)."""
    from tests.helpers.builders import build_tiny_model

    return build_tiny_model(workdir)


def table(title: str, rows: dict, target: float | None) -> str:
    lines = [f"\n{title}", "| workers | seconds (median) | claims/s | speed-up | efficiency | runs (s) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for w, r in rows.items():
        ok = "" if target is None or w == min(rows) else (" ok" if r["efficiency"] >= target else " BELOW")
        lines.append(f"| {w} | {r['seconds']} | {r['claims_per_s']} | {r['speedup']}x | {r['efficiency']}{ok} | {r['runs_s']} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=32, help="claims per run with the server (default 32)")
    ap.add_argument("--latency-ms", type=float, default=200.0, help="server latency per chat completion")
    ap.add_argument("--searches", type=int, default=2, help="searches per agent episode (then the report)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--server-url", help="a real OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1) instead of "
                    "the fake one; --latency-ms and --searches then do not apply")
    ap.add_argument("--server-model", default="fake", help="the model name sent to the server (with --server-url)")
    ap.add_argument("--systems", nargs="+", default=["no_retrieval", "base"], help="systems run against the server")
    ap.add_argument("--corpus", type=Path, default=ROOT / "data/prepared/corpus.jsonl",
                    help="prepared corpus to index (the tests' tiny corpus when missing)")
    ap.add_argument("--tf-claims", type=int, default=8, help="claims per run with the in-process tiny model (0: skip)")
    ap.add_argument("--tf-workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tf-repeats", type=int, default=3, help="runs per worker count in-process (median)")
    ap.add_argument("--torch-threads", type=int, default=1,
                    help="torch threads in-process (default 1: on a busy 2-core machine torch's default of one "
                         "thread per core swings 10x from run to run; 0 = torch's default)")
    ap.add_argument("--tf-max-new-tokens", type=int, default=64, help="tokens per turn for the tiny model")
    ap.add_argument("--model", type=Path, help="an existing model folder for the in-process run (else a tiny one)")
    ap.add_argument("--json", type=Path, default=RESULTS / "eval_throughput.json")
    ap.add_argument("--target", type=float, default=0.7, help="required speed-up per worker with the server")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "server": {}, "transformers": {},
                    "corpus_used": str(args.corpus) if args.corpus.exists() else "tests/helpers/builders.py CORPUS (5 abstracts)"}
    with tempfile.TemporaryDirectory(prefix="eval-throughput-") as tmp:
        workdir = Path(tmp)
        search = build_index(args.corpus, workdir)
        claims = make_claims(args.claims)
        agent_cfg = AgentConfig(max_searches=max(5, args.searches), max_new_tokens=256)
        # The fake server by default; --server-url runs the same systems against a real one instead (e.g.
        # `transformers serve MODEL --continuous-batching`), whose latency is then whatever the model takes.
        server = None if args.server_url else fake_server(args.latency_ms / 1000, args.searches)
        os.environ["OPENAI_BASE_URL"] = args.server_url or server.url
        os.environ.setdefault("OPENAI_API_KEY", "bench-no-secret")
        what = f"{args.server_url}, model {args.server_model}" if server is None else f"{args.latency_ms:g} ms per turn"
        try:
            for name in args.systems:
                result["server"][name] = measure(name, f"openai:{args.server_model}", agent_cfg, search, claims,
                                                 args.workers, workdir)
                print(table(f"server ({what}), {name}, {args.claims} claims", result["server"][name], args.target),
                      flush=True)
        finally:
            if server is not None:
                server.close()
                result["server_requests"] = len(server.requests)

        if args.tf_claims:
            import torch

            if args.torch_threads:
                torch.set_num_threads(args.torch_threads)
            model = args.model or tiny_model(workdir)
            tf_cfg = AgentConfig(max_searches=max(5, args.searches), max_new_tokens=args.tf_max_new_tokens)
            result["torch_threads"] = torch.get_num_threads()
            for name in args.systems:
                result["transformers"][name] = measure(name, f"transformers:{model}", tf_cfg, search,
                                                       make_claims(args.tf_claims), args.tf_workers, workdir,
                                                       repeats=args.tf_repeats)
                print(table(f"in-process transformers ({model.name}), {name}, {args.tf_claims} claims",
                            result["transformers"][name], None), flush=True)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average before / after: {result['machine']['loadavg_before']} / "
          f"{result['machine']['loadavg_after']}; written to {args.json}")
    met = all(r["efficiency"] >= args.target for rows in result["server"].values() for r in rows.values())
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
