"""Sharded evaluation on Dask (flows/evaluate.py) against the serial stage, same claims, side by side.

The model sits behind the local OpenAI-compatible server of bench/eval_throughput.py (every chat completion
answered after --latency-ms; the agent searches --searches times, then reports). Three runs, each in a fresh
folder so no episode comes from a cache:

  serial   pipeline.evaluate_stage, evaluate.workers = 1 (one claim at a time)
  dask-1   the flow `biocheck-evaluate` on a LocalCluster of 1 worker process, --shards shards
  dask-2   the same on 2 worker processes

One claim in flight per shard (evaluate.workers = 1), so any speed-up comes from Dask. The flow's time is
end to end (planning, cluster start, worker imports, shards, the full pass that writes the results); the
shard phase alone, and its parallelism (the shard tasks' own seconds summed / the shard phase: how many ran
at once, net of the cluster's start-up and the workers' first imports), are reported too. Predictions (every field but the timing) and metrics/eval.json (but
seconds_*) must be identical across the three runs. A temporary Prefect server is started first
(prefect_test_harness), unless PREFECT_API_URL names one; MLflow is off unless --mlflow. Results: a table
and bench/results/eval_dask.json.

    .venv/bin/python bench/eval_dask.py [--claims 16] [--latency-ms 800] [--searches 2] [--shards 4]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "bench")]
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import yaml  # noqa: E402
from eval_throughput import build_index, fake_server, make_claims  # noqa: E402
from tests.helpers.eval_outputs import metrics, predictions  # noqa: E402

from biocheck.orchestration.config import DASK_ADDRESS_ENV  # noqa: E402

RESULTS = ROOT / "bench/results"


def write_project(workdir: Path, args: argparse.Namespace) -> None:
    """params.yaml (the repo's, pointed at this folder) and the claims as the prepared scifact test split."""
    search = build_index(args.corpus, workdir)
    claims = make_claims(args.claims)
    split = workdir / "prepared" / "scifact" / "test.jsonl"
    split.parent.mkdir(parents=True)
    split.write_text("".join(c.model_dump_json() + "\n" for c in claims))
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["data"]["out_dir"] = str(workdir / "prepared")
    params["evidence"].update(index_dir=str(search.index_dir), store=str(search.store))
    params["agent"].update(llm="openai:fake", max_searches=max(3, args.searches))
    params["reward"]["judge"] = None
    params["evaluate"].update(systems=args.systems, datasets=["scifact"], workers=1, limit=None,
                              bootstrap=args.bootstrap)
    for workers in (1, 2):
        params["orchestrate"].update(dask_address=None, dask_workers=workers, shards=args.shards)
        (workdir / f"params_w{workers}.yaml").write_text(yaml.safe_dump(params))


def prefect_api():
    """The server in PREFECT_API_URL, else a temporary one (started here, outside the timed runs)."""
    if os.environ.get("PREFECT_API_URL"):
        return contextlib.nullcontext()
    from prefect.testing.utilities import prefect_test_harness

    return prefect_test_harness(server_startup_timeout=120)


WARM = ("flows.evaluate", "openai", "biocheck.llm.openai_backend", "biocheck.evaluate.systems.agent_systems",
        "biocheck.evidence.search", "biocheck.data.prepare")  # what a shard imports on its first run


def _warm() -> None:
    import importlib

    for name in WARM:
        importlib.import_module(name)


@contextlib.contextmanager
def standing_clusters(workdir: Path):
    """--standing: a LocalCluster of 1 and one of 2 workers started (and their imports done) before the timed
    runs, which reach them by address (orchestrate.dask_address), as a long-lived cluster would be."""
    from distributed import Client, LocalCluster

    from biocheck.orchestration.dask import DASHBOARD

    with contextlib.ExitStack() as stack:
        for workers in (1, 2):
            cluster = stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                       dashboard_address=DASHBOARD))
            with Client(cluster) as client:
                client.run(_warm)
            params = yaml.safe_load((workdir / f"params_w{workers}.yaml").read_text())
            params["orchestrate"]["dask_address"] = cluster.scheduler_address
            (workdir / f"params_standing_w{workers}.yaml").write_text(yaml.safe_dump(params))
        yield


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claims", type=int, default=16)
    ap.add_argument("--latency-ms", type=float, default=800.0, help="server latency per chat completion")
    ap.add_argument("--searches", type=int, default=2, help="searches per agent episode (then the report)")
    ap.add_argument("--shards", type=int, default=4, help="orchestrate.shards")
    ap.add_argument("--systems", nargs="+", default=["base"], help="systems evaluated (all on the fake server)")
    ap.add_argument("--bootstrap", type=int, default=200, help="evaluate.bootstrap (resamples for the intervals)")
    ap.add_argument("--corpus", type=Path, default=ROOT / "data/prepared/corpus.jsonl",
                    help="prepared corpus to index (the tests' tiny corpus when missing)")
    ap.add_argument("--standing", action="store_true",
                    help="also run on already started clusters (1 and 2 workers, reached by address): the speed-up "
                         "without the cluster's start-up and the workers' first imports")
    ap.add_argument("--mlflow", action="store_true", help="log to MLflow as the stage does (off: timing only)")
    ap.add_argument("--json", type=Path, default=RESULTS / "eval_dask.json")
    args = ap.parse_args()

    if not args.mlflow:
        os.environ["BIOCHECK_TRACKING"] = "off"
    os.environ.pop(DASK_ADDRESS_ENV, None)  # the clusters the runs name, not one from the environment
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "loadavg_before": [round(x, 2) for x in os.getloadavg()]},
                    "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                    "runs": {}}
    episodes = args.claims * len(args.systems)
    cwd = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="eval-dask-") as tmp:
        workdir = Path(tmp)
        write_project(workdir, args)
        server = fake_server(args.latency_ms / 1000, args.searches)
        os.environ["OPENAI_BASE_URL"] = server.url
        os.environ.setdefault("OPENAI_API_KEY", "bench-no-secret")
        os.chdir(workdir)  # the flow, its Dask workers and the stage resolve the params' paths from here
        try:
            with prefect_api(), (standing_clusters(workdir) if args.standing else contextlib.nullcontext()):
                from flows.evaluate import evaluate_flow

                from biocheck.pipeline import evaluate_stage

                runs = {"serial": (1, lambda: evaluate_stage("params_w1.yaml", progress=False, out="serial"))}
                for kind in ("", "standing_") if args.standing else ("",):
                    for w in (1, 2):
                        name = f"dask-{w}" + (" (standing)" if kind else "")
                        runs[name] = (w, lambda p=f"params_{kind}w{w}.yaml", o=f"{kind}dask-{w}": evaluate_flow(p, out=o))
                for name, (workers, run) in runs.items():
                    before = len(server.requests)
                    t0 = time.perf_counter()
                    out = run()
                    wall = time.perf_counter() - t0
                    row = {"workers": workers, "seconds": round(wall, 2), "claims_per_s": round(episodes / wall, 2),
                           "requests": len(server.requests) - before}
                    if name != "serial":
                        seconds = out["seconds"]
                        row.update(out_dir=out["metrics"].split("/")[0], shards=out["shards"],
                                   shard_phase_s=seconds["shards"], collect_s=seconds["collect"],
                                   # the shard tasks' own seconds / the shard phase: how many ran at once
                                   parallelism=round(seconds["in_shards"] / seconds["shards"], 2))
                    result["runs"][name] = row
                    print(f"{name}: {row}", flush=True)
            serial = {"predictions": predictions(workdir / "serial"), "metrics": metrics(workdir / "serial")}
            same = {name: {"predictions": predictions(workdir / row["out_dir"]) == serial["predictions"],
                           "metrics": metrics(workdir / row["out_dir"]) == serial["metrics"]}
                    for name, row in result["runs"].items() if name != "serial"}
        finally:
            os.chdir(cwd)
            server.close()
    r = result["runs"]
    result["identical_to_serial"] = same
    result["speedup_1_to_2_workers"] = {
        "standing cluster" if kind else "cluster started by the flow": {
            "end_to_end": round(r[f"dask-1{kind}"]["seconds"] / r[f"dask-2{kind}"]["seconds"], 2),
            "shard_phase": round(r[f"dask-1{kind}"]["shard_phase_s"] / r[f"dask-2{kind}"]["shard_phase_s"], 2)}
        for kind in (("", " (standing)") if args.standing else ("",))}
    result["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")

    print(f"\n{args.claims} claims x {', '.join(args.systems)}, {args.latency_ms:g} ms per model turn, "
          f"{args.searches} searches + report per episode, {args.shards} shards")
    print("| run | Dask workers | seconds | claims/s | shard phase (s) | parallelism | same predictions & metrics "
          "as serial |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, row in r.items():
        ok = "(reference)" if name == "serial" else ("yes" if all(same[name].values()) else f"NO {same[name]}")
        print(f"| {name} | {row['workers'] if name != 'serial' else '- (in-process)'} | {row['seconds']} | "
              f"{row['claims_per_s']} | {row.get('shard_phase_s', '-')} | {row.get('parallelism', '-')} | {ok} |")
    for kind, x in result["speedup_1_to_2_workers"].items():
        print(f"speed-up 1 -> 2 workers, {kind}: {x['end_to_end']}x end to end, {x['shard_phase']}x shard phase")
    print(f"load average before / after: {result['machine']['loadavg_before']} / "
          f"{result['machine']['loadavg_after']}; written to {args.json}")
    return 0 if all(v for s in same.values() for v in s.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
