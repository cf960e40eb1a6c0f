"""`extract`: a passage's atomic, check-worthy claims, each with the span of text it came from.

With a chat model (any backend: transformers, OpenAI-compatible, vLLM, scripted) the extraction prompt asks for
JSON: claims, each with the verbatim passage text it comes from ("quote"), and the skipped text with a reason.
Each quote is found in the passage: verbatim first, then ignoring case and runs of white space. An answer that
is not that JSON, or that quotes text the passage lacks, is not trusted in part: the sentence rule
(`sentences.py`) extracts instead, and the Extraction's note says why. Without a model, the sentence rule.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

from biocheck.io import InputError
from biocheck.llm.base import ChatLLM
from biocheck.narrative.prompts import extraction_prompt
from biocheck.narrative.schema import SKIP_REASONS, ExtractedClaim, Extraction, SkippedSpan, SkipReason, Span
from biocheck.narrative.sentences import sentences, skip_reason

# The longest passage checked at once: a long article's worth of text (about 3,000 words). Every claim is a
# full agent episode, so a longer text is better checked in parts the user chooses.
MAX_PASSAGE_CHARS = 20_000
_FENCE = re.compile(r"^```[a-zA-Z]*\s*(.*?)\s*```$", re.S)


class _FormatError(ValueError):
    """The model's answer does not follow the extraction format (the message says how)."""


def check_passage(passage: str | bytes) -> str:
    """The passage as text, or one line saying why it cannot be checked: empty, too long, or not text."""
    if isinstance(passage, bytes):
        try:
            passage = passage.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"the passage is not UTF-8 text (byte {e.start} is {passage[e.start:e.start + 1]!r}); "
                             "give plain text.") from None
    if not isinstance(passage, str):
        raise InputError(f"the passage must be text, not {type(passage).__name__}.")
    if "\0" in passage:
        raise InputError(f"the passage holds a NUL byte (character {passage.index(chr(0))}): it looks like a binary "
                         "file; give plain text.")
    try:
        passage.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"the passage is not valid text (a lone surrogate at character {e.start}); "
                         "give plain UTF-8 text.") from None
    if not passage.strip():
        raise InputError("no text to check: the passage is empty or only white space; give the text to fact-check.")
    if len(passage) > MAX_PASSAGE_CHARS:
        raise InputError(f"the passage is {len(passage):,} characters, over the limit of {MAX_PASSAGE_CHARS:,}; "
                         f"check it in parts of at most {MAX_PASSAGE_CHARS:,} characters.")
    return passage


def extract(passage: str | bytes, chat: ChatLLM | None = None) -> Extraction:
    """The claims of `passage` and the text skipped as no claim (module docstring); bad input: InputError."""
    passage = check_passage(passage)
    if chat is None:
        return by_sentences(passage)
    answer = chat.chat([{"role": "system", "content": extraction_prompt()}, {"role": "user", "content": passage}],
                       [])
    try:
        return _from_answer(passage, answer.content)
    except _FormatError as e:
        return by_sentences(passage, note=f"the model's extraction was not used ({e}); "
                                          "claims were found by the sentence rule instead.")


def by_sentences(passage: str, note: str = "") -> Extraction:
    """The sentence rule: every check-worthy sentence is one claim, the others are skipped with their reason."""
    claims, skipped = [], []
    for s in sentences(passage):
        text = passage[s.start:s.end]
        reason = skip_reason(text)
        if reason is None:
            claims.append(ExtractedClaim(s.start, s.end, text=text, method="sentences"))
        else:
            skipped.append(SkippedSpan(s.start, s.end, reason=reason))
    return Extraction(passage, tuple(claims), tuple(skipped), method="sentences", note=note)


def find_span(passage: str, quote: str) -> Span | None:
    """Where `quote` is in `passage`: verbatim first, then ignoring case and runs of white space; None if not."""
    quote = quote.strip()
    if not quote:
        return None
    at = passage.find(quote)
    if at >= 0:
        return Span(at, at + len(quote))
    text, origin = _normalised(passage)
    needle, _ = _normalised(quote)
    at = text.find(needle.strip())
    if at < 0:
        return None
    return Span(origin[at], origin[at + len(needle.strip()) - 1] + 1)


def _normalised(text: str) -> tuple[str, list[int]]:
    """`text` lower-cased with each run of white space as one space, and for each of its characters the index
    in `text` it came from (lower-casing can lengthen a character: "İ" -> "i̇")."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        if ch.isspace():
            if out and out[-1] == " ":
                continue
            out.append(" ")
            origin.append(i)
        else:
            for c in ch.lower():
                out.append(c)
                origin.append(i)
    return "".join(out), origin


def _from_answer(passage: str, content: str) -> Extraction:
    obj = _json_object(content)
    claims = [_claim(passage, item, i) for i, item in enumerate(_list(obj, "claims"))]
    skipped = [_skipped(passage, item, i) for i, item in enumerate(_list(obj, "skipped"))]
    return Extraction(passage, tuple(claims), tuple(skipped), method="model")


def _json_object(content: str) -> dict[str, Any]:
    text = content.strip()
    fenced = _FENCE.match(text)  # models often wrap JSON in a ```json fence
    if fenced:
        text = fenced.group(1)
    try:
        obj = json.loads(text)
    except ValueError:
        raise _FormatError(f"the answer is not JSON: {content.strip()[:60]!r}") from None
    if not isinstance(obj, dict):
        raise _FormatError(f"the answer is JSON {type(obj).__name__}, not an object with 'claims'")
    return obj


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key, [] if key == "skipped" else None)  # "skipped" may be left out; "claims" may not
    if not isinstance(value, list):
        raise _FormatError(f"'{key}' must be a list")
    return value


def _field(item: Any, key: str, where: str) -> str:
    if not isinstance(item, dict) or not isinstance(item.get(key), str) or not item[key].strip():
        raise _FormatError(f"{where} has no text at '{key}'")
    return item[key].strip()


def _quoted(passage: str, quote: str, where: str) -> Span:
    span = find_span(passage, quote)
    if span is None:
        raise _FormatError(f"{where}'s quote is not in the passage: {quote[:60]!r}")
    return span


def _claim(passage: str, item: Any, i: int) -> ExtractedClaim:
    where = f"claim {i + 1}"
    text = _field(item, "claim", where)
    span = _quoted(passage, _field(item, "quote", where), where)
    return ExtractedClaim(span.start, span.end, text=" ".join(text.split()), method="model")


def _skipped(passage: str, item: Any, i: int) -> SkippedSpan:
    where = f"skipped {i + 1}"
    reason = _field(item, "reason", where).lower()
    if reason not in SKIP_REASONS:
        raise _FormatError(f"{where}'s reason {reason[:30]!r} is none of {', '.join(SKIP_REASONS)}")
    span = _quoted(passage, _field(item, "quote", where), where)
    return SkippedSpan(span.start, span.end, reason=cast(SkipReason, reason))
