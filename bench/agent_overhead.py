"""Agent overhead: scripted 5-search episodes over the local index (no model cost at all).

Measures, in one run: episodes per second; per-episode overhead beyond the searches themselves
(total - search time: graph, prompts, formatting, report parsing, trace building); and episodes/s
with 1, 2, 4 and 8 episodes in parallel (threads), without model cost and with a simulated model
server (--llm-latency-ms per turn). Target: overhead <= 20 ms per episode.

    .venv/bin/python bench/agent_overhead.py [--episodes 200] [--index data/evidence/index]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from biocheck.agent.episode import Agent, AgentConfig  # noqa: E402
from biocheck.evidence.search import SearchConfig  # noqa: E402
from biocheck.llm.scripted import ScriptedChat  # noqa: E402
from biocheck.wiring import make_search_tool  # noqa: E402

QUERIES = ['("vitamin D" OR cholecalciferol) AND fractur*', "aspirin AND (bleeding OR hemorrhage)",
           "statin* AND cognitive[tiab]", '"breast cancer"[tiab] AND (risk OR incidence)',
           "(exercise OR training) AND depress*"]
REPORT = ("## Supporting evidence\nNone\n## Refuting evidence\nNone\n## Summary\nSupport reasons: x\n"
          "Refutation reasons: y\nConsensus and context check: z\nJustification: w\n## Conclusion\n"
          "NOT ENOUGH INFORMATION\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, default=ROOT / "data/evidence/index")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--llm-latency-ms", type=float, default=20.0,
                    help="simulated model latency per turn for the parallel runs (an API/vLLM server)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()

    turns = [{"tool_calls": [{"name": "search_pubmed", "arguments": {"query": q}}]} for q in QUERIES]
    turns.append({"content": REPORT})
    tool = make_search_tool(SearchConfig(index_dir=args.index, max_results=5))
    agent = Agent(ScriptedChat(turns), tool, AgentConfig(llm="scripted:bench", max_searches=5))
    for _ in range(5):  # warm-up
        agent.run("Vitamin D supplements prevent hip fractures in older adults.")

    eps = [agent.run("Vitamin D supplements prevent hip fractures in older adults.") for _ in range(args.episodes)]
    assert all(e.searches == 5 for e in eps)
    totals = [e.timing["total_s"] * 1000 for e in eps]
    overheads = [(e.timing["total_s"] - e.timing["search_s"]) * 1000 for e in eps]
    q = statistics.quantiles(overheads, n=100)
    result = {
        "episodes": args.episodes,
        "episode_ms_p50": statistics.median(totals),
        "overhead_ms_p50": statistics.median(overheads),
        "overhead_ms_p99": q[98],
        "search_ms_per_episode_p50": statistics.median(e.timing["search_s"] * 1000 for e in eps),
        "episodes_per_s_1_thread": 1000 / statistics.mean(totals),
        "parallel": {},
    }
    # Parallel episodes: with no model cost (pure overhead, GIL-bound) and with a simulated model
    # server that takes --llm-latency-ms per turn (what threads are for).
    class SlowScripted(ScriptedChat):
        def chat(self, messages, tools):
            time.sleep(args.llm_latency_ms / 1000)
            return super().chat(messages, tools)

    slow = Agent(SlowScripted(turns), tool, AgentConfig(llm="scripted:bench", max_searches=5))
    for name, a, n in (("no_llm_cost", agent, args.episodes), (f"llm_{args.llm_latency_ms:g}ms_per_turn", slow, 48)):
        result["parallel"][name] = {}
        for workers in (1, 2, 4, 8):
            t0 = time.perf_counter()
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda _, a=a: a.run("Statins cause memory loss."), range(n)))
            result["parallel"][name][workers] = round(n / (time.perf_counter() - t0), 1)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["overhead_ms_p50"] <= 20 else 1


if __name__ == "__main__":
    raise SystemExit(main())
