"""The help of each parameter: the comments of profiles/base.yaml, read line by line beside its keys."""

from __future__ import annotations

import re
from dataclasses import dataclass

OPTIONAL = "(optional)"  # a base key whose help starts so is written only by the profiles that set it
Key = tuple[str, ...]

_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[^\s#\-][^:#]*?):(?: +(?P<rest>.*))?$")


@dataclass(frozen=True)
class Entry:
    """One key of base.yaml: where it is, its default as written, its help (its comments, joined)."""

    key: Key
    value: str
    help: str

    @property
    def name(self) -> str:
        return ".".join(self.key)

    @property
    def optional(self) -> bool:
        return self.help.startswith(OPTIONAL)


def entries(base_text: str) -> list[Entry]:
    """Every key of base.yaml in file order, with its help: the comment on its line and the comment lines under
    it (a blank line, a list item or the next key ends them). The comments above the first key are the file's."""
    out: list[tuple[Key, str, list[str]]] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the open sections
    current: list[str] | None = None
    for line in base_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if current is not None:
                current.append(stripped.lstrip("#").strip())
            continue
        match = _KEY_LINE.match(line)
        if not match:  # a blank line or a list item
            current = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, _, comment = (match["rest"] or "").partition(" #")
        if value.lstrip().startswith("#"):  # `key:   # help`: no value, the comment only
            value, comment = "", value.lstrip()[1:]
        key = (*(k for _, k in stack), match["key"])
        current = [comment.strip()] if comment.strip() else []
        out.append((key, value.strip(), current))
        stack.append((indent, match["key"]))
    return [Entry(key, value, " ".join(part for part in parts if part)) for key, value, parts in out]
