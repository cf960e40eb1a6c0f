"""The console every command writes to: stderr lines and stdout text with the secrets blanked and the escape
sequences taken out."""

from __future__ import annotations

import logging
import sys

import typer
from rich.console import Console, ConsoleRenderable, RenderHook
from rich.text import Text

from biocheck.secrets import redact
from biocheck.terminal import inert

# Off a terminal (dvc repro, CI logs) rich would wrap log lines at 80 columns: allow long ones.
# emoji=False: text from data (claims, ids, titles, server errors) prints as written, ":thumbs_up:" too;
# markup in it is escaped (or printed with markup=False) where it is printed.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200, emoji=False)


class _Redacting(RenderHook):
    """Blanks the secrets out of every text a console prints (a summary or an error can quote a server), and
    takes out the escape sequences and control characters a model's or a server's text can carry."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_redacted(r) if isinstance(r, Text) else r for r in renderables]


def _redacted(text: Text) -> Text:
    clean = inert(redact(text.plain))
    if clean == text.plain:
        return text
    out = text.copy()
    out.plain, out.spans = clean, []  # the styles' offsets no longer fit the shorter text
    return out


def _inert_record(record: logging.LogRecord) -> bool:
    """A log record's message made inert on a terminal (after the redacting filter)."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: the handler reports it; a filter must never raise
        return True
    record.msg, record.args = inert(message), None
    return True


def _echo(text: str, **kwargs) -> None:
    """`typer.echo` to stdout with the secrets blanked (reports and JSON can quote what a server said) and the
    text inert on a terminal (`terminal.inert`: a model's answer can hold escape sequences)."""
    typer.echo(inert(redact(text)), **kwargs)


err.push_render_hook(_Redacting())
