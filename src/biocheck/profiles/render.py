"""A profile's params.yaml: profiles/base.yaml with the profile's values, in the form DVC writes back, the base's
comments kept. YAML text only: `biocheck.params` parses what this renders, `biocheck.pipeline` checks its values."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from biocheck.io import InputError
from biocheck.profiles.helptext import Key, entries

BASE = "base.yaml"

# The lines under a profile's description in the params.yaml it renders to.
HEADER = """\
# Written by `biocheck profile use {name}`: profiles/base.yaml (every key's default and help) with the values of
# profiles/{name}.yaml. Switch profile with `biocheck profile use NAME` (`biocheck profile list`), then `dvc repro`.
# Written as DVC writes it back after `dvc exp run -S key=value` (lists one item a line, an empty value is
# null: `layer:` = `layer: null`), so such a run changes only that key's line (tests/test_params_format.py).
"""


def _yaml() -> YAML:
    """ruamel's round-trip YAML as DVC sets it up (dvc.utils.serialize._yaml): its dump is DVC's write-back form."""
    y = YAML()
    y.default_flow_style = False
    return y


def is_override(path: Path) -> bool:
    """A profile's override file: a YAML file beside a base.yaml, other than the base itself."""
    return path.name != BASE and path.suffix == ".yaml" and (path.parent / BASE).is_file()


def names(folder: Path) -> dict[str, Path]:
    """The profiles of a folder, by name (base.yaml is no profile: every profile starts from it)."""
    return {p.stem: p for p in sorted(folder.glob("*.yaml")) if p.name != BASE}


def read(path: Path) -> str:
    """A profile file's text; a clear InputError when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: no such profile file; the profiles are in {path.parent}/ "
                         "(`biocheck profile list`).") from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read the profile ({getattr(e, 'strerror', None) or e}).") from None


def load(path: Path, text: str) -> Any:
    """YAML text as ruamel's round-trip tree (comments kept); a clear InputError naming the file and line."""
    try:
        return _yaml().load(text)
    except YAMLError as e:  # a duplicated key too: ruamel refuses it
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{path}: not valid YAML{at}: {problem}; fix the file.") from None


def _plain(value: Any) -> Any:
    """An override's value without its comments (they say why the profile differs; the render keeps the base's)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _replace_seq(old: Any, items: list[Any]) -> CommentedSeq:
    """A new list in place of a base's, keeping the comment on its key's line and the lines after its last item."""
    new = CommentedSeq(items)
    if isinstance(old, CommentedSeq):
        new.ca.comment = old.ca.comment
        if old and items and (last := old.ca.items.get(len(old) - 1)):
            new.ca.items[len(items) - 1] = last
    return new


def _merge(base: CommentedMap, override: Any, where: Key, path: Path, given: set[Key]) -> None:
    if not isinstance(override, dict):
        shown = ".".join(where) or "the top level"
        raise InputError(f"{path}: {shown} is a section of keys in profiles/{BASE}, not a single value; give its "
                         f"keys ({'.'.join((*where, 'KEY')) if where else 'SECTION'}: ...) instead.")
    for key, value in override.items():
        at = (*where, str(key))
        if key not in base:
            raise InputError(f"{path}: key {'.'.join(at)} is not in profiles/{BASE}; fix its name, or add it to "
                             f"base.yaml with its default and help first.")
        given.add(at)
        old = base[key]
        if isinstance(old, dict):
            _merge(old, value, at, path, given)
        elif isinstance(value, list):
            base[key] = _replace_seq(old, _plain(value))
        else:  # a scalar, or a mapping where the base has one value (evaluate.baseline_model per system)
            base[key] = _plain(value)


def _drop_unset(tree: CommentedMap, optional: set[Key], given: set[Key], where: Key = ()) -> None:
    for key in list(tree):
        at = (*where, str(key))
        if at in optional and at not in given:
            del tree[key]
        elif isinstance(tree[key], dict):
            _drop_unset(tree[key], optional, given, at)


def description(text: str) -> list[str]:
    """A profile file's description: its first comment lines, up to a line `#` alone (what follows is about the
    file, not the profile)."""
    out = []
    for line in text.splitlines():
        if not line.startswith("#") or line.strip() == "#":
            break
        out.append(line)
    return out


def overrides(path: Path) -> Any:
    """A profile's own values (as ruamel loads them: numbers keep the form they are written in)."""
    data = load(path, read(path))
    if data is None:
        return CommentedMap()
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping of sections (profile:, data:, ...), found "
                         f"{type(data).__name__}.")
    return data


def render(path: Path) -> str:
    """The params.yaml of the profile file `path`: its folder's base.yaml with the profile's values."""
    base_path = path.parent / BASE
    base_text = read(base_path)
    tree = load(base_path, base_text)
    optional = {e.key for e in entries(base_text) if e.optional}
    given: set[Key] = set()
    _merge(tree, overrides(path), (), path, given)
    _drop_unset(tree, optional, given)
    out = io.StringIO()
    _yaml().dump(tree, out)
    body = out.getvalue().splitlines(keepends=True)
    while body and body[0].startswith("#"):  # base.yaml's own header: the profile's replaces it
        body.pop(0)
    head = [line + "\n" for line in description(read(path))]
    return "".join(head) + HEADER.format(name=path.stem) + "".join(body)


def values(path: Path) -> dict[Key, Any]:
    """A profile's own values by key (a mapping given where the base has one value counts as one value)."""
    base = load(path.parent / BASE, read(path.parent / BASE))
    out: dict[Key, Any] = {}

    def walk(node: Any, base_node: Any, where: Key) -> None:
        for key, value in node.items():
            at = (*where, str(key))
            if isinstance(base_node, dict) and isinstance(base_node.get(key), dict) and isinstance(value, dict):
                walk(value, base_node[key], at)
            else:
                out[at] = value

    walk(overrides(path), base, ())
    return out


def inline(value: Any) -> str:
    """A value as one line of YAML, written as in its file (1.0e-4 stays 1.0e-4; null for an empty value)."""
    if value is None:
        return "null"
    y = _yaml()
    y.default_flow_style = True
    y.width = 10**6
    out = io.StringIO()
    y.dump(_plain(value), out)
    text = out.getvalue().strip()
    return text.removesuffix("...").strip()
