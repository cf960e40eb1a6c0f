"""The root `biocheck` app: its help, its callback (logging, quiet libraries) and `biocheck version`."""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer
from rich.logging import RichHandler

from biocheck import __version__
from biocheck.cli.console import _echo, _inert_record, err
from biocheck.secrets import redact_logs

app = typer.Typer(
    help="BioCheck: fact-check biomedical claims with an LLM search agent trained by EG-GRPO.\n\n"
    "Every pipeline step is a subcommand; `dvc repro` runs them in order with the values in params.yaml.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain Click help: paragraphs re-wrapped, "[default: ...]" shown verbatim
)


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = RichHandler(console=err, show_path=False, rich_tracebacks=False)
    # Our own INFO lines are progress a user wants; other libraries' (GX, MLflow, httpx) are noise
    # unless --verbose.
    handler.addFilter(lambda r: verbose or r.name.startswith("biocheck") or r.levelno >= logging.WARNING)
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", handlers=[handler])
    # Whichever handlers are live (ours, or a host's when embedded), no log line may carry a secret.
    redact_logs([handler, *logging.getLogger().handlers])
    handler.addFilter(_inert_record)  # a log line can quote a model's or a server's text
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    if not sys.stderr.isatty():  # a library's progress bar (tqdm's, the hub's) is for a terminal, not a log or CI
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from biocheck.tracking import quiet_artifact_progress

    quiet_artifact_progress()


@app.command()
def version() -> None:
    """Print the BioCheck version."""
    _echo(__version__)
