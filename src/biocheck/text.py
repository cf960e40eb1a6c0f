"""The project's one sentence splitter: search snippets (agent/tools.py), CER's candidates and the judge's
cues (rewards/judge/cues.py, align_judge.py) all cut text the same way, so it lives below all of them."""

from __future__ import annotations

import re

# A sentence ends at . ! or ? followed by space and a capital, digit or opening bracket/quote: good
# enough for abstracts (a rare "e.g. Patients" split costs one sentence, not a wrong answer).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\[\"'“])")


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of `text`'s sentences: split after . ! ? and white space, before a capital, a digit, an
    opening bracket or a quote. The one splitter of the project (search snippets, CER, the judge's cues)."""
    text, spans, at = text or "", [], 0
    for part in _SENTENCE_END.split(text):
        start = text.index(part, at)
        spans.append((start, start + len(part)))
        at = start + len(part)
    return spans


def split_sentences(text: str) -> list[str]:
    """The sentences of `text`, each a verbatim (stripped) piece of it."""
    return [s for a, b in sentence_spans(text) if (s := (text or "")[a:b].strip())]
