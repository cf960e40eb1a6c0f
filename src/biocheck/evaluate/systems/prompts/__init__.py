"""The baselines' prompts: the *.md files in this folder (package data), filled and hashed here.

One file per message a baseline sends, named `<system>_<part>.md` (no_retrieval_system.md, cer_user.md,
fire_final.md, ...). `prompt_hash(system)` covers every template of that system and the label wording
filled into them, so editing one word changes that system's fingerprint (only it reruns) and the hash
is logged with every episode (Episode.prompt_hash), as the agent's prompts are.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from typing import Any

from biocheck.labels import DISPLAY, Label

_PACKAGE = "biocheck.evaluate.systems.prompts"
# "SUPPORTED, REFUTED or NOT ENOUGH INFORMATION": spelt from biocheck.labels, never in a template.
_WORDS = [DISPLAY[label] for label in Label]
LABELS_TEXT = ", ".join(_WORDS[:-1]) + " or " + _WORDS[-1]


@cache
def template(name: str) -> str:
    return resources.files(_PACKAGE).joinpath(f"{name}.md").read_text(encoding="utf-8").strip()


@cache
def names(system: str) -> tuple[str, ...]:
    """Every template of one system, sorted (a new file changes the hash too)."""
    files = (f.name for f in resources.files(_PACKAGE).iterdir() if f.name.endswith(".md"))
    return tuple(sorted(n[:-3] for n in files if n.startswith(f"{system}_")))


def fill(name: str, **values: Any) -> str:
    """A template with its placeholders filled; `{labels}` is always the label wording."""
    return template(name).format(labels=LABELS_TEXT, **values)


def prompt_hash(system: str, **constants: Any) -> str:
    """sha256 (16 hex digits) over the system's templates, the label wording and the numbers they state."""
    found = names(system)
    if not found:
        raise ValueError(f"no prompt files {system}_*.md in {_PACKAGE}")
    h = hashlib.sha256(LABELS_TEXT.encode() + b"\0" + json.dumps(constants, sort_keys=True).encode() + b"\0")
    for name in found:
        h.update(name.encode() + b"\0" + template(name).encode() + b"\0")
    return h.hexdigest()[:16]
