"""The on-demand `evaluate` flow (flows/evaluate.py) against the DVC `evaluate` stage's function, side by side
in one run, on a project that has the quickstart's outputs (data/, models/): the issue's case, where the flow
took about 5x the stage.

Run from the project's root (or give --project). Two runs, each writing under a fresh folder of its own, so no
episode comes from a cache:

  stage   pipeline.evaluate_stage (what `dvc repro evaluate` runs), every system of evaluate.systems
  flow    the flow `biocheck-evaluate` with the same systems and claims (orchestrate: of params.yaml)

A warm-up first (the stage on one claim per dataset, in a folder of its own, untimed) does the imports and
the first model loads, which would otherwise go to whichever timed run came first. A temporary Prefect
server is started before both (prefect_test_harness, as a deployment's worker finds one
running), unless PREFECT_API_URL names one; its start-up is reported apart. The flow's own phases (plan,
shards, collect), how it ran them and how many systems (model + index) it built come from its result. Each
run's CPU seconds (this process and the child processes that ended in it: Dask's workers) are reported too,
as the machine may be shared: the wall-clock ratio moves with the load, the CPU seconds much less. Predictions (every field but the timing) and
the metrics (but seconds_*) must be identical. MLflow is off unless --mlflow. Results: a table and
bench/results/eval_flow_vs_stage.json.

    cd <quickstart project> && BIOCHECK_DATA_MIRROR=... python <repo>/bench/eval_flow_vs_stage.py
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

RESULTS = ROOT / "bench/results"
TIMING = ("seconds", "timing", "started_at")


def without_timing(x):
    if isinstance(x, dict):
        return {k: without_timing(v) for k, v in x.items() if not any(k.startswith(t) for t in TIMING)}
    if isinstance(x, list):
        return [without_timing(v) for v in x]
    return x


def outputs(out: Path) -> dict:
    """Every predictions file under `out` (path -> its rows) and the metrics, without timing."""
    preds = {p.relative_to(out).as_posix(): [without_timing(json.loads(line)) for line in p.read_text().splitlines()]
             for p in sorted((out / "predictions").rglob("*.jsonl"))}
    return {"predictions": preds, "metrics": without_timing(json.loads((out / "eval.json").read_text()))}


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have ended."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--project", type=Path, default=Path.cwd(), help="a project with the quickstart's outputs")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--out", default="runs/bench-eval-flow", help="both runs write under this folder (replaced)")
    ap.add_argument("--mlflow", action="store_true", help="log to MLflow as the stage does (off: timing only)")
    ap.add_argument("--json", type=Path, default=RESULTS / "eval_flow_vs_stage.json")
    args = ap.parse_args()

    if not args.mlflow:
        os.environ["BIOCHECK_TRACKING"] = "off"
    os.chdir(args.project)  # the flow, its Dask workers and the stage resolve the params' paths from here
    base = Path(args.out)
    if base.exists():
        shutil.rmtree(base)
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                    "settings": {"project": str(args.project.resolve()), "params": args.params,
                                 "mlflow": args.mlflow}, "runs": {}}
    harness = contextlib.nullcontext()
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.testing.utilities import prefect_test_harness

        harness = prefect_test_harness(server_startup_timeout=120)
    t0 = time.perf_counter()
    with harness:
        result["prefect_server_start_s"] = round(time.perf_counter() - t0, 2)
        from flows.evaluate import evaluate_flow

        from biocheck.evaluate.systems import Lazy
        from biocheck.pipeline import evaluate_stage

        def builds() -> int | None:  # systems built in this process (None: a BioCheck that does not count them)
            return getattr(Lazy, "builds", None)

        t0 = time.perf_counter()
        evaluate_stage(args.params, progress=False, out=base / "warm-up", limit=1)
        result["warm_up_s"] = round(time.perf_counter() - t0, 2)
        t0, c0, b0 = time.perf_counter(), cpu_seconds(), builds()
        evaluate_stage(args.params, progress=False, out=base / "stage")
        result["runs"]["stage"] = {"seconds": round(time.perf_counter() - t0, 2), "cpu_s": round(cpu_seconds() - c0, 1),
                                   "system_builds": None if b0 is None else builds() - b0}
        print(f"stage: {result['runs']['stage']}", flush=True)
        t0, c0 = time.perf_counter(), cpu_seconds()
        flow = evaluate_flow(args.params, out=(base / "flow").as_posix())
        row = {"seconds": round(time.perf_counter() - t0, 2), "cpu_s": round(cpu_seconds() - c0, 1),
               "shards": flow["shards"], "phases_s": flow["seconds"]}
        row.update({k: flow[k] for k in ("ran", "system_builds") if k in flow})
        result["runs"]["flow"] = row
        print(f"flow: {row}", flush=True)
    stage, flow_out = outputs(base / "stage"), outputs(base / "flow")
    result["identical"] = {k: stage[k] == flow_out[k] for k in stage}
    result["ratio_flow_to_stage"] = round(result["runs"]["flow"]["seconds"] / result["runs"]["stage"]["seconds"], 2)
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if all(result["identical"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
