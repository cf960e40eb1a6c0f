"""`biocheck narratives`: the passage benchmark (compose its passages, check them, score the extraction)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _run
from biocheck.cli.options import ParamsOpt

narratives_app = typer.Typer(help="The passage benchmark: passages of several SciFact held-out claims whose gold "
                                  "claims are known (params `narratives:`; docs/narratives.md).",
                             no_args_is_help=True)
app.add_typer(narratives_app, name="narratives")


@narratives_app.command("passages")
def narratives_passages(params: ParamsOpt = Path("params.yaml")) -> None:
    """Compose the benchmark's passages into data/narratives/passages.jsonl (the DVC stage narrative_passages).

    narratives.passages passages of 2-4 SciFact held-out claims each (data/prepared/full/scifact.jsonl, the
    release's dev split), a plain connective sentence between claims and one question or opinion; the same
    narratives.seed gives the same bytes. narratives.passages: 0 writes an empty file.
    """
    from biocheck.pipeline.narratives import narrative_passages_stage

    done = _run(narrative_passages_stage, params)
    err.print(f"{done['passages']} passages, {done['gold_claims']} gold claims: {done['path']}", markup=False,
              highlight=False)


@narratives_app.command("evaluate")
def narratives_evaluate(
    params: ParamsOpt = Path("params.yaml"),
    system: Annotated[Literal["base", "eg_grpo", "outcome_only"] | None, typer.Option(
        help="The agent that checks every claim, with the model evaluate runs for it [default: narratives.system].")
    ] = None,
    extractor: Annotated[Literal["model", "sentences"] | None, typer.Option(
        help="Who finds a passage's claims: model (the system's own chat model; the sentence rule where its answer "
             "is not usable) or sentences (the rule only) [default: narratives.extractor].")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="Claims in flight [default: narratives.workers].")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Check the benchmark's passages and score them (the DVC stage narratives).

    Each passage is turned into claims four ways: its gold claims, the extractor's claims, one claim per
    sentence (baseline) and the whole passage as one claim (baseline); the agent checks every claim (one
    cached trace per claim text under narratives/, so a rerun computes only what is missing) and the
    evaluation's judges score the reports. Writes metrics/narratives.json (per arm: extraction precision and
    recall, per-claim accuracy and what extraction costs it, passage accuracy, EHR, EQS, each with its 95%
    interval over passages and its n), reports/narratives/ (table.md, index.html, the per-claim rows
    claims.jsonl and extracted.jsonl, each passage's report) and an MLflow run tagged task=narrative.
    """
    from biocheck.pipeline.narratives import narratives_stage

    overrides = {k: v for k, v in (("system", system), ("extractor", extractor), ("workers", workers))
                 if v is not None}
    metrics = _run(narratives_stage, params, progress=progress and sys.stderr.isatty(), **overrides)
    if metrics.get("skipped"):
        err.print(f"not run: {metrics['skipped']}", markup=False, highlight=False)
        return
    from biocheck.evaluate.narrative_page import markdown_table

    sys.stdout.write(markdown_table(metrics))
    err.print("written: metrics/narratives.json, reports/narratives/index.html", markup=False, highlight=False)
