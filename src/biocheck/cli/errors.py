"""Expected failures (bad input, config, network, Ctrl-C, a full disk) as one stderr line and an exit code."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from biocheck.cli.console import err
from biocheck.errors import BioCheckError
from biocheck.secrets import redact
from biocheck.terminal import inert


def _fail(message: str, code: int = 1) -> None:
    # Error texts can quote what a server sent back, keys included: blank them on the way out.
    # inert before rich sees it: rich drops a BEL, which would leave an OSC sequence unterminated
    err.print(f"[bold red]error:[/] {escape(inert(redact(message)))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _usage_file(dest: Path, option: str, example: str) -> None:
    """An output file given on the command line, checked before any work (`outputs.claim_file`); what it
    refuses is a usage error (exit 2)."""
    from biocheck.io import InputError
    from biocheck.outputs import claim_file

    try:
        claim_file(dest, option, example)
    except InputError as e:
        _fail(str(e), code=2)


RERUN = "interrupted; rerun the command to finish."


def _run(fn, *args, on_interrupt: str = RERUN, **kwargs):
    """Run a stage; turn expected failures (bad input, config, network) into a clean message + exit 1.

    `on_interrupt`: what Ctrl-C leaves behind and how to go on, true for this stage (exit 130)."""
    try:
        return fn(*args, **kwargs)
    except BioCheckError as e:  # the one root of the errors a user can fix (biocheck.errors)
        _fail(str(e))
    except KeyboardInterrupt:
        _fail(on_interrupt, code=130)
    except Exception as e:  # the device filled up mid-write (a checkpoint, the evidence store): no traceback
        from biocheck.io import disk_full

        if not disk_full(e):
            raise
        _fail(f"no space left on the device ({type(e).__name__}: {str(e).splitlines()[0][:200]}): free some "
              "space (`df -h`; old checkpoints, `dvc gc`) and rerun the command; finished work is kept")
