"""`biocheck study`: run, inspect, analyse and export a study of EG-GRPO against outcome-only GRPO."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _fail, _run
from biocheck.cli.options import VARIANTS, ParamsOpt

study_app = typer.Typer(help="A study: EG-GRPO against outcome-only GRPO and their shared start, over seeds x claims "
                             "(params `study:`, stages in study/dvc.yaml; docs/evaluation.md).", no_args_is_help=True)
app.add_typer(study_app, name="study")
SeedOpt = Annotated[int, typer.Option("--seed", help="The unit's seed (one of study.seeds).")]


@study_app.command("run")
def study_run(
    upstream: Annotated[bool, typer.Option(help="Let DVC first bring up to date what the units read (data, index, "
                                                "judges, the start model); --no-upstream: they are there already.")] = True,
    ignore_gate: Annotated[bool, typer.Option("--ignore-gate", help="Train even when the reward audit finds "
                                              "R_evidence varying in fewer than study.min_evidence_signal of the "
                                              "start's SUPPORTED or REFUTED groups (a warning instead of a stop).")] = False,
) -> None:
    """Run the whole study here, one DVC stage after another, then its analysis.

    First the gate: the reward audit of the start (`dvc repro audit`) must find R_evidence varying in at least
    study.min_evidence_signal (default 0.5) of its SUPPORTED and of its REFUTED groups; below that EG-GRPO's
    evidence term could not reach the gradient, and the study stops before any training, saying what to change
    (--ignore-gate runs it anyway).

    Trains every (variant, seed) of `study:` from the shared start, selects each run's best checkpoint by
    validation reward, evaluates every selected checkpoint and the start on the same held-out claims, and
    writes metrics/study.json, reports/study.json, the forest plot (metrics/study_plots/forest.csv, `dvc plots
    show`) and reports/study/index.html. Each unit is a stage of study/dvc.yaml (`dvc repro study/dvc.yaml`
    runs the same): a finished unit is skipped, so a killed study restarts where it stopped. Several machines:
    the Prefect deployment `study` (docs/orchestration.md).
    """
    from biocheck.study.units import run_local

    def said(i: int, n: int, ran: dict) -> None:
        how = f"ran in {ran['seconds']:.0f} s" if ran["ran"] else "up to date, skipped"
        err.print(f"[{i}/{n}] {ran['stage']}: {how}", markup=False, highlight=False)

    _run(run_local, ".", upstream=upstream, report=said, ignore_gate=ignore_gate,
         on_interrupt="interrupted; finished units are kept (dvc.lock); rerun `biocheck study run` to go on.")
    err.print("study written: metrics/study.json, reports/study.json, reports/study/index.html",
              markup=False, highlight=False)


@study_app.command("status")
def study_status() -> None:
    """Which units of the study are done, stale or still to run (`dvc status` of study/dvc.yaml).

    A stale unit ran, then its code, params or inputs changed: `biocheck study run` repeats it.
    """
    from biocheck.study.units import unit_states

    states = _run(unit_states, ".")
    for stage, state in states:
        print(f"{state:7} {stage}")
    done = sum(state == "done" for _, state in states)
    err.print(f"{done} of {len(states)} stages done", markup=False, highlight=False)


@study_app.command("train")
def study_train(
    variant: Annotated[Literal[VARIANTS], typer.Option("--variant", help="The unit's reward variant.")],
    seed: SeedOpt,
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """One training unit: GRPO of VARIANT with SEED from the shared start (DVC stage train@VARIANT-SEED).

    Writes the checkpoints to study/checkpoints/<variant>-s<seed>; a rerun resumes from the last one.
    """
    from biocheck.study.units import train_unit
    from biocheck.wiring import params_of

    stats = _run(train_unit, _run(params_of, params), variant, seed, progress=progress and sys.stderr.isatty(),
                 on_interrupt="interrupted; the checkpoints already saved are kept; rerun to resume.")
    err.print(json.dumps({k: v for k, v in stats.items() if k != "sft"}, indent=2), markup=False, highlight=False)


@study_app.command("evaluate")
def study_evaluate(
    variant: Annotated[Literal[VARIANTS] | None, typer.Option(
        "--variant", help="The unit's reward variant; none: evaluate the shared start.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="The unit's seed (with --variant).")] = None,
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """One evaluation unit: the unit's best checkpoint (or the start) on the study's held-out claims.

    Selects the checkpoint with the best validation reward (as `biocheck select`), runs it as the BioCheck agent
    on study.datasets (first study.limit claims) and writes study/eval/<unit> (episodes cached: a rerun
    computes only what is missing).
    """
    from biocheck.study.units import evaluate_unit
    from biocheck.wiring import params_of

    if (variant is None) != (seed is None):
        _fail("--variant and --seed go together (a unit), or neither (the start); see `biocheck study evaluate --help`",
              code=2)
    out = _run(evaluate_unit, _run(params_of, params), variant, seed, progress=progress and sys.stderr.isatty(),
               on_interrupt="interrupted; the episodes already run are cached; rerun to finish.")
    shown = {d: {k: m.get(k) for k in ("n", "accuracy", "ehr", "eqs")} for d, m in out["metrics"].items()}
    err.print(json.dumps({"unit": out["unit"], "selection": out["selection"], "metrics": shown}, indent=2),
              markup=False, highlight=False)


@study_app.command("analyze")
def study_analyze(params: ParamsOpt = Path("params.yaml")) -> None:
    """The study's answer from every unit's predictions: differences with their t interval over seeds.

    For each dataset and metric: the reference variant minus each other variant and minus the start (paired by
    seed), with a 95% t interval over seeds, p, the minimum detectable difference, exact McNemar tests per seed
    for the per-claim rates, the majority-class rate beside accuracy, each unit's evidence funnel and a sentence
    of what the study can say. Writes metrics/study.json, reports/study.json, metrics/study_plots/forest.csv and
    reports/study/index.html, and logs one MLflow run under `study <name>`.
    """
    from biocheck.study.units import analyze_units
    from biocheck.wiring import params_of

    out = _run(analyze_units, _run(params_of, params))
    for result in out["datasets"].values():
        for entry in result["metrics"].values():
            for d in entry["differences"].values():
                err.print(d["sentence"], markup=False, highlight=False, soft_wrap=True)
    err.print(f"-> {out['report']}, {out['page']}", markup=False, highlight=False)


@study_app.command("export")
def study_export(
    to: Annotated[Path | None, typer.Option("--to", help="The folder [default: bench/results/study_<name>].")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Write the study's reviewable files, small enough for git, after `biocheck study run`.

    The params it ran with, each unit's per-claim predictions (no trace paths), its checkpoint selection, each
    training unit's per-step reward log (every term's mean and std, the share of groups in which it varies, its
    within-group std, the evidence funnel) and the analysis. `biocheck study recompute DIR` gives the analysis
    back from them alone.
    """
    from biocheck.study.units import export, study_config
    from biocheck.wiring import params_of

    p = _run(params_of, params)
    dest = to or Path("bench/results") / f"study_{_run(study_config, p).name}"
    _run(export, p, dest)
    err.print(f"study files -> {dest} (commit them with the results they support)", markup=False, highlight=False)


@study_app.command("recompute")
def study_recompute(folder: Annotated[Path, typer.Argument(help="A folder `biocheck study export` wrote.")]) -> None:
    """Recompute a study's analysis from its exported files alone, and say whether it matches the export's.

    Prints every difference's sentence; exit 1 when the recomputed numbers differ from the exported analysis.
    """
    from biocheck.study.units import recompute

    out = _run(recompute, folder)
    for result in out["report"]["datasets"].values():
        for entry in result["metrics"].values():
            for d in entry["differences"].values():
                print(d["sentence"])
    if not out["matches"]:
        _fail(f"{folder}: the recomputed analysis differs from {folder / 'study.json'}: the files and the analysis "
              "are not of the same study (export it again)")
    err.print(f"{folder}: recomputed from the per-claim files alone; it matches study.json", markup=False,
              highlight=False)

