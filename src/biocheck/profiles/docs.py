"""Each parameter's help, default and profile values as text: `biocheck profile explain` and docs/parameters.md."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.profiles.helptext import Entry, Key, entries
from biocheck.profiles.render import BASE, inline, load, names, read, values

DOC_COMMAND = "biocheck profile doc --out docs/parameters.md"


@dataclass(frozen=True)
class Row:
    """One key of the base: its help, default, whether it holds keys, and each profile's own value and why."""

    entry: Entry
    default: str
    section: bool
    profiles: dict[str, tuple[str, str]]  # name -> (value, why), for the profiles that set this key


def rows(folder: Path) -> list[Row]:
    base_path = folder / BASE
    base_text = read(base_path)
    tree = load(base_path, base_text)
    own = {name: (values(path), {e.key: e.help for e in entries(read(path))}) for name, path in names(folder).items()}

    def default(key: Key) -> Any:
        node = tree
        for k in key:
            node = node[k]
        return node

    out = []
    for e in entries(base_text):
        value = default(e.key)
        section = isinstance(value, dict) and not value.fa.flow_style()  # cer: {...} is one value, shown whole
        out.append(Row(e, "" if section else inline(value), section,
                       {name: (inline(vals[e.key]), whys.get(e.key, "")) for name, (vals, whys) in own.items()
                        if e.key in vals}))
    return out


def explain(folder: Path, key: str | None = None) -> str:
    """The help of one key, of every key of a section, or (no key) of every key: default, help, profile values."""
    all_rows = rows(folder)
    chosen = [r for r in all_rows if key is None or r.entry.name == key or r.entry.name.startswith(f"{key}.")]
    if not chosen:
        close = difflib.get_close_matches(key or "", [r.entry.name for r in all_rows], n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError(f"{folder / BASE}: no parameter {key!r}; {hint}give a section (agent) or a key "
                         "(agent.max_searches); `biocheck profile explain` lists them all.")
    lines = []
    for r in chosen:
        lines.append(f"{r.entry.name}:" if r.section else f"{r.entry.name}: {r.default}")
        if r.entry.help:
            lines.append(f"    {r.entry.help}")
        for name, (value, why) in r.profiles.items():
            if not r.section or value:
                lines.append(f"    {name}: {value}" + (f"  ({why})" if why else ""))
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`" if text else ""


def markdown(folder: Path) -> str:
    """docs/parameters.md: per section, every key with its default, each profile's value and its help."""
    all_rows = rows(folder)
    profiles = list(names(folder))
    out = [
        "# Parameters",
        "",
        f"<!-- Written by `{DOC_COMMAND}` from profiles/; edit profiles/base.yaml (defaults, help) or a",
        "profile's file, then rerun it: tests/profiles/test_profiles.py fails while this page is stale. -->",
        "",
        "Every key of `params.yaml`, the file DVC reads: its default, stated once with its help in",
        "[profiles/base.yaml](../profiles/base.yaml), and the value each profile sets where it differs (blank: the",
        "default). A profile's file ([profiles/](../profiles)) holds only those values, each with why;",
        "`biocheck profile use NAME` writes the base with them to `params.yaml`, and `biocheck profile explain KEY`",
        "prints a key's help with each profile's reason. A key whose help starts with `(optional)` is in a",
        "profile's `params.yaml` only when the profile sets it.",
    ]
    head = ["| key | default | " + " | ".join(profiles) + " | help |", "|---|---|" + "---|" * len(profiles) + "---|"]
    for r in all_rows:
        if len(r.entry.key) == 1:  # a section: a heading, its help, a table of its keys
            out += ["", f"## {r.entry.name}", "", *([r.entry.help, ""] if r.section and r.entry.help else []), *head]
            if r.section:
                continue
        name = ".".join(r.entry.key[1:]) or r.entry.name
        shown = [_code(r.profiles[p][0]) if p in r.profiles and not r.section else "" for p in profiles]
        out.append(f"| `{name}` | {_code(r.default)} | " + " | ".join(shown) + f" | {_cell(r.entry.help)} |")
    return "\n".join(out) + "\n"
