"""Prefect flow `biocheck-evaluate`: `biocheck evaluate` with its claims in shards on Dask.

Each system's claims (per dataset) are cut into at most `orchestrate.shards` contiguous shards of at least
`evaluate.workers` claims (one batch; evaluate/shards.py); a sub-flow maps one task per shard over the Dask
task runner that `orchestrate:` names (a LocalCluster of `orchestrate.dask_workers` processes by default, an
existing cluster by address). A shard builds its system in the worker from the params (or reuses the one the
worker built for its previous shard) and caches its episodes as traces in the evaluation folder; then one task
runs the ordinary evaluation (pipeline.evaluate_stage) over every claim with the fingerprints the shards
reported, which finds every episode cached without building a system and writes predictions, metrics, plots,
gallery and MLflow runs as a serial run does: the same results, each episode run once. Workers of an existing
cluster must run in the project folder (same paths).

When no (system, dataset) has claims for more than one shard, there is nothing to run side by side that the
stage does not already batch, so the flow runs the evaluation in its own process (`ran: in-process`), without
starting a cluster.

The entrypoint of the on-demand `evaluate` deployment (parameters: systems, datasets, model name, limit,
out); standalone: `python flows/evaluate.py [params.yaml] [--systems a,b] [--datasets d] [--model NAME]
[--limit N] [--out DIR]` (a failure prints one line and exits 1).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from prefect import flow, task, unmapped
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.runtime import flow_run

from biocheck import tracking
from biocheck.aliases import EVAL_MODELS, SELECTED
from biocheck.evaluate.shards import Shard, one_plan, plan
from biocheck.evaluate.systems import Lazy
from biocheck.io import InputError
from biocheck.orchestration import entry
from biocheck.orchestration.artifacts import (
    METRICS_DESCRIPTION,
    METRICS_KEY,
    metric_rows,
    publish_summary,
    scores_lines,
)
from biocheck.orchestration.dask import task_runner
from biocheck.pipeline import evaluate_setup, evaluate_shard, evaluate_stage, orchestrate_config
from biocheck.wiring import params_of


# The harness keeps its own cache (traces), so Prefect's input cache is off for every task.
@task(name="evaluate-plan", cache_policy=NO_CACHE)
def plan_task(params: str, out: str | None, model: str | None, overrides: dict) -> dict:
    """Check everything (systems, datasets, model, claims) before any work; the shards and the metrics path."""
    setup = evaluate_setup(params, out=out, model=model, **overrides)
    shards = plan(list(setup.systems), setup.claims, orchestrate_config(params_of(params)).shards,
                  min_claims=setup.cfg.workers)  # a shard smaller than a batch only adds system builds
    return {"shards": shards, "in_process": one_plan(shards), "metrics": setup.cfg.metrics_path.as_posix(),
            "claims": {d: len(c) for d, c in setup.claims.items()}}


@task(name="evaluate-shard", cache_policy=NO_CACHE)
@entry.quiet_failures  # e.g. a model that cannot load: one line, and the flow re-raises that error
def shard_task(params: str, shard: Shard, out: str | None, model: str | None, overrides: dict, root: str,
               run: str | None = None) -> dict:
    # Runs on a Dask worker: params, models and the evaluation folder are paths relative to the project.
    if Path.cwd().resolve() != Path(root).resolve():
        raise InputError(f"{shard.name}: the Dask worker runs in {Path.cwd()}, the project is {root}; start "
                         "the workers in the project folder (the same paths on a shared file system).")
    return {"shard": shard.name, "system": shard.system,
            **evaluate_shard(params, shard, out=out, model=model, run=run, **overrides)}


@task(name="evaluate-collect", cache_policy=NO_CACHE)
def collect_task(params: str, out: str | None, model: str | None, overrides: dict,
                 fingerprints: dict[str, str] | None = None) -> dict:
    """The ordinary evaluation in this process; with the shards' fingerprints it finds their episodes without
    building a system. Also returns how many systems it built."""
    built = Lazy.builds
    result = evaluate_stage(params, progress=False, out=out, model=model, fingerprints=fingerprints, **overrides)
    return {**result, "builds": Lazy.builds - built}


def fingerprints_of(done: list[dict], systems: list[str]) -> dict[str, str]:
    """Each system's fingerprint as its shards reported it; a system whose shards disagree (its model or index
    changed during the run) is left out, so the full pass computes it itself."""
    found: dict[str, set[str]] = {}
    for row in done:
        found.setdefault(row["system"], set()).add(row["fingerprint"])
    return {s: next(iter(fps)) for s, fps in found.items() if s in systems and len(fps) == 1}


@flow(name="biocheck-evaluate-shards")
def shards_flow(params: str, shards: list[Shard], out: str | None, model: str | None, overrides: dict,
                root: str) -> list[dict]:
    """One task per shard, on the task runner the caller gives (`with_options`)."""
    with entry.redacted():  # secrets blanked in this run's log lines and in any error leaving it
        # the run's id: a worker reuses a system it built for this run's shards only
        return shard_task.map(unmapped(params), shards, unmapped(out), unmapped(model), unmapped(overrides),
                              unmapped(root), unmapped(flow_run.id)).result()


@flow(name="biocheck-evaluate", log_prints=True)
def evaluate_flow(params: str = "params.yaml", systems: list[str] | None = None, datasets: list[str] | None = None,
                  model: str | None = None, limit: int | None = None, out: str | None = None) -> dict:
    """Evaluate `systems` on `datasets` (default: evaluate.systems / evaluate.datasets), the eg_grpo system
    with `model` (selected, outcome_only, base, champion, a model folder or a spec; default selected), the first
    `limit` claims of each, every output under `out` (default: the DVC paths). Returns the metrics path, each
    system's accuracy and macro-F1 per dataset, how it ran (dask or in-process), its phases' seconds and its
    system builds."""
    # secrets blanked in this run's log lines and in any error leaving it; its MLflow runs tagged with this run
    with entry.redacted(), tracking.in_flow_run(flow_run.id):
        overrides = {k: v for k, v in (("systems", systems), ("datasets", datasets), ("limit", limit)) if v is not None}
        t0 = time.perf_counter()
        planned = plan_task(params, out, model, overrides)
        t1 = time.perf_counter()
        done, fingerprints = [], None
        if planned["in_process"]:
            print("one shard per system and dataset: evaluating in this process, no Dask cluster")
        else:
            # The runner comes from params, so it is set at call time (a deployment runs this flow as it is).
            runner = task_runner(orchestrate_config(params_of(params)))
            done = shards_flow.with_options(task_runner=runner)(params, planned["shards"], out, model, overrides,
                                                                str(Path.cwd()))
            failed = sum(r["errors"] for r in done)
            if failed:
                print(f"{failed} episode(s) failed in their shard; the full pass tries them once more")
            fingerprints = fingerprints_of(done, sorted({s.system for s in planned["shards"]}))
        t2 = time.perf_counter()
        result = collect_task(params, out, model, overrides, fingerprints)
        t3 = time.perf_counter()
        _publish(result, planned["metrics"], model)
        return {"metrics": planned["metrics"], "claims": planned["claims"], "shards": len(planned["shards"]),
                "ran": "in-process" if planned["in_process"] else "dask",
                # systems built (a model and an index loaded each): in the shards (summed over the workers), then
                # in the full pass
                "system_builds": {"shards": sum(r["builds"] for r in done), "collect": result["builds"]},
                "scores": {s: {d: {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"]} for d, m in by_d.items()}
                           for s, by_d in result["metrics"].items()},
                "skipped": result["skipped"],
                "seconds": {"plan": round(t1 - t0, 3), "shards": round(t2 - t1, 3), "collect": round(t3 - t2, 3),
                            "in_shards": round(sum(r["seconds"] for r in done), 3)}}  # summed over the shard tasks


def _publish(result: dict, metrics_path: str, model: str | None) -> None:
    """What the run shows in Prefect: the metric table (with intervals) and a summary with the headline and
    links to the MLflow runs."""
    create_table_artifact(table=metric_rows(result["metrics"]), key=METRICS_KEY, description=METRICS_DESCRIPTION)
    skipped = [f"Skipped: {step} ({why})." for step, why in (result.get("skipped") or {}).items()]
    publish_summary("evaluate-summary", "Evaluation", [
        f"Model of the eg_grpo system: `{model or SELECTED}`. Every number with its interval: `{metrics_path}`.",
        "", *scores_lines(result["metrics"]), "", *skipped])


class _Args(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 1, as every other failure
        raise InputError(f"{message} (see --help)")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def main(argv: list[str]) -> int:
    ap = _Args(prog="flows/evaluate.py", description="Evaluate in shards on Dask (the `evaluate` deployment).")
    ap.add_argument("params", nargs="?", default="params.yaml")
    ap.add_argument("--systems", type=_names, help="comma-separated systems [default: evaluate.systems]")
    ap.add_argument("--datasets", type=_names, help="comma-separated datasets [default: evaluate.datasets]")
    ap.add_argument("--model", help=f"the eg_grpo system's model: {', '.join(EVAL_MODELS)} (default {SELECTED}), "
                                    "a model folder or a spec KIND:REF")
    ap.add_argument("--limit", type=int, help="the first N claims of each dataset")
    ap.add_argument("--out", help="every output under this folder [default: the DVC paths]")

    def body() -> None:
        args = ap.parse_args(argv[1:])
        kwargs = {k: v for k, v in vars(args).items() if v is not None and k != "params"}
        overrides = {k: kwargs[k] for k in ("systems", "datasets", "limit") if k in kwargs}
        evaluate_setup(args.params, out=args.out, model=args.model, **overrides)  # one line before Prefect starts
        result = evaluate_flow(args.params, **kwargs)
        for system, by_dataset in result["scores"].items():
            for dataset, m in by_dataset.items():
                print(f"{system}/{dataset}: accuracy {m['accuracy']:.3f}, macro-F1 {m['macro_f1']:.3f}",
                      file=sys.stderr)
        print(f"metrics: {result['metrics']}", file=sys.stderr)

    return entry.run(body, interrupted="interrupted; the episodes run so far are cached, and a rerun resumes "
                                       "from them")


if __name__ == "__main__":
    sys.exit(main(sys.argv))
