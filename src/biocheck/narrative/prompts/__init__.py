"""The claim extractor's prompt: `extract.md` in this folder (package data), read and fingerprinted here.

It lives beside the extractor, not in `agent/prompts/`: that folder is an input of the `model` stage (the
tokenizer is trained on the agent's prompts), and the extractor's prompt is no part of what the agent reads.
Nothing else in the code base spells it out.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources


@cache
def extraction_prompt() -> str:
    """The system prompt of the extraction step (the passage is the user message, verbatim)."""
    return resources.files(__name__).joinpath("extract.md").read_text(encoding="utf-8").strip()


def prompt_hash() -> str:
    """sha256 (first 16 hex digits) of the prompt, to log beside an extraction."""
    return hashlib.sha256(extraction_prompt().encode()).hexdigest()[:16]
