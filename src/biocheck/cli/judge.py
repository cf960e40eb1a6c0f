"""`biocheck judge train`: the evidence judge R_evidence asks."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from biocheck.cli.base import app
from biocheck.cli.console import _echo
from biocheck.cli.errors import _run
from biocheck.cli.options import ParamsOpt

judge_app = typer.Typer(help="The evidence judge R_evidence asks: train it on SciFact train, measure it on test.",
                        no_args_is_help=True)
app.add_typer(judge_app, name="judge")


@judge_app.command("train")
def judge_train(
    params: ParamsOpt = Path("params.yaml"),
    base: Annotated[Path | None, typer.Option(help="Backbone [default: judge.base, else model.out_dir].")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Output [default: judge.out_dir, models/judge].")] = None,
    zero_shot: Annotated[bool | None, typer.Option(
        "--zero-shot/--no-zero-shot", help="Also measure the untrained backbone [default: judge.zero_shot].")] = None,
    eqs: Annotated[bool, typer.Option(
        "--eqs", help="Train the second judge instead (judge.eqs: the keys it changes, e.g. its seed and folder): "
                      "it scores EQS at evaluation and never trains the policy.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the evidence judge (models/judge) and measure it (metrics/judge.json).

    Pairs come from SciFact TRAIN claims only: rationale abstracts are SUPPORTED/REFUTED, cited
    non-rationale and BM25-retrieved abstracts are NOT ENOUGH INFORMATION (label-balanced, seeded).
    The backbone stays frozen and is cut at the layer that cross-validates best. judge.recipe head fits
    the three label words' output rows there (an ordinary checkpoint); judge.recipe align fits a small
    classifier on how well the claim's tokens are matched by the paper's in that layer and on the
    negation and direction words of the claim and of its best-matched sentences (the checkpoint plus
    judge_head.json). Either way `reward.judge: transformers:models/judge` reads it through the
    usual judge protocol (s per label, the same prompt and cache). It is measured on SciFact TEST
    pairs (all, or a seeded judge.eval_max_pairs): accuracy, macro-F1, recall per label, calibration,
    beside the majority class.
    judge.train false measures the backbone zero-shot instead (the paper's judge) and trains nothing.
    --eqs trains the EQS judge (judge.eqs) into its own folder: a judge the policy never trained on, so
    that EQS at evaluation is not graded by the judge it learned to please.
    """
    from biocheck.pipeline import judge_stage

    stats = _run(judge_stage, params, eqs=eqs, base=base, out_dir=out_dir, zero_shot=zero_shot,
                 progress=progress and sys.stderr.isatty())
    t = stats["test"]
    _echo(f"judge: test accuracy {t['accuracy']:.3f}, macro-F1 {t['macro_f1']:.3f} "
               f"(majority {t['majority_accuracy']:.3f}, n={t['n']}), s > threshold on {t['above_threshold']:.0%}")

