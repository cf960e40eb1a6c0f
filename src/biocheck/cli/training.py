"""`biocheck sft`, `biocheck train` and `biocheck select`: the warm start, GRPO, the best checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _run
from biocheck.cli.options import ParamsOpt, VariantOpt


@app.command()
def sft(
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the supervised warm start that GRPO begins from (train.sft) into models/sft.

    The model of models/base is fine-tuned on demonstration episodes built from SciFact train in the
    agent's own environment: a Boolean query, the real tool output, a report quoting the gold rationale
    (docs/training.md). Both reward variants (EG-GRPO and outcome-only GRPO) start from this one model, so
    it is trained once; `biocheck train` reuses it when it was trained from the same inputs and trains it
    first otherwise. With train.sft.enabled false (the paper profile) it only records that in models/sft.
    """
    from biocheck.pipeline import sft_stage

    stats = _run(sft_stage, params, progress=progress and sys.stderr.isatty())
    err.print(json.dumps(stats, indent=2), markup=False, highlight=False)


@app.command()
def train(
    params: ParamsOpt = Path("params.yaml"),
    max_steps: Annotated[int | None, typer.Option(help="Override train.max_steps.")] = None,
    seed: Annotated[int | None, typer.Option(help="Override train.seed.")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Checkpoints folder [default: train.out_dir].")] = None,
    variant: VariantOpt = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the agent with EG-GRPO (TRL GRPOTrainer) from the warm start in models/sft.

    Starts from the supervised warm start of `biocheck sft` (train.sft.enabled; trained first when
    models/sft does not hold one of the same inputs), else from models/base. Rollouts run the agent's own tool loop (same prompts, tool,
    budget, intervention and report parser) over the search backend train.search_backend; rewards
    are reward.variant (eg_grpo or outcome_only) with the weights in `reward:`. Checkpoints go to
    models/checkpoints every train.save_steps with a validation reward every train.eval_steps.
    Rerunning after a kill resumes from the last checkpoint (of the same parameters and inputs).
    Everything is logged to MLflow. Writes metrics/train.json. `--variant outcome_only` trains the
    standard-GRPO comparison with everything else identical into models/checkpoints_outcome_only
    (metrics/train_outcome_only.json); `dvc repro` runs both (stages train@eg_grpo, train@outcome_only).
    """
    from biocheck.pipeline import train_stage

    stats = _run(train_stage, params, progress=progress and sys.stderr.isatty(), variant=variant,
                 max_steps=max_steps, seed=seed, out_dir=out_dir,
                 on_interrupt="interrupted; the checkpoints already saved are kept; rerun the same command to "
                              "resume from the last one (with the same parameters and inputs).")
    err.print(json.dumps({k: v for k, v in stats.items() if k != "sft"}, indent=2), markup=False, highlight=False)


@app.command("select")
def select_cmd(
    params: ParamsOpt = Path("params.yaml"),
    no_register: Annotated[bool, typer.Option("--no-register", help="Do not touch the MLflow registry.")] = False,
    variant: VariantOpt = None,
) -> None:
    """Pick the checkpoint with the best validation reward (ties: earlier step).

    Reads models/checkpoints (train.out_dir), copies the winner to models/selected, writes the whole
    table to metrics/selection.json and the reward curve to metrics/reward_curve.csv, and registers
    the model in the MLflow model registry (select.registered_model) with its validation results and
    the alias `challenger`; `champion` moves to it only when its validation reward beats the
    champion's (the comparison is recorded on the version; `biocheck model promote` moves it by hand).
    `--variant outcome_only` selects the comparison model from models/checkpoints_outcome_only into
    models/selected_outcome_only (alias `outcome_only`, never the challenger).
    """
    from biocheck.pipeline import select_config, select_stage
    from biocheck.wiring import params_of

    cfg = _run(select_config, _run(params_of, params), variant=variant)
    result = _run(select_stage, params, register=False if no_register else None, variant=variant)
    start = result["start_eval_reward"]
    start = f"{start:.4f}" if isinstance(start, int | float) else "not measured"
    err.print(f"selected step {result['selected_step']} (validation reward {result['selected_eval_reward']:.4f}; "
              f"start {start}) -> {cfg.out_dir}", markup=False, highlight=False)

