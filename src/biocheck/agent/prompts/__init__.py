"""The agent's prompts: the *.md files in this folder (package data), filled and fingerprinted here.

The same texts drive `biocheck check`, evaluation and RL training: nothing else in the code base
spells out a prompt. A `Prompts` holds the two numbers the texts state (the search budget and the
papers per search) and also gives the tool's schema, so the system prompt and the tool description
can never disagree. `hash()` covers everything the model reads and is logged with every episode and run.

`report=False` is the label-only variant (the PMSearch baseline): the same search instructions, but the
final answer is a label, not a report; its texts are the `*_label_only.md` files beside the others.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from biocheck.agent.limits import MAX_SEARCHES

NAMES = ("system", "user", "intervention", "refusal")
LABEL_ONLY = ("system", "intervention")  # the texts that ask for the report; the others are shared


@cache
def _raw(name: str) -> str:
    return resources.files("biocheck.agent.prompts").joinpath(f"{name}.md").read_text(encoding="utf-8").strip()


@dataclass(frozen=True)
class Prompts:
    max_searches: int = MAX_SEARCHES
    papers_per_search: int = 5
    report: bool = True  # False: the label-only variant (final answer = a label, no report)

    @classmethod
    def for_tool(cls, max_searches: int, tool: Any) -> Prompts:
        """The prompts for a search tool: papers per search is what the tool returns (`tool.max_results`)."""
        return cls(max_searches=max_searches, papers_per_search=int(tool.max_results))

    def _file(self, name: str) -> str:
        return name if self.report or name not in LABEL_ONLY else f"{name}_label_only"

    def _fill(self, name: str, **extra: str) -> str:
        return _raw(self._file(name)).format(max_searches=self.max_searches, papers_per_search=self.papers_per_search,
                                             **extra)

    def system(self) -> str:
        return self._fill("system")

    def user(self, claim: str) -> str:
        return self._fill("user", claim=claim)

    def intervention(self) -> str:
        return self._fill("intervention")

    def refusal(self) -> str:
        return self._fill("refusal")

    def messages(self, claim: str) -> list[dict[str, str]]:
        """The conversation an episode starts from (the agent's, and TRL's dataset rows)."""
        return [{"role": "system", "content": self.system()}, {"role": "user", "content": self.user(claim)}]

    def tool_schema(self) -> dict[str, Any]:
        from biocheck.agent.tools import tool_schema

        return tool_schema(self.papers_per_search)

    def hash(self) -> str:
        """sha256 (first 16 hex digits) over every filled prompt, the user template and the tool schema."""
        h = hashlib.sha256()
        for name in NAMES:
            # The file's name is hashed, so the variants differ even where a text is shared; the report
            # variant keeps its historical hash (the names are then the plain ones).
            text = _raw(self._file(name)) if name == "user" else self._fill(name)
            h.update(self._file(name).encode() + b"\0" + text.encode() + b"\0")
        h.update(json.dumps(self.tool_schema(), sort_keys=True).encode())
        return h.hexdigest()[:16]


def prompt_texts() -> list[str]:
    """The prompts of the report-writing agent the model is trained as (`NAMES`),
    sorted by name; evaluation-only variants (the label-only prompts of `pmsearch`) are left out."""
    root = resources.files(__name__)
    return [root.joinpath(f"{name}.md").read_text(encoding="utf-8") for name in sorted(NAMES)]
