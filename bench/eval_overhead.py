"""The evaluation harness's own cost per claim: everything but the model and the search.

Systems from evaluate.systems.make_system with an instant model (`scripted:`, a replayed script) and the
local index over the tests' five abstracts (searches take well under a millisecond, and their time, like
the model's, is subtracted from the wall time using the episodes' own timing). Each configuration runs
--claims claims in a fresh folder, --repeats times; the median wall time per claim is reported:

  system.run         the system alone (agent graph, prompts, result text, report parsing, the Episode)
  harness            run_system, no scorer, no progress bar (+ run key, trace JSON written atomically,
                     thread pool, Prediction lines, predictions file)
  + scoring          with the stage's scorer without a judge (EHR: quote matching against the ledger)
  + progress bar     the tqdm bar the stage shows (drawn to /dev/null here)
  cached rerun       the same folder again: every trace read back and checked instead of run

Overhead = the full configuration (the last but one) minus model and search time. Target: <= 20 ms per
claim. A breakdown of single steps (trace write, trace read, scoring, fingerprint) follows the table.

    .venv/bin/python bench/eval_overhead.py [--claims 100] [--repeats 5] [--searches 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_throughput import REPORT, agent_turns, build_index, make_claims  # noqa: E402

from biocheck.agent.episode import AgentConfig, Episode  # noqa: E402
from biocheck.agent.run import write_trace  # noqa: E402
from biocheck.evaluate.harness import make_scorer, run_system  # noqa: E402
from biocheck.evaluate.systems import make_system  # noqa: E402

RESULTS = ROOT / "bench/results"


def timed(fn, n: int) -> float:
    """Median seconds per call of `fn` over n calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_once(system, claims, workdir: Path, scorer, progress: bool, out: Path | None = None) -> tuple[float, Path]:
    out = out or Path(tempfile.mkdtemp(dir=workdir))
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):  # tqdm writes to sys.stderr
        t0 = time.perf_counter()
        run_system(system, claims, "scifact", out, workers=1, progress=progress, scorer=scorer)
        return time.perf_counter() - t0, out


def measure(name: str, llm: str, search, claims, repeats: int, workdir: Path) -> dict:
    system = make_system(name, llm=llm, agent_cfg=AgentConfig(max_searches=5), search_cfg=search)
    system.fingerprint()  # built (index opened, prompts hashed) outside the timings: once per system, not per claim
    scorer = make_scorer(judge=None)
    n = len(claims)
    run_system(system, claims[:5], "scifact", Path(tempfile.mkdtemp(dir=workdir)), progress=False)  # warm-up

    runs: dict[str, list[float]] = {k: [] for k in ("system.run", "harness", "+ scoring", "+ progress bar",
                                                    "cached rerun")}
    model_search: list[float] = []
    for _ in range(repeats):  # interleaved, so a burst of load from other jobs hits every configuration alike
        t0 = time.perf_counter()
        eps = [system.run(c) for c in claims]
        runs["system.run"].append((time.perf_counter() - t0) / n)
        model_search.append(sum(e.timing.get("llm_s", 0.0) + e.timing.get("search_s", 0.0) for e in eps) / n)
        runs["harness"].append(run_once(system, claims, workdir, None, False)[0] / n)
        runs["+ scoring"].append(run_once(system, claims, workdir, scorer, False)[0] / n)
        wall, out = run_once(system, claims, workdir, scorer, True)
        runs["+ progress bar"].append(wall / n)
        runs["cached rerun"].append(run_once(system, claims, workdir, scorer, True, out)[0] / n)

    ms = {k: round(statistics.median(v) * 1000, 3) for k, v in runs.items()}
    ms_model_search = round(statistics.median(model_search) * 1000, 3)
    ep: Episode = eps[0]
    folder = Path(tempfile.mkdtemp(dir=workdir))
    trace = folder / "t.json"
    write_trace(ep, trace)
    fresh = iter(range(10**6))  # a new file each call, as in the harness (one trace per claim)
    steps = {  # single steps, median of 50 calls each (ms)
        "write_trace": timed(lambda: write_trace(ep, folder / f"{next(fresh)}.json"), 50),
        "read_trace (Episode.model_validate_json)": timed(
            lambda: Episode.model_validate_json(trace.read_text(encoding="utf-8")), 50),
        "score one episode (EHR, no judge)": timed(lambda: scorer([ep]), 50),
        "system.fingerprint()": timed(system.fingerprint, 50),
    }
    result = {"claims": n, "repeats": repeats, "per_claim_ms": ms, "model_and_search_ms": ms_model_search,
              "overhead_ms": round(ms["+ progress bar"] - ms_model_search, 3),
              "searches_per_claim": statistics.fmean(e.searches for e in eps),
              "trace_kb": round(trace.stat().st_size / 1024, 1),
              "steps_ms": {k: round(v * 1000, 3) for k, v in steps.items()}}
    system.close()
    return result


def table(name: str, r: dict, target: float) -> str:
    ms = r["per_claim_ms"]
    lines = [f"\n{name}: {r['claims']} claims x {r['repeats']} repeats, {r['searches_per_claim']:g} searches per "
             f"claim, trace {r['trace_kb']} KB", "| configuration | ms per claim (median) | added |", "| --- | --- | --- |"]
    prev = None
    for k, v in ms.items():
        added = "" if prev is None or k == "cached rerun" else f"{v - prev:+.3f}"
        lines.append(f"| {k} | {v} | {added} |")
        prev = v if k != "cached rerun" else prev
    verdict = "ok" if r["overhead_ms"] <= target else "OVER TARGET"
    lines.append(f"| model + search (scripted, local index) | {r['model_and_search_ms']} | |")
    lines.append(f"| **overhead** (full harness - model - search) | **{r['overhead_ms']}** | target <= {target:g}: "
                 f"{verdict} |")
    lines.append("single steps (ms, median of 50): "
                 + "; ".join(f"{k} {v}" for k, v in r["steps_ms"].items()))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=100, help="claims per run (default 100)")
    ap.add_argument("--repeats", type=int, default=5, help="runs per configuration; the median is reported")
    ap.add_argument("--searches", type=int, default=5, help="searches per agent episode, then the report")
    ap.add_argument("--systems", nargs="+", default=["base", "no_retrieval"])
    ap.add_argument("--corpus", type=Path, default=ROOT / "data/prepared/corpus.jsonl",
                    help="prepared corpus to index (the tests' tiny corpus when missing)")
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--json", type=Path, default=RESULTS / "eval_overhead.json")
    args = ap.parse_args()

    result: dict = {"loadavg_before": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "systems": {},
                    "corpus_used": str(args.corpus) if args.corpus.exists() else "tests/helpers/builders.py CORPUS (5 abstracts)"}
    with tempfile.TemporaryDirectory(prefix="eval-overhead-") as tmp:
        workdir = Path(tmp)
        search = build_index(args.corpus, workdir)
        claims = make_claims(args.claims)
        for name in args.systems:
            script = workdir / f"{name}.json"  # an instant model: the agent's searches then the report; a verdict
            script.write_text(json.dumps(agent_turns(args.searches) if name != "no_retrieval"
                                         else [{"content": REPORT}]))
            result["systems"][name] = measure(name, f"scripted:{script}", search, claims, args.repeats, workdir)
            print(table(name, result["systems"][name], args.target_ms), flush=True)
    result["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nload average before / after: {result['loadavg_before']} / {result['loadavg_after']}; "
          f"written to {args.json}")
    return 0 if all(r["overhead_ms"] <= args.target_ms for r in result["systems"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
