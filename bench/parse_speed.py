"""Report parser speed: typical reports, hostile inputs, and growth with the text's size.

`parse_report` runs on every episode (inference, training rewards, evaluation): a typical report
should cost about a millisecond, small next to a model turn, and no input more than linear time. The test suite
checks linearity as a ratio (tests/agent/report/test_parse.py); the absolute numbers live here.

    .venv/bin/python bench/parse_speed.py [--calls 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from biocheck.agent.report.parse import parse_report  # noqa: E402
from biocheck.agent.report.schema import EvidenceItem, Report, Summary  # noqa: E402
from biocheck.agent.report.writer import format_report  # noqa: E402
from biocheck.labels import Label  # noqa: E402

WORDS = ["vitamin", "D", "supplementation", "reduced", "hip", "fractures", "in", "older", "adults", "(95%", "CI",
         "0.70-0.91)", "no", "effect", "on", "falls;", "the", "“high-dose”", "group", "had", "fewer", "events,",
         "p<0.05,", "β-blockers", "≥65", "μg/day"]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def report(rng: random.Random, items: int) -> Report:
    def evidence() -> list[EvidenceItem]:
        return [EvidenceItem(pmid=str(rng.randrange(10**7, 10**8)), quote=sentence(rng, 25), context=sentence(rng, 12))
                for _ in range(items)]

    return Report(supporting=evidence(), refuting=evidence(),
                  summary=Summary(**{k: sentence(rng, 30) for k in Summary.model_fields}), conclusion=Label.SUPPORTED)


def per_call_ms(text: str, calls: int) -> dict[str, float]:
    seconds = []
    for _ in range(calls):
        t0 = time.perf_counter()
        parse_report(text)
        seconds.append(time.perf_counter() - t0)
    ms = sorted(s * 1000 for s in seconds)
    return {"chars": len(text), "p50_ms": round(statistics.median(ms), 3), "p99_ms": round(ms[int(0.99 * len(ms))], 3)}


def best_seconds(text: str, repeats: int = 3, collect: bool = True) -> float:
    """Least wall time of `repeats` parses; collect=False turns the garbage collector off meanwhile."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        if not collect:
            gc.disable()
        t0 = time.perf_counter()
        parse_report(text)
        best = min(best, time.perf_counter() - t0)
        gc.enable()
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000, help="parses per typical-report measurement")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    rng = random.Random(13)

    typical = format_report(report(rng, 3))  # 3 supporting + 3 refuting items: a usual final answer
    # the same report as models often write it: bold headings and field labels, curly quotes
    messy = re.sub(r"^## (.+)$", r"**\1**", typical, flags=re.M)
    messy = re.sub(r'Quote: "(.*)"$', r"- **Quote:** “\1”", messy, flags=re.M).replace("Context:", "- **Context:**")
    assert parse_report(messy).report == parse_report(typical).report
    as_json = "```json\n" + report(rng, 3).model_dump_json(indent=2) + "\n```"
    result: dict = {"typical": {}, "hostile_s": {}, "growth": []}
    for name, text in (("canonical, 6 items", typical), ("bold headings, curly quotes", messy),
                       ("JSON in a fence", as_json), ("canonical, 50 items", format_report(report(rng, 25)))):
        parse_report(text)  # warm-up
        result["typical"][name] = per_call_ms(text, args.calls)

    hostile = {"'## ' x 10,000": "## " * 10_000,
               "100k random code points": "".join(chr(rng.randrange(32, 0x2FFF)) for _ in range(100_000)),
               "one 100k-character line": "Conclusion: " + "x" * 100_000}
    for name, text in hostile.items():
        result["hostile_s"][name] = round(best_seconds(text), 4)

    for n in (2_500, 10_000, 50_000):  # unclosed quotes: the parser's worst case per line
        text = "## Supporting evidence\n" + '- PMID: 1\n  Quote: "x\n' * n
        s, s_no_gc = best_seconds(text), best_seconds(text, collect=False)
        result["growth"].append({"items": n, "lines": 2 * n + 1, "seconds": round(s, 4),
                                 "us_per_item": round(s / n * 1e6, 2), "us_per_item_gc_off": round(s_no_gc / n * 1e6, 2)})
    # per-item cost at 50k items / at 2.5k items: 1.0 = perfectly linear, 20 = quadratic
    per_item = [g["us_per_item_gc_off"] for g in result["growth"]]
    result["growth_ratio_50k_vs_2500"] = round(per_item[-1] / per_item[0], 2)

    print(json.dumps(result, indent=2, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return 0 if result["growth_ratio_50k_vs_2500"] < 2 else 1


if __name__ == "__main__":
    raise SystemExit(main())
