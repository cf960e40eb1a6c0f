"""Seconds per evaluation episode, old and new settings side by side.

    python bench/eval_profile.py --params profiles/smol.yaml --claims 8              # old vs baseline, A B A B
    python bench/eval_profile.py --compare baseline --claims 4 --model models/base

Runs `biocheck.pipeline.evaluate_stage` (the harness, the systems, the report scorer with its judge: what
`dvc repro evaluate` runs) for SYSTEMS on the first --claims claims of DATASETS into a scratch folder, once per
setting per round, each in its own process, in the order A B A B ... so drift on a noisy machine hits every
setting alike. The agent systems run --model (default the SFT warm start, models/sft: a model that calls the
search tool, as the trained one does). EQS is scored by the training judge (evaluate.eqs_judge: null), so the
EQS judge need not be built. Writes OUT (default bench/results/eval_profile.json, one entry per --label).

Settings: "baseline" is the params file as it is; "old" is the start of issue 32 (its params file, and the old
code path: one model turn at a time, evaluate.batch_turns false).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from grpo_profile import OLD_REV, apply  # noqa: E402  (the same settings machinery)

OUT = ROOT / "bench/results/eval_profile.json"
SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "old": {"rev": OLD_REV, "params": {"evaluate.batch_turns": False}},
    "bf16": {"params": {"agent.dtype": "bfloat16"}},  # with batching: the weights in bfloat16 as well
    "dynamic": {"params": {"agent.cache": "dynamic"}},  # transformers' KV cache that grows by concatenation
    "static": {"params": {"agent.cache": "static"}},  # a preallocated KV cache written in place
    "prefix": {"params": {"agent.cache": "prefix"}},  # the prompt prefix every turn shares, computed once
}


def run_one(params_path: Path, setting: str, model: str, systems: list[str], datasets: list[str],
            claims: int) -> dict:
    os.environ.setdefault("BIOCHECK_TRACKING", "off")
    from biocheck.params import load_params
    from biocheck.pipeline import evaluate_stage

    with tempfile.TemporaryDirectory(prefix="eval_profile_") as tmp:
        if SETTINGS[setting].get("rev"):
            rel = params_path.resolve().relative_to(ROOT)
            old = Path(tmp) / rel.name
            old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{SETTINGS[setting]['rev']}:{rel}"],
                                          check=True, stdout=subprocess.PIPE, text=True).stdout)
            params_path = old
        overrides = {**SETTINGS[setting].get("params", {}), "evaluate.eqs_judge": None}
        params = apply(load_params(params_path), overrides)
        t0 = time.perf_counter()
        r = evaluate_stage(params, progress=False, out=Path(tmp) / "eval", model=model, systems=systems,
                           datasets=datasets, limit=claims)
        wall = time.perf_counter() - t0
    episodes = sum(int(m.get("n", 0)) for per in r["metrics"].values() for m in per.values())
    return {"setting": setting, "overrides": overrides, "workers": params["evaluate"].get("workers"),
            "seconds": round(wall, 1), "episodes": episodes,
            "s_per_episode": round(wall / episodes, 2) if episodes else None,
            "accuracy": {s: {d: m.get("accuracy") for d, m in per.items()} for s, per in r["metrics"].items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--model", default="models/sft", help="the model the agent systems run (default models/sft)")
    ap.add_argument("--systems", nargs="+", default=["eg_grpo"], help="systems to run (default: the agent)")
    ap.add_argument("--datasets", nargs="+", default=["scifact"])
    ap.add_argument("--claims", type=int, default=8, help="first N claims per dataset")
    ap.add_argument("--compare", nargs="+", choices=sorted(SETTINGS), default=["old", "baseline"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--label", default=None)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.params, a.one, a.model, a.systems, a.datasets, a.claims)))
        return 0
    from biocheck.params import load_params

    runs: dict[str, list[dict]] = defaultdict(list)
    for r in range(a.rounds):
        for setting in a.compare:
            print(f"round {r + 1}/{a.rounds}: {setting}", file=sys.stderr, flush=True)
            cmd = [sys.executable, __file__, "--params", str(a.params), "--model", a.model, "--claims", str(a.claims),
                   "--systems", *a.systems, "--datasets", *a.datasets, "--one", setting]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            runs[setting].append(json.loads(out.strip().splitlines()[-1]))
            print(json.dumps({k: v for k, v in runs[setting][-1].items() if k != "overrides"}), file=sys.stderr)
    base = a.compare[0]
    med = {s: statistics.median(x["s_per_episode"] for x in runs[s]) for s in a.compare}
    entry = {"compare": a.compare, "rounds": a.rounds, "claims": a.claims, "systems": a.systems,
             "datasets": a.datasets, "model": a.model, "s_per_episode": med,
             f"speedup_vs_{base}": {s: round(med[base] / med[s], 2) for s in a.compare}, "runs": runs,
             "params": str(a.params), "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    label = a.label or f"{load_params(a.params).get('profile', 'params')}:{'-vs-'.join(a.compare)}"
    results = json.loads(a.out.read_text()) if a.out.is_file() else {}
    results[label] = entry
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
