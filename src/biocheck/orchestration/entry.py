"""What every flow shares at its edges: expected failures as one line, secrets blanked, no tracebacks for them.

- `run(body)`: the `python flows/<flow>.py` entry point. An expected failure (bad params or input, a DVC stage
  that failed, PubMed or a model unreachable), or a Prefect server that does not answer, is one line on
  stderr and exit 1; Ctrl-C is exit 130. The console shows no traceback for an expected failure (Prefect's
  API log of the run keeps it).
- `quiet_failures`: a task body (e.g. a shard on a Dask worker) whose expected failure becomes its final
  state, `Failed(message, data=error)`: one line in the worker's log, and the flow re-raises the error itself.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger
from prefect.states import Failed

from biocheck.errors import BioCheckError
from biocheck.secrets import redact, redact_logs

# Read when Prefect starts its temporary server, i.e. when the first flow runs: setting it here is in time.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # offline machines: no telemetry errors

def redact_run_logs() -> None:
    """Blank secrets in every log line Prefect sends to its API (the run logs a server keeps and shows) and
    prints. Prefect configures its handlers when it is imported, before this module: a flow script, a
    deployment's flow-run process and a Dask worker all import this module with their flow's code."""
    names = ["", *(n for n in logging.root.manager.loggerDict if n.startswith("prefect"))]
    redact_logs(h for n in names for h in logging.getLogger(n).handlers)


redact_run_logs()

UNREACHABLE = "Failed to reach API"  # what Prefect raises when PREFECT_API_URL does not answer
F = TypeVar("F", bound=Callable[..., Any])


class NoTraceback(logging.Filter):
    """Drop the traceback of an expected failure from a record: its message says what and how to fix."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], BioCheckError):
            record.exc_info, record.exc_text = None, None
        return True


def quiet_console() -> None:
    """Keep expected failures' tracebacks off the console, and blank secrets in its lines.

    On the root logger's handlers (Prefect's console): a run logger's own handler (Prefect's API) sees each
    record first, so the run's log in Prefect keeps the traceback. The traceback goes before redaction
    folds it into the message.
    """
    console = logging.getLogger().handlers
    for handler in console:
        if not any(isinstance(f, NoTraceback) for f in handler.filters):
            handler.filters.insert(0, NoTraceback())
    redact_logs(console)


def error_line(e: BaseException) -> str:
    """What to tell the user: an expected failure's own message (as the CLI prints it), else the exception's
    type and first line (the run's log above has its traceback)."""
    text = str(e).strip()
    if UNREACHABLE in text:
        url = os.environ.get("PREFECT_API_URL", "")
        return (f"no Prefect server answers at PREFECT_API_URL={url}: start it (`prefect server start`), fix "
                "the URL, or unset PREFECT_API_URL to run with a temporary local server")
    if isinstance(e, BioCheckError):
        return text or type(e).__name__
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def fail(message: str, code: int = 1) -> int:
    """Print `error: MESSAGE` (secrets blanked) on stderr; return the exit code."""
    print(f"error: {redact(message)}", file=sys.stderr)
    return code


def run(body: Callable[[], object], interrupted: str = "interrupted; a rerun resumes from what was kept") -> int:
    """Run a flow script's `body` (checks, then the flow); the exit code: 0, 1 on any failure (one line on
    stderr), 130 on Ctrl-C (`interrupted` says what was kept)."""
    quiet_console()
    try:
        body()
    except KeyboardInterrupt:
        return fail(interrupted, 130)
    except Exception as e:  # noqa: BLE001 (an entry point: the run's log has any traceback)
        return fail(error_line(e))
    return 0


def quiet_failures(fn: F) -> F:
    """Wrap a task body: an expected failure returns `Failed(message, data=error)` instead of raising, so the
    worker logs one line, not a traceback (it is no crash), and whoever reads the result gets `error` itself."""

    @functools.wraps(fn)
    def body(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BioCheckError as e:
            return Failed(message=redact(str(e)), data=e)

    return body  # type: ignore[return-value]


@contextlib.contextmanager
def redacted() -> Iterator[None]:
    """Around a flow's body: its run's log lines, and an exception leaving it, have secrets blanked (the
    exception's arguments, so its message, the failed state Prefect stores and the traceback it logs); the
    exception's type and traceback are kept. A context, not a decorator: Prefect reads the flow function's
    own signature and annotations."""
    redact_run_logs()  # the handlers of this run (Prefect may have made new ones since import)
    try:
        yield
    except BaseException as e:
        e.args = tuple(redact(a) if isinstance(a, str) else a for a in e.args)
        raise


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The current Prefect run's logger (lines land in its log), or a plain one outside a run (a task body
    called as a function: tests, scripts)."""
    try:
        logger = get_run_logger()
        redact_run_logs()  # e.g. a task on a Dask worker, whose handlers were made after this module's import
        return logger
    except MissingContextError:
        return logging.getLogger("biocheck.flows")
