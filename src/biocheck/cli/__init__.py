"""The `biocheck` command: every pipeline step is a subcommand (DVC stages and Prefect flows call the same functions).

One module per concern:

- `base`: the root app, its callback (logging) and `version`; `console`: the stderr console and stdout echo, secrets
  blanked and text inert; `errors`: `_run` and `_fail`, where an expected failure becomes one stderr line and an
  exit code; `options`: the options several commands share and the fixed choices some list in --help.
- `usage`: Click's usage errors as one line; `examples`: an example command line in every --help.
- The commands, one module per area, each registering on `base.app` or its own group: `data`, `evidence`
  (evidence build/stats/refresh and `search`), `model`, `judge`, `profile`, `check` (with its report rendering and
  MLflow logging), `reward` (`score`, `reward audit`), `training` (`sft`, `train`, `select`), `evaluate`, `study`,
  `report` (`report pr`).

Each command imports what it runs inside its body, so `biocheck --help` loads none of the heavy libraries.
"""

from __future__ import annotations

import sys

# The commands and groups register as these modules are imported: this order is their order in `biocheck --help`.
# isort: off
from biocheck.cli.base import app
from biocheck.cli import data, evidence, model, judge, profile, check, reward, training, evaluate, narratives, study, report  # noqa: F401
# isort: on
from biocheck.cli.examples import _epilog, _with_examples
from biocheck.cli.usage import _Group

__all__ = ["app", "entry"]

app.info.epilog = _epilog("")
app.info.cls = _Group
_with_examples(app)


def entry() -> None:
    """The console entry point: `app`, with a Ctrl-C that lands before a command's own handling (while Typer
    builds the command line, or a command imports its stage) ending in one line and exit 130, not a traceback."""
    try:
        app(prog_name="biocheck")
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted before the command started; nothing was written\n")
        sys.exit(130)

