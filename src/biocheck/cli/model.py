"""`biocheck model`: build or fetch the base policy; promote a registered version."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from biocheck.aliases import CHALLENGER
from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _run
from biocheck.cli.options import ParamsOpt

model_app = typer.Typer(help="Models: build or fetch the base policy (models/base); promote a registered version.",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(model_app, name="model")


@model_app.command("init")
def model_init(
    params: ParamsOpt = Path("params.yaml"),
    base: Annotated[str | None, typer.Option(
        help="tiny, a Hugging Face model id or a local path [default: model.base].")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Output [default: model.out_dir, models/base].")] = None,
) -> None:
    """Make models/base: build the tiny quickstart model, or fetch/copy a real one.

    model.base = tiny builds, deterministically from model.seed and in seconds on a CPU, a tiny
    Qwen3-architecture causal LM with a byte-level BPE tokenizer trained on the prepared corpus and
    the agent's prompts, Qwen chat special tokens and TRL's Qwen3.5 chat template (tool calls).
    Any other value is a Hugging Face model id (snapshot download when online, the local cache
    otherwise) or a local model directory, copied (hard-linked where possible) into models/base.
    Writes metrics/model.json.
    """
    from biocheck.pipeline import model_stage

    _run(model_stage, params, base=base, out_dir=out_dir)  # logs what it built


@model_app.command("promote")
def model_promote(
    which: Annotated[str, typer.Argument(help="The version to promote: a number or an alias.")] = CHALLENGER,
    name: Annotated[str | None, typer.Option(
        help="The registered model [default: select.registered_model, biocheck-agent].")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Make a registered version the champion, whatever the validation rewards say.

    `biocheck select` registers each selection as the `challenger` and moves `champion` only when the
    challenger's validation reward beats the champion's. This command moves `champion` by hand (to
    the challenger by default, or to a version number or another alias), and records it on the
    version's tags (promoted, promotion). `biocheck check` and `mlflow models serve -m
    models:/biocheck-agent@champion` then run that version.
    """
    from biocheck.params import raw_section
    from biocheck.train.registry import promote
    from biocheck.wiring import params_of

    if name is None:
        name = _run(raw_section, _run(params_of, params), "select").get("registered_model") or "biocheck-agent"
    done = _run(promote, name, which)
    was = f" (was v{done['previous']})" if done["previous"] else ""
    err.print(f"{done['name']}: champion -> v{done['version']}{was}", markup=False, highlight=False)

