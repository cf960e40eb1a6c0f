"""`biocheck evaluate`: BioCheck against its baselines on SciFact and HealthFC."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _run
from biocheck.cli.options import ParamsOpt


@app.command()
def evaluate(
    params: ParamsOpt = Path("params.yaml"),
    systems: Annotated[str | None, typer.Option(
        help="Comma-separated systems: base, eg_grpo, outcome_only, no_retrieval, pmsearch, cer, fire "
             "[default: evaluate.systems].")] = None,
    datasets: Annotated[str | None, typer.Option(
        help="Comma-separated datasets: scifact, healthfc [default: evaluate.datasets].")] = None,
    limit: Annotated[int | None, typer.Option(help="First N claims per dataset [default: evaluate.limit].")] = None,
    workers: Annotated[int | None, typer.Option(help="Claims in flight per system [default: evaluate.workers].")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Ad-hoc run: write everything under this folder instead of eval/, metrics/ and reports/.")] = None,
    model: Annotated[str | None, typer.Option(
        help="The model the eg_grpo system runs: selected (models/selected, the newest EG-GRPO selection), "
             "outcome_only (models/selected_outcome_only), base, champion (the registry's champion, "
             "select.registered_model), a model folder, or a spec such as openai:NAME or "
             "models:/biocheck-agent@challenger [default: selected]. Use with --out to keep the pipeline's "
             "results.")] = None,
    eqs_judge: Annotated[str | None, typer.Option(
        "--eqs-judge", help="The judge that scores EQS, a spec such as transformers:models/judge_eqs "
                            "[default: evaluate.eqs_judge, else reward.judge].")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Evaluate BioCheck against its baselines on SciFact and HealthFC.

    Systems: base (the agent with models/base), eg_grpo (the selected EG-GRPO checkpoint), outcome_only
    (the selected outcome-only GRPO checkpoint), no_retrieval, pmsearch (the agent's graph, label only),
    cer (BM25 retrieve-then-verify), fire (iterative search and verify); see docs/evaluation.md. Each
    episode is cached per (system fingerprint, claim), so a rerun computes only what is missing.
    Writes eval/predictions/<system>/<dataset>.jsonl, reports/eval_metrics.json (accuracy, macro P/R/F1,
    parse / citing / grounded rates, EHR over citing reports, micro-EHR, EQS per side, SciFact rationale
    scores, each with its interval and n), reports/eval_paired.json (eg_grpo against each system, paired by
    claim: bootstrap differences with p and the minimum detectable difference, McNemar), the headline
    numbers DVC shows (metrics/eval/<dataset>/<system>.json), plot data, the gallery
    reports/eval/index.html, and one MLflow run per system and dataset (experiment biocheck-eval): its
    model_alias names the model it ran (selected, outcome_only, base, champion) and its tag registry_aliases
    the registry's aliases of those weights (e.g. challenger alone: a selection that did not become champion).
    """
    from biocheck.pipeline import evaluate_stage

    def names(text: str | None) -> list[str] | None:
        return [x.strip() for x in text.split(",") if x.strip()] if text is not None else None

    if out is not None:  # a file, a FIFO or a read-only place fails now, not after the first system
        from biocheck.outputs import claim_folder

        _run(claim_folder, out, "--out")
    result = _run(evaluate_stage, params, progress=progress and sys.stderr.isatty(), out=out, model=model,
                  systems=names(systems), datasets=names(datasets), limit=limit, workers=workers, eqs_judge=eqs_judge,
                  on_interrupt="interrupted; the traces of the episodes that finished are kept; rerun the same "
                               "command to reuse them and run the rest.")
    from biocheck.evaluate.headline import summary_lines

    for line in summary_lines(result["metrics"], result["paired"]):
        err.print(line, markup=False, highlight=False)
    for step, why in result.get("skipped", {}).items():
        err.print(f"warning: {step} skipped: {why}", markup=False, highlight=False)
    if result.get("gallery"):
        err.print(f"gallery: {result['gallery']}", markup=False, highlight=False)

