"""Click's usage errors as the project's one line, and a usage line without Typer's `{NAME}` templates."""

from __future__ import annotations

from typing import Any

import typer
from typer._click.exceptions import UsageError as ClickUsageError  # typer vendors Click: its usage errors

from biocheck.secrets import redact
from biocheck.terminal import inert


class _UsageError(ClickUsageError):
    """A usage error (unknown option, a value not among an option's choices, a missing argument) as the project's
    one line on stderr, instead of Click's usage block; exit 2 as Click's."""

    def show(self, file: Any = None) -> None:
        where = f" (see `{self.ctx.command_path} --help`)" if self.ctx else ""
        typer.echo(f"error: {inert(redact(self.format_message()))}{where}", file=file, err=file is None)


def _one_line(e: ClickUsageError) -> _UsageError:
    return e if isinstance(e, _UsageError) else _UsageError(e.format_message(), e.ctx)


class _OneLineUsage:
    """Usage errors found while parsing (options, arguments, choices) are one line (_UsageError)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)  # type: ignore[misc]
        except ClickUsageError as e:
            raise _one_line(e) from None


class _Command(_OneLineUsage, typer.core.TyperCommand):
    """Typer writes a required argument as `{NAME}` in the usage line, which reads as a template left unfilled:
    write it as NAME, as Click does."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        import re

        return [re.sub(r"\{([\w.-]+)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


class _Group(_OneLineUsage, typer.core.TyperGroup):
    """A command group: an unknown command is one line too."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except ClickUsageError as e:
            raise _one_line(e) from None

