"""Secrets come only from the environment; `redact` blanks them out of any text we store or print.

A server may echo a key back in an error body ("Incorrect API key provided: sk-..."), and that text
travels into traces, summaries, logs and MLflow. Every error text is therefore passed through `redact`
where it is made and again where it leaves the program (CLI errors, log lines, MLflow params and files).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping

MASK = "***"
# Named secrets BioCheck (or a library it drives) reads; any other *_API_KEY/*_TOKEN/... counts too.
NAMES = ("OPENAI_API_KEY", "NCBI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MLFLOW_TRACKING_PASSWORD",
         "MLFLOW_TRACKING_TOKEN")
PATTERN = re.compile(r".+_(API_KEY|TOKEN|SECRET|PASSWORD)$", re.IGNORECASE)
# Shorter values are placeholders ("EMPTY", "none" for a local vLLM server), not secrets; blanking them
# would mangle ordinary words in every report.
MIN_CHARS = 8


def _environ(tries: int = 100) -> dict[str, str]:
    """A copy of os.environ. Walking it races with any thread that sets or removes a variable meanwhile
    (Dask, MLflow and Prefect do, and log filters run on every thread): RuntimeError 'dictionary changed
    size during iteration' or a KeyError for a name removed mid-walk. Such a walk is retried."""
    for _ in range(tries - 1):
        try:
            return dict(os.environ)
        except (RuntimeError, KeyError):
            continue
    return dict(os.environ)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values set in the environment, longest first (so a secret inside another goes too)."""
    env = _environ() if environ is None else environ
    values = {v.strip() for k, v in env.items() if (k.upper() in NAMES or PATTERN.match(k)) and v}
    return sorted((v for v in values if len(v) >= MIN_CHARS), key=len, reverse=True)


def redact(text: object, extra: Iterable[str | None] = ()) -> str:
    """`text` with every secret from the environment (and each of `extra`, e.g. a key passed in code) as ***."""
    out = str(text)
    more = [s for s in extra if s and len(s) >= MIN_CHARS]
    for secret in sorted({*secret_values(), *more}, key=len, reverse=True):
        out = out.replace(secret, MASK)
    return out


def contains_secret(data: str | bytes) -> bool:
    """Whether `data` holds a secret from the environment (for files that cannot be rewritten)."""
    return any((s.encode() if isinstance(data, bytes) else s) in data for s in secret_values())


class RedactingFilter(logging.Filter):
    """Blanks secrets out of a log record (message, arguments and traceback) before a handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not secret_values():
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: the handler reports it; a filter must never raise
            return True
        if record.exc_info:  # a traceback can quote an error text: fold it into the message, redacted
            message += "\n" + logging.Formatter().formatException(record.exc_info)
            record.exc_info, record.exc_text = None, None
        record.msg, record.args = redact(message), None
        return True


def redact_logs(handlers: Iterable[logging.Handler]) -> None:
    """Put one RedactingFilter on each handler (handler filters also see records from child loggers)."""
    for h in handlers:
        if not any(isinstance(f, RedactingFilter) for f in h.filters):
            h.addFilter(RedactingFilter())
