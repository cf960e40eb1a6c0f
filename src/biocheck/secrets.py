"""Secrets come only from the environment; `redact` blanks them out of any text we store or print.

A server may echo a key back, in an error body ("Incorrect API key provided: sk-...") or in an ordinary
answer, and that text travels into traces, reports, summaries, logs and MLflow. So redaction sits where text
leaves the program, not at each place an error is made: the file writers of `biocheck.io`, the CLI's
stdout and stderr, the log handlers and MLflow all pass what they write through `redact`/`redact_json`.

What counts as a secret (the rules are stated for users in docs/mlflow.md, "Secrets"):
- the value of every variable in NAMES or whose name matches PATTERN (`*_API_KEY`, `*_TOKEN`, ...);
- the password of a URL held by any variable (`https://user:pw@host/`) and the pair `user:pw` (what Basic
  auth encodes), a user name with no password (`https://TOKEN@host/`) of MIN_CHARS or more characters, and
  the values of its query parameters whose names look secret (`?api_key=`, `?token=`, `?sig=`, ...);
- except PLACEHOLDERS: what local servers accept as "no key" ("EMPTY" for vLLM, ...) and flag values.
A value of MIN_CHARS or more characters is blanked wherever it occurs, in any mix of the forms it is echoed
in (each character as typed, percent-encoded, an HTML entity named or numeric, JSON- or Python-escaped; a
line break anywhere in it), base64-encoded (at any offset of a longer base64 text, so `Basic user:pw` too),
and as a prefix of PREFIX_CHARS or more characters (`_prefix_chars`). A shorter value only as a whole
token (not inside a longer word), as typed or escaped, so a short key never cuts ordinary words.
"""

from __future__ import annotations

import base64
import functools
import html
import html.entities
import json
import logging
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "***"
# Named secrets BioCheck (or a library it drives) reads; any other *_API_KEY/*_TOKEN/... counts too.
NAMES = ("OPENAI_API_KEY", "NCBI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MLFLOW_TRACKING_PASSWORD",
         "MLFLOW_TRACKING_TOKEN")
PATTERN = re.compile(r".+_(API_KEY|TOKEN|SECRET|PASSWORD|SECRET_KEY|ACCESS_KEY|PRIVATE_KEY)$", re.IGNORECASE)
# Query parameters of a URL-valued variable whose values are credentials (api_key, access_token, sig, ...).
SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|credential|signature|^sig$|^auth|auth$", re.IGNORECASE)
# Values that are not secrets (compared case-insensitively): what local OpenAI-compatible servers take for
# "no key" (vLLM's docs say EMPTY, llama.cpp's server sk-no-key-required, LM Studio lm-studio, Ollama
# ollama) and flag values (HF_HUB_DISABLE_IMPLICIT_TOKEN=1): blanking those would mangle every report.
PLACEHOLDERS = frozenset({"", "-", "x", "0", "1", "true", "false", "yes", "no", "on", "off", "empty", "none",
                          "null", "dummy", "fake", "test", "placeholder", "changeme", "not-needed", "no-key",
                          "sk-no-key-required", "lm-studio", "ollama"})
# A value this long or longer is blanked wherever it occurs, even inside a word; a shorter one only as a
# whole token (no letter, digit or _ right before or after it).
MIN_CHARS = 8
# The shortest prefix of a long key that is blanked. Longer than the public prefixes that vendors put on
# every key ("sk-proj-", "github_pat_", "sk-ant-api03-" is 13), so a prefix this long holds secret characters;
# shorter prefixes are left, since what they lack (25 characters of a 40-character key) cannot be guessed.
# A key shorter than PREFIX_CHARS + 4 is blanked when at most 4 characters are missing (and MIN_CHARS remain).
PREFIX_CHARS = 16


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


def is_secret_name(name: str) -> bool:
    """Whether the variable `name` holds a secret as a whole (a key, token, password)."""
    return name.upper() in NAMES or PATTERN.match(name) is not None


# A short number ("42", "-1", "0.5") in a *_TOKEN variable is a setting, not a key: blanking it as a whole token
# would turn the same number into *** in every JSON, CSV and metric that BioCheck writes or prints.
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _real(value: str | None) -> str | None:
    value = (value or "").strip()
    if value.lower() in PLACEHOLDERS or (len(value) < MIN_CHARS and _NUMBER.fullmatch(value)):
        return None
    return value


def _url_secrets(value: str) -> set[str]:
    """The password and the secret-named query values of a URL (nothing for any other value)."""
    if "://" not in value:
        return set()
    try:
        parts = urllib.parse.urlsplit(value.strip())
        password = parts.password
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:  # not a URL after all, e.g. "http://[::1"
        return set()
    user = parts.username
    found = {password, urllib.parse.unquote(password)} if password else set()
    if user and password:  # Basic auth sends base64("user:pw"); the pair is blanked as one value
        found |= {f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"}
    elif user and len(urllib.parse.unquote(user)) >= MIN_CHARS:  # a token as the user name: https://TOKEN@host
        # (a short user name with no password, "git" or "admin", is an account, not a key)
        found |= {user, urllib.parse.unquote(user)}
    found |= {v for k, v in query if SECRET_PARAM.search(k)}
    return found


@functools.lru_cache(maxsize=4096)
def _secrets_of(name: str, value: str) -> frozenset[str]:
    """The secrets one variable holds (cached: this runs for every variable on every redaction)."""
    found = {value} if is_secret_name(name) else _url_secrets(value)
    return frozenset(v for v in map(_real, found) if v)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secret values set in the environment, longest first (so a secret inside another goes too)."""
    env = _environ() if environ is None else environ
    values: set[str] = set()
    for k, v in env.items():
        values |= _secrets_of(k, v)
    return sorted(values, key=len, reverse=True)


def _forms(value: str) -> set[str]:
    """`value` and the forms a server or a writer commonly echoes it in (for a short value, as whole tokens)."""
    quoted = {urllib.parse.quote(value), urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value)}
    quoted |= {re.sub("%[0-9A-F]{2}", lambda m: m.group().lower(), q) for q in quoted}  # %2f as well as %2F
    escaped = {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], repr(value)[1:-1],
               html.escape(value), html.escape(value, quote=False)}
    return {value, *quoted, *escaped}


def _hex(n: int, width: int) -> str:
    """`n` as hex digits that match either case (`2[fF]`)."""
    return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in f"{n:0{width}x}")


# Between any two characters of a long secret: a line break (a wrapped line, with the next line's indent), as
# typed or escaped (`\n` in a JSON text or a repr).
_WRAP = r"(?:(?:\r?\n|(?:\\r)?\\n)[ \t]*)?"


def _char(c: str) -> str:
    """Every way one character of a secret is commonly written: as typed, percent-encoded (its UTF-8 bytes),
    an HTML entity (named, decimal, hex), a JSON or Python escape."""
    o = ord(c)
    forms = [re.escape(c), "".join("%" + _hex(b, 2) for b in c.encode()), f"&#0*{o};?", f"&#[xX]0*{_hex(o, 1)};?"]
    if o < 0x10000:
        forms.append(r"\\u" + _hex(o, 4))
    if o < 0x100:
        forms.append(r"\\x" + _hex(o, 2))
    if name := html.entities.codepoint2name.get(o):
        forms.append(f"&{name};")
    forms += {"'": [r"\\'", "&apos;"], '"': [r'\\"'], "\\": [r"\\\\"], " ": [r"\+"]}.get(c, [])
    # as typed last: an escape that starts with the character itself (`\\` for `\`, `&amp;` for `&`) must be
    # tried first, or a prefix match would stop after its first character
    return "(?:" + "|".join(forms[1:] + forms[:1]) + ")"


def _prefix_chars(n: int) -> int:
    """How many leading characters of an n-character secret are blanked on their own (module docstring)."""
    return max(MIN_CHARS, min(PREFIX_CHARS, n - 4))


def _base64(value: str) -> set[str]:
    """The base64 text that `value` turns into wherever it sits in what is encoded (3 alignments, standard
    and URL-safe alphabet)."""
    raw, out = value.encode(), set()
    for k in range(3):
        start, end = -(-8 * k // 6), 8 * (k + len(raw)) // 6
        full = base64.b64encode(b"\0" * k + raw).decode()
        # the characters that depend on `value` alone, and (when it ends what is encoded) the rest with padding
        for form in (full[start:end], full[start:], full[start:].rstrip("=")):
            out |= {form, form.replace("+", "-").replace("/", "_")}
    return out


def _long(value: str) -> str:
    """The regex for a long secret: its characters in any of their forms, a line break anywhere, and any
    prefix of `_prefix_chars` or more characters (the rest as optional groups, so the longest match wins)."""
    chars = [_char(c) for c in value]
    need = _prefix_chars(len(value))
    tail = ""
    for c in reversed(chars[need:]):
        tail = f"(?:{_WRAP}{c}{tail})?"
    return _WRAP.join(chars[:need]) + tail


@functools.lru_cache(maxsize=64)
def _pattern(values: frozenset[str], binary: bool = False) -> re.Pattern:
    """One regex for every value, longest first: a long value in any mix of its forms (`_long`) and its
    base64; a short one in its common forms, only as a whole token."""
    alternatives = []
    for v in sorted(values, key=len, reverse=True):
        user, _, password = v.rpartition(":")
        if user and password in values:  # a URL's "user:pw": as text the password's own pattern blanks it,
            # leaving the user name readable; only base64 (Basic auth) needs the pair
            alternatives += map(re.escape, sorted(_base64(v), key=len, reverse=True))
        elif len(v) >= MIN_CHARS:
            alternatives += [_long(v), *map(re.escape, sorted(_base64(v), key=len, reverse=True))]
        else:
            alternatives += [rf"(?<!\w){re.escape(f)}(?!\w)" for f in sorted(_forms(v), key=len, reverse=True)]
    # A lookahead on the characters a match can start with lets the regex engine skip the rest of the text
    # fast (half the cost on a trace; bench/redact_speed.py); a key of one or two characters has empty forms
    starts = {f[0] for v in values for f in (*_forms(v), *_base64(v)) if f} | {"%", "&", "\\"}
    source = "(?=[" + "".join(map(re.escape, sorted(starts))) + "])(?:" + "|".join(alternatives) + ")"
    return re.compile(source.encode() if binary else source)


def _values(extra: Iterable[str | None] = ()) -> frozenset[str]:
    return frozenset({*secret_values(), *(v for v in map(_real, extra) if v)})


def redactor(extra: Iterable[str | None] = ()) -> Callable[[str], str] | None:
    """A function that blanks every secret (from the environment, and each of `extra`) out of a str; None
    when there is none to blank, so that a writer skips the work."""
    values = _values(extra)
    if not values:
        return None
    return functools.partial(_pattern(values).sub, MASK)


def redact(text: object, extra: Iterable[str | None] = ()) -> str:
    """`text` with every secret from the environment (and each of `extra`, e.g. a key passed in code) as ***."""
    out = str(text)
    sub = redactor(extra)
    return sub(out) if sub else out


def redact_json(obj: Any) -> Any:
    """`obj` (JSON-like data) with the secrets blanked from every string in it, dict keys included; numbers
    and the structure are left alone, so the JSON written from it stays valid. `obj` itself without secrets."""
    return json_redactor()(obj)


def json_redactor() -> Callable[[Any], Any]:
    """`redact_json` with the secrets looked up once (for a writer of many rows)."""
    sub = redactor()
    return (lambda obj: obj) if sub is None else functools.partial(_walk, sub=sub)


def _walk(obj: Any, sub: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return sub(obj)
    if isinstance(obj, Mapping):
        return {sub(k) if isinstance(k, str) else k: _walk(v, sub) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_walk(v, sub) for v in obj]
    return obj


def contains_secret(data: str | bytes) -> bool:
    """Whether `data` holds a secret from the environment (for files that cannot be rewritten)."""
    values = _values()
    if not values:
        return False
    return _pattern(values, isinstance(data, bytes)).search(data) is not None


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
