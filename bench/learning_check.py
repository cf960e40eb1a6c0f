"""Learning check (quickstart): does EG-GRPO improve the validation reward over its SFT start?

For each seed and reward variant, runs `biocheck train` (SFT warm start + GRPO, the quickstart's
params) into bench/runs/<variant>-s<seed>, selects the best checkpoint by validation reward, and
reports side by side: the start's validation reward (step 0), the selected one, and the selected
checkpoint's R_evidence and EHR (R_hallucination). Writes a JSON summary and a PNG of the
validation-reward curves. Target: mean(selected - start) > the seed-to-seed spread of the start.

    .venv/bin/python bench/learning_check.py [--seeds 0 1 2] [--variants eg_grpo outcome_only]
      [--max-steps N] [--out bench/results/learning_check.json]
(needs the quickstart's prepared data, index and models/base: `dvc repro model evidence`)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("BIOCHECK_TRACKING", "off")  # one MLflow run per training would drown the UI
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from biocheck.pipeline import load_params, train_stage  # noqa: E402
from biocheck.train.select import checkpoint_table, choose  # noqa: E402


def run(params: dict, variant: str, seed: int, out: Path, max_steps: int | None) -> dict:
    params = json.loads(json.dumps(params))
    params["reward"]["variant"] = variant
    overrides = {"seed": seed, "out_dir": str(out), "metrics_path": None}  # leave the pipeline's metrics alone
    if max_steps:
        overrides["max_steps"] = max_steps
    t0 = time.perf_counter()
    stats = train_stage(params, progress=False, **overrides)
    rows, history = checkpoint_table(out)
    best = choose(rows)
    curve = [(h["step"], h["eval_reward"]) for h in history if "eval_reward" in h]
    start = next(r for s, r in curve if s == 0)
    return {"variant": variant, "seed": seed, "start": start, "selected": best["eval_reward"],
            "selected_step": best["step"], "gain": best["eval_reward"] - start,
            "selected_components": {k: best.get(k) for k in ("outcome", "search", "evidence", "hallucination")},
            "start_components": {k.removeprefix("eval_rewards/").removesuffix("/mean"): v
                                 for h in history if h.get("step") == 0 and "eval_reward" in h
                                 for k, v in h.items() if k.startswith("eval_rewards/") and k.endswith("/mean")},
            "curve": curve, "seconds": round(time.perf_counter() - t0, 1), "sft": stats.get("sft", {})}


def plot(results: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        steps, rewards = zip(*r["curve"], strict=True)
        ax.plot(steps, rewards, marker="o", ls="-" if r["variant"] == "eg_grpo" else "--",
                label=f"{r['variant']} seed {r['seed']}")
    ax.set_xlabel("GRPO step (0 = SFT start)")
    ax.set_ylabel("validation reward (the variant's own total)")
    ax.set_title("Quickstart learning check (tiny model, CPU)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="+", default=["eg_grpo", "outcome_only"])
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--runs", type=Path, default=ROOT / "bench" / "runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_check.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params(args.params)
    results = []
    for variant in args.variants:
        for seed in args.seeds:
            r = run(params, variant, seed, args.runs / f"{variant}-s{seed}", args.max_steps)
            print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)
            results.append(r)
    summary = {}
    for variant in args.variants:
        rs = [r for r in results if r["variant"] == variant]
        starts, gains = [r["start"] for r in rs], [r["gain"] for r in rs]
        summary[variant] = {
            "start_mean": statistics.mean(starts), "selected_mean": statistics.mean(r["selected"] for r in rs),
            "gain_mean": statistics.mean(gains),
            "start_spread": max(starts) - min(starts), "gain_min": min(gains),
            "target_met": statistics.mean(gains) > (max(starts) - min(starts)),
            "selected_evidence_mean": statistics.mean(r["selected_components"]["evidence"] or 0 for r in rs),
            "selected_ehr_mean": statistics.mean(r["selected_components"]["hallucination"] or 0 for r in rs),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "runs": results}, indent=2) + "\n")
    plot(results, args.out.with_suffix(".png"))
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
