"""The agent's prompts: the *.md files in this folder (package data), filled and fingerprinted here.

The same texts drive `biocheck check`, evaluation and RL training: nothing else in the code base
spells out a prompt. Their combined hash is logged with every episode and run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

NAMES = ("system", "user", "intervention", "refusal")


@cache
def _raw(name: str) -> str:
    return resources.files("biocheck.agent.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8").strip()


@dataclass(frozen=True)
class Prompts:
    max_searches: int = 5
    papers_per_search: int = 5

    def _fill(self, name: str, **extra: str) -> str:
        return _raw(name).format(max_searches=self.max_searches, papers_per_search=self.papers_per_search, **extra)

    def system(self) -> str:
        return self._fill("system")

    def user(self, claim: str) -> str:
        return self._fill("user", claim=claim)

    def intervention(self) -> str:
        return self._fill("intervention")

    def refusal(self) -> str:
        return self._fill("refusal")


def prompt_hash() -> str:
    """sha256 (first 16 hex digits) over every prompt template and the tool description."""
    from biocheck.agent.tools import TOOL_SCHEMA

    h = hashlib.sha256()
    for name in NAMES:
        h.update(name.encode() + b"\0" + _raw(name).encode() + b"\0")
    h.update(repr(TOOL_SCHEMA).encode())
    return h.hexdigest()[:16]
