"""Learning check: does EG-GRPO learn, and does it move evidence the way the paper says (EHR down, EQS up)?

For the comparison itself (each variant over several seeds from one shared start, one answer per metric with a
two-level bootstrap over seeds and claims, resumable as DVC stages) use `biocheck study run` (docs/evaluation.md,
"Running a study"); this script is the exploratory check (KL coefficients, per-run curves, paired tests per seed).

Training: for each reward variant x KL coefficient (beta) x seed, `train_stage` (the pipeline's own training:
SFT warm start when the profile has one, then GRPO) into RUNS/<variant>-b<beta>-s<seed> (a rerun resumes,
a finished run is reused), and the best checkpoint by validation reward is chosen as `biocheck select`
does. `--pipeline` adds the pipeline's own runs (`dvc repro`: models/checkpoints, _outcome_only) without
training them again. Reported per run: the start's validation reward (step 0), the selected one, the gain.

Evaluation (`--evaluate DATASET ...`): every selected checkpoint, the SFT start and the base model run as
the BioCheck agent (the `eg_grpo` system of the evaluation harness: same tool, same prompts, same scorer)
on the claims of those datasets -- `scifact` and `healthfc` (test), or `scifact_val` (SciFact val: the
claims that selected the checkpoints, labelled "selection claims", never evidence for the method) -- with
every headline metric of the evaluation (docs/evaluation.md: accuracy, 2-way or 3-way macro-F1, parse /
citing / grounded rates, EHR over citing reports, micro-EHR, EQS overall and per side by the EQS judge,
SciFact rationale F1; each with its interval and n) and paired tests by claim id: each GRPO run against
the other variant's run of the same seed, each against the SFT start, and the SFT start against the base.

    .venv/bin/python bench/learning_check.py --params profiles/smol.yaml --pipeline --variants eg_grpo \
        --betas 0.04 --seeds 0 --evaluate scifact_val scifact [--limit N]
    (quickstart, training only: --seeds 0 1 2 --variants eg_grpo outcome_only)
Needs the profile's data, index, base model and judge first: `dvc repro judge evidence`.
Writes OUT (.json, .md table, .png curves); runs go to bench/runs/ (git-ignored).
"""

from __future__ import annotations

import argparse
import copy
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

from biocheck.evaluate.headline import COLUMNS  # noqa: E402
from biocheck.io import InputError  # noqa: E402
from biocheck.llm.load import is_model_dir  # noqa: E402
from biocheck.params import load_params  # noqa: E402
from biocheck.pipeline import train_config, train_setup, train_stage  # noqa: E402
from biocheck.train.select import checkpoint_table, choose  # noqa: E402

METRICS = tuple(k for k, _, _ in COLUMNS)  # every headline metric, in the evaluation's order


def summarise(name: str, variant: str, beta: float, seed: int, out: Path, seconds: float | None,
              sft_dir: Path | None = None) -> dict:
    """One training run's curve and selected checkpoint (as `biocheck select` chooses it); `sft_dir`: its
    warm start (default: `sft` in the run's folder)."""
    sft_dir = out / "sft" if sft_dir is None else sft_dir
    rows, history = checkpoint_table(out)
    best = choose(rows)
    curve = [(h["step"], h["eval_reward"]) for h in history if "eval_reward" in h]
    start = next((r for s, r in curve if s == 0), None)
    return {"name": name, "variant": variant, "beta": beta, "seed": seed, "start": start,
            "selected": best["eval_reward"], "selected_step": best["step"], "checkpoint": best["checkpoint"],
            "gain": None if start is None else best["eval_reward"] - start,
            "selected_components": {k: best.get(k) for k in ("outcome", "search", "evidence", "hallucination")},
            "curve": curve, "seconds": seconds, "sft_dir": str(sft_dir) if is_model_dir(sft_dir) else None}


def train_run(params: dict, variant: str, beta: float, seed: int, out: Path, max_steps: int | None,
              start_from: Path | None = None, start_eval: bool = True) -> dict:
    params = copy.deepcopy(params)
    params["reward"]["variant"] = variant
    overrides = {"seed": seed, "beta": beta, "out_dir": str(out)}
    # in the params, not an override: an override of None means "not given" and would leave the pipeline's
    # metrics/train.json as the file to write
    params["train"]["metrics_path"] = None
    # each run's own warm start (its seed), in its folder: never the pipeline's shared models/sft
    params["train"]["sft"] = {**(params["train"].get("sft") or {}), "out_dir": str(out / "sft")}
    if max_steps:
        overrides["max_steps"] = max_steps
    if start_from:  # GRPO from a given model, e.g. the pipeline's own SFT warm start: the same start, no second SFT
        params["model"]["out_dir"] = str(start_from)
        params["train"]["sft"] = {**(params["train"].get("sft") or {}), "enabled": False}
    if not start_eval:
        overrides["eval_on_start"] = False
    t0 = time.perf_counter()
    train_stage(params, progress=False, **overrides)
    return summarise(out.name, variant, beta, seed, out, round(time.perf_counter() - t0, 1))


def pipeline_runs(params: dict) -> list[dict]:
    """The runs `dvc repro` made (one per variant, the params' own beta and seed), as they are on disk."""
    cfg = train_config(params)
    out = []
    for variant in ("eg_grpo", "outcome_only"):
        ckpt = train_setup(params, variant=variant).train.out_dir
        if not ckpt.is_dir():
            continue
        try:
            out.append(summarise(f"pipeline-{variant}", variant, cfg.beta, cfg.seed, ckpt, None,
                                 sft_dir=Path(cfg.sft["out_dir"]) if cfg.sft.get("enabled", True) else ckpt / "sft"))
        except InputError as e:  # a run stopped before its first checkpoint: nothing to report for it
            print(f"--pipeline: {variant} skipped: {e}", file=sys.stderr)
    if not out:
        raise SystemExit("--pipeline: no training output (models/checkpoints*); run `dvc repro train` first")
    return out


def evaluate(params: dict, models: dict[str, str], datasets: list[str], limit: int | None, out: Path) -> dict:
    """Each model as the BioCheck agent on `datasets`; {model name: {dataset: metrics}} (traces cached in out)."""
    from biocheck.pipeline import evaluate_stage

    results = {}
    for name, model in models.items():
        t0 = time.perf_counter()
        r = evaluate_stage(params, progress=False, out=out / name, model=model, systems=["eg_grpo"],
                           datasets=datasets, limit=limit)
        results[name] = {d: _numbers(m) for d, m in r["metrics"]["eg_grpo"].items()}
        print(json.dumps({"model": name, "seconds": round(time.perf_counter() - t0, 1),
                          **{d: {k: m[k] for k in METRICS} for d, m in results[name].items()}}), flush=True)
    return results


def comparisons(runs: list[dict], evals: dict) -> list[tuple[str, str]]:
    """(reference, other) model pairs the paired tests compare: each EG-GRPO run against the outcome-only run
    of the same seed and beta, each GRPO run against the SFT start, and the SFT start against the base."""
    names = set(evals)
    pairs = [(a["name"], b["name"]) for a in runs for b in runs if a["variant"] == "eg_grpo"
             and b["variant"] == "outcome_only" and (a["seed"], a["beta"]) == (b["seed"], b["beta"])]
    pairs += [(r["name"], "sft start") for r in runs]
    pairs.append(("sft start", "base"))
    return [(a, b) for a, b in pairs if a in names and b in names]


def paired(evals: dict, runs: list[dict], out: Path, datasets: list[str], n_resamples: int, seed: int) -> dict:
    """{dataset: {"<reference> vs <other>": compare.paired_tests row}} from the models' own predictions,
    paired by claim id."""
    from biocheck.evaluate.compare import paired_tests
    from biocheck.evaluate.harness import predictions_path
    from biocheck.evaluate.systems.base import Prediction

    def load(name: str, dataset: str) -> list[Prediction]:
        path = predictions_path(out / name, "eg_grpo", dataset)
        return [Prediction.model_validate_json(line).model_copy(update={"system": name})
                for line in path.read_text().splitlines() if line.strip()]

    result: dict = {}
    for d in datasets:
        for a, b in comparisons(runs, evals):
            tests = paired_tests({a: load(a, d), b: load(b, d)}, reference=a, n_resamples=n_resamples, seed=seed)
            result.setdefault(d, {})[f"{a} vs {b}"] = tests[b]
    return result


def _numbers(m: dict) -> dict:
    keep = ("n", "label_set", "searches", "eqs_reward_judge", "rationale", "about", *METRICS,
            *(n for _, _, n in COLUMNS))
    return {**{k: m.get(k) for k in keep}, "ci": {k: m["ci"].get(k) for k in METRICS}}


def _cell(m: dict, key: str, n_key: str | None = None) -> str:
    v, ci = m.get(key), (m.get("ci") or {}).get(key) or {}
    if v is None:
        return "n/a"
    lo, hi = ci.get("lo"), ci.get("hi")
    n = f" n={m.get(n_key)}" if n_key and m.get(n_key) is not None else ""
    return (f"{v:.3f} [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else f"{v:.3f}") + n


def table(evals: dict, runs: list[dict]) -> str:
    step = {r["name"]: r["selected_step"] for r in runs}
    head = "| model | dataset | " + " | ".join(label for _, label, _ in COLUMNS) + " |"
    lines = [head, "| --- " * (2 + len(COLUMNS)) + "|"]
    for name, per in evals.items():
        label = f"{name} (step {step[name]})" if name in step else name
        for d, m in per.items():
            shown = f"{d} (selection claims)" if (m.get("about") or {}).get("held_out") is False else d
            lines.append(f"| {label} | {shown} | " + " | ".join(_cell(m, k, n) for k, _, n in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def paired_table(tests: dict) -> str:
    from biocheck.evaluate.headline import PAIRED_NAMES

    lines = ["| dataset | comparison | n | metric | Δ (reference − other) [95% CI] | p | MDD |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for d, rows in tests.items():
        for name, t in rows.items():
            for key, metric in PAIRED_NAMES.items():
                st = t.get(key) or {}
                if st.get("diff") is None:
                    continue
                ci = f" [{st['lo']:+.2f}, {st['hi']:+.2f}]" if st.get("lo") is not None else ""
                p = "n/a" if st.get("p") is None else f"{st['p']:.3f}"
                mdd = "n/a" if st.get("mdd") is None else f"{st['mdd']:.3f}"
                lines.append(f"| {d} | {name} | {t['n']} | {metric} | {st['diff']:+.3f}{ci} | {p} | {mdd} |")
            mc = t.get("mcnemar") or {}
            p = "n/a" if mc.get("p") is None else f"{mc['p']:.3f}"
            lines.append(f"| {d} | {name} | {t['n']} | McNemar b / c | {mc.get('b')} / {mc.get('c')} | {p} | |")
    return "\n".join(lines) + "\n"


def by_variant(evals: dict, runs: list[dict]) -> dict:
    """Each (variant, beta)'s selected checkpoints over seeds: per dataset and metric, the mean, min and max
    of the seeds' values (a metric a model has no value for, e.g. EQS without citations, is left out)."""
    out = {}
    for key in sorted({(r["variant"], r["beta"]) for r in runs}):
        names = [r["name"] for r in runs if (r["variant"], r["beta"]) == key and r["name"] in evals]
        per = {}
        for d in sorted({d for n in names for d in evals[n]}):
            per[d] = {}
            for k in METRICS:
                vs = [evals[n][d][k] for n in names if d in evals[n] and evals[n][d].get(k) is not None]
                per[d][k] = ({"mean": statistics.mean(vs), "min": min(vs), "max": max(vs), "seeds": len(vs)}
                             if vs else None)
        if names:
            out[f"{key[0]} beta={key[1]:g}"] = {"seeds": len(names), "datasets": per}
    return out


def variant_table(agg: dict) -> str:
    lines = ["| variant | seeds | dataset | " + " | ".join(METRICS) + " |", "| --- " * (3 + len(METRICS)) + "|"]
    for name, a in agg.items():
        for d, per in a["datasets"].items():
            cells = [f"{m['mean']:.3f} ({m['min']:.2f}-{m['max']:.2f}, {m['seeds']})" if m else "n/a"
                     for m in (per[k] for k in METRICS)]
            lines.append(f"| {name} | {a['seeds']} | {d} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for r in results:
        steps, rewards = zip(*r["curve"], strict=True)
        ax.plot(steps, rewards, marker="o", ls="-" if r["variant"] == "eg_grpo" else "--", label=r["name"])
    ax.set_xlabel("GRPO step (0 = start)")
    ax.set_ylabel("validation reward (the variant's own total)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--variants", nargs="*", default=["eg_grpo", "outcome_only"])
    ap.add_argument("--betas", type=float, nargs="+", default=None, help="KL coefficients [default: train.beta]")
    ap.add_argument("--pipeline", action="store_true", help="also use the pipeline's own training runs")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--start-from", type=Path, default=None,
                    help="start GRPO from this model without SFT (e.g. models/sft, the pipeline's start)")
    ap.add_argument("--no-start-eval", action="store_true",
                    help="no step-0 validation (the start's is known, e.g. from the pipeline's run)")
    ap.add_argument("--evaluate", nargs="*", default=[], metavar="DATASET",
                    help="evaluate base, SFT start and every selected checkpoint on these (scifact_val scifact healthfc)")
    ap.add_argument("--limit", type=int, default=None, help="first N claims per dataset [default: evaluate.limit]")
    ap.add_argument("--bootstrap", type=int, default=2000, help="resamples of the paired bootstrap")
    ap.add_argument("--models", nargs="*", default=None, metavar="NAME",
                    help="evaluate only these models (base, 'sft start', run names) [default: all]")
    ap.add_argument("--runs", type=Path, default=ROOT / "bench" / "runs")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "learning_check.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = load_params(args.params)
    profile = params.get("profile", "quickstart")
    betas = args.betas if args.betas is not None else [train_config(params).beta]
    results = pipeline_runs(params) if args.pipeline else []
    for variant in args.variants:
        for beta in betas:
            for seed in args.seeds:
                name = f"{variant}-b{beta:g}-s{seed}"
                r = train_run(params, variant, beta, seed, args.runs / profile / name, args.max_steps,
                              args.start_from, not args.no_start_eval)
                print(json.dumps({k: v for k, v in r.items() if k != "curve"}), flush=True)
                results.append(r)
    summary = {}
    for key in sorted({(r["variant"], r["beta"]) for r in results}):
        rs = [r for r in results if (r["variant"], r["beta"]) == key and r["gain"] is not None]
        if not rs:
            continue
        starts, gains = [r["start"] for r in rs], [r["gain"] for r in rs]
        summary[f"{key[0]} beta={key[1]:g}"] = {
            "runs": len(rs), "start_mean": statistics.mean(starts),
            "selected_mean": statistics.mean(r["selected"] for r in rs), "gain_mean": statistics.mean(gains),
            "start_spread": max(starts) - min(starts), "gain_min": min(gains),
            "target_met": statistics.mean(gains) > (max(starts) - min(starts)),
            "selected_evidence_mean": statistics.mean(r["selected_components"]["evidence"] or 0 for r in rs),
            "selected_ehr_mean": statistics.mean(r["selected_components"]["hallucination"] or 0 for r in rs),
        }
    evals = {}
    if args.evaluate:
        models = {"base": "base"}
        sft = next((r["sft_dir"] for r in results if r["sft_dir"]), None)
        if sft:
            models["sft start"] = sft
        models.update({r["name"]: r["checkpoint"] for r in results})
        if args.models is not None:
            models = {k: v for k, v in models.items() if k in args.models}
        evals = evaluate(params, models, args.evaluate, args.limit, args.runs / profile / "eval")
        tests = paired(evals, results, args.runs / profile / "eval", args.evaluate, args.bootstrap, 0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    agg = by_variant(evals, results)
    args.out.write_text(json.dumps({"profile": profile, "summary": summary, "runs": results, "evaluation": evals,
                                    "paired": tests if evals else {}, "evaluation_by_variant": agg}, indent=2) + "\n")
    if evals:
        text = (table(evals, results) + "\nPaired by claim id:\n\n" + paired_table(tests)
                + "\nOver seeds (mean (min-max, seeds with a value)):\n\n" + variant_table(agg))
        args.out.with_suffix(".md").write_text(text)
        print(text)
    plot(results, args.out.with_suffix(".png"), f"Learning check ({profile} profile, CPU)")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
