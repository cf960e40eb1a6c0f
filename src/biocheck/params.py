"""params.yaml as plain data: read it, map one section onto a stage's Config dataclass, and back.

A profile's file (profiles/NAME.yaml, beside profiles/base.yaml) loads as the base with its values, so
`--params profiles/smol.yaml` runs the smol profile as `biocheck profile use smol` would write it.

params.yaml is plain data (one section per stage); each stage's Config dataclass lives beside the
stage. This module knows no stage: `biocheck.pipeline` says which section feeds which Config. Every
error names the file, the key and what is accepted.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import operator
import os
import stat
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import annotated_types as at
import yaml

from biocheck import profiles
from biocheck.io import InputError, file_kind

DEFAULT_PARAMS = Path("params.yaml")
T = TypeVar("T")

class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key given twice in one mapping is an error: PyYAML lets the last
    one win silently, so a duplicated `train:` section would drop the first one's values unseen."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice (first on line {seen[key] + 1}); keep one",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line
            except TypeError:  # an unhashable key: the base class says so
                pass
        return super().construct_mapping(node, deep)


class Params(dict):
    """The sections of a parameters file; `path` is where they came from (error messages name it)."""

    path: Path = DEFAULT_PARAMS


def plain(cfg: Any) -> dict[str, Any]:
    """A config dataclass as plain data (paths as strings): for MLflow params, manifests and run keys."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}


def load_params(path: Path | str = DEFAULT_PARAMS) -> dict[str, Any]:
    """The parameters file as a dict of sections; a clear InputError for anything else."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except OSError as e:  # missing, or a name the system refuses (too long, a file where a folder should be)
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise InputError(f"{path}: no such parameters file (run from the repo root, or pass --params).") from None
        raise InputError(f"{path}: cannot open the parameters file ({e.strerror or e}); give another --params.") from None
    if stat.S_ISDIR(mode):
        raise InputError(f"{path}: is a folder; --params wants a parameters file such as params.yaml.")
    if kind := file_kind(mode):  # reading a FIFO would block, /dev/zero never ends
        raise InputError(f"{path}: is a {kind}, not a parameters file; give a file such as params.yaml.")
    try:
        # a profile's override file (profiles/smol.yaml) reads as the params.yaml `biocheck profile use` writes
        text = profiles.render(path) if profiles.is_override(path) else path.read_text(encoding="utf-8")
        if not text.strip():
            raise InputError(f"{path}: the parameters file is empty; restore it (`biocheck profile use quickstart`) "
                             "or give another --params.")
        params = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (safe)
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text (byte {e.start}); save the parameters file as UTF-8.") from None
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"{path}: not valid YAML{at}: {problem}; fix the file or restore it with "
                         "`biocheck profile use quickstart`.") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read the parameters file ({e.strerror or e}).") from None
    if params is None:  # comments only: as empty as a file of no bytes
        raise InputError(f"{path}: the parameters file holds no sections, only comments; restore it (`biocheck "
                         "profile use quickstart`) or give another --params.")
    if not isinstance(params, dict):
        raise InputError(f"{path}: expected a mapping of sections (fetch:, data:, ...) at the top level, "
                         f"found {type(params).__name__}.")
    odd = [k for k in params if not isinstance(k, str)]
    if odd:
        raise InputError(f"{path}: {odd[0]!r} is not a section name; the top level holds sections (fetch:, data:, ...).")
    out = Params(params)
    out.path = path
    return out


def source(params: dict[str, Any]) -> str:
    """The file the params came from, for error messages ("params.yaml" when built in code)."""
    return str(getattr(params, "path", DEFAULT_PARAMS))


def raw_section(params: dict[str, Any], name: str) -> dict[str, Any]:
    """params[name] as a dict ({} when absent); InputError when it is not a mapping."""
    values = params.get(name)
    if values is None and name in params:  # `agent:` with nothing under it: not a request for the defaults
        raise InputError(f"{source(params)}: section '{name}' is empty (`{name}:` with no keys under it); give its "
                         f"keys, or delete the line `{name}:` to run with the defaults.")
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise InputError(f"{source(params)}: section '{name}' must be a mapping of keys, "
                         f"found {type(values).__name__} {values!r:.60}.")
    return dict(values)


def section(params: dict[str, Any], name: str, cls: type[T], values: dict[str, Any] | None = None,
            options: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build `cls` from params[name] (or `values`); unknown keys are an error naming the key and the choices.

    `overrides` are command-line options: they win over the file, and an error they cause names the
    option ("-n 0: ..."), not the file. `options` maps a field to its option when the option is not
    called `--field-name` (e.g. {"max_results": "-n"}).
    """
    values = raw_section(params, name) if values is None else dict(values)
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(map(str, set(values) - fields))
    if unknown:
        raise InputError(f"{source(params)}: unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; "
                         f"'{name}' accepts {sorted(fields)}.")
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return _build(cls, {**values, **given}, f"{name}.")
    except (TypeError, ValueError) as e:
        if given and _builds(cls, values):  # the file alone is fine: a command-line option broke it
            culprits = [k for k in given if not _builds(cls, {**values, k: given[k]})] or list(given)
            said = ", ".join(f"{(options or {}).get(k) or '--' + k.replace('_', '-')} {_shown(given[k])}"
                             for k in culprits)
            raise InputError(f"{said}: {e}") from None
        raise InputError(f"{source(params)}, section '{name}': {e}") from None


def _build(cls: type[T], values: dict[str, Any], prefix: str = "") -> T:
    check_types(cls, values, prefix)
    try:
        obj = cls(**values)  # the Config's own checks speak first: their messages are the most specific
    except (AttributeError, KeyError, IndexError, ZeroDivisionError) as e:  # a check tripped on a bad shape
        check_containers(cls, values, prefix)
        raise ValueError(f"{prefix.rstrip('.')}: {type(e).__name__}: {e}") from None
    check_containers(cls, values, prefix)
    return obj


def _builds(cls: type, values: dict[str, Any]) -> bool:
    try:
        _build(cls, values)
    except (TypeError, ValueError):
        return False
    return True


def _shown(value: Any) -> str:
    """An option's value as it was typed."""
    return ",".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def check_types(cls: type, values: dict[str, Any], prefix: str = "") -> None:
    """ValueError naming the key when a value's type does not fit a simple field (int, float, bool, str,
    Path, or one of them | None) or breaks the field's declared bound (`Count`, `Positive`, ...); containers
    are left to the Config's own checks. `prefix` names a nested section in the message ("sft.")."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for key, errors in _field_errors(cls, values).items():
        allowed = _simple(hints[key])
        if allowed is None:
            continue
        bound = next((_BOUNDS[e["type"]] for e in errors if e["type"] in _BOUNDS), None)
        if bound is None and any(e["type"] == "predicate_failed" for e in errors):  # bounds.py's only predicate
            raise ValueError(f"{prefix}{key} must be a finite number, not {values[key]!r}")
        if bound is None:  # the type, not a bound: pydantic checks bounds only once the type fits
            raise ValueError(f"{prefix}{key} must be {' or '.join(_NAMES[t] for t in allowed)}, not {values[key]!r}")
        raise ValueError(f"{prefix}{key} must be {bound[0]} {_limit(hints[key], bound)}, not {values[key]!r}")


def check_containers(cls: type, values: dict[str, Any], prefix: str = "") -> None:
    """ValueError naming the key when a container field's value has the wrong shape (a None where a dict of
    lists belongs, a "3" in a dict of ints)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    for key in _field_errors(cls, values):
        if _simple(hints[key]) is None:
            raise ValueError(f"{prefix}{key} must be {_shown_type(hints[key])}, not {values[key]!r:.80}")


def check_nested(cls: type, values: dict[str, Any], name: str) -> None:
    """A sub-section (train.sft, model.tiny) checked like a section: known keys, types and bounds."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(map(str, set(values) - fields))
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; '{name}' accepts "
                         f"{sorted(fields)}")
    check_types(cls, values, prefix=f"{name}.")


def _field_errors(cls: type, values: dict[str, Any]) -> dict[str, list[Any]]:
    """pydantic's errors for each given field of `cls`, by key, in the order of `values`. Strict, as YAML
    gives typed values: "3" is no int, true no number, None no dict; a path may be a non-empty string."""
    import pydantic

    given = {k: v for k, v in values.items() if k in _fields_adapter(cls)[1]}
    try:
        _fields_adapter(cls)[0].validate_python(given, strict=True)
    except pydantic.ValidationError as e:
        found: dict[str, list[Any]] = {}
        for err in e.errors():
            found.setdefault(str(err["loc"][0]), []).append(err)
        return {k: found[k] for k in values if k in found}
    return {}


@functools.cache
def _fields_adapter(cls: type) -> tuple[Any, frozenset[str]]:
    """A pydantic validator of the fields of Config `cls` that pydantic knows how to check (all fields
    optional: defaults are the dataclass's), and their names."""
    import pydantic
    import typing_extensions

    hints = {k: _for_pydantic(h) for k, h in typing.get_type_hints(cls, include_extras=True).items()
             if k in {f.name for f in dataclasses.fields(cls)}}  # type: ignore[arg-type]
    known = {k: h for k, h in hints.items() if _validates(h)}
    # typing_extensions' TypedDict (pydantic's own dependency): pydantic refuses typing's before Python 3.12
    shape = typing_extensions.TypedDict(f"{cls.__name__}Fields", {k: typing.NotRequired[h] for k, h in known.items()})  # type: ignore[misc]
    return pydantic.TypeAdapter(shape), frozenset(known)


def _validates(hint: Any) -> bool:
    import pydantic

    try:
        pydantic.TypeAdapter(hint)
    except (pydantic.PydanticSchemaGenerationError, TypeError):
        return False
    return True


def _non_empty_path(value: Any) -> Any:
    """A Path, or a non-empty string made one (YAML has no path type); "" would be Path("."), the current
    folder, where no output may be written."""
    if isinstance(value, str) and value.strip():
        return Path(value)
    if isinstance(value, Path):
        return value
    raise ValueError("a non-empty path")


def _for_pydantic(hint: Any) -> Any:
    """`hint` with each Path made `_path_type()` (inside Annotated and unions too)."""
    if hint is Path:
        return _path_type()
    if typing.get_origin(hint) is Annotated:
        base, *meta = typing.get_args(hint)
        return Annotated[(_for_pydantic(base), *meta)]  # type: ignore[valid-type]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return functools.reduce(operator.or_, (_for_pydantic(a) for a in typing.get_args(hint)))
    return hint


@functools.cache
def _path_type() -> Any:
    """A Path or a non-empty string, even in strict mode."""
    import pydantic

    return Annotated[Path, pydantic.BeforeValidator(_non_empty_path)]


def _shown_type(hint: Any) -> str:
    return str(hint).replace("typing.", "").replace("NoneType", "null")


# pydantic's bound errors: what the message says, and the annotated_types class whose value it names
_BOUNDS = {"greater_than_equal": (">=", at.Ge, "ge"), "greater_than": (">", at.Gt, "gt"),
           "less_than_equal": ("<=", at.Le, "le"), "less_than": ("<", at.Lt, "lt")}


def _limit(hint: Any, bound: tuple[str, type, str]) -> Any:
    """The value of the bound that `hint` declares (also inside `X | None`), as written: pydantic's own
    error says `0.0` for a float field's `Gt(0)`."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return next((b for arg in typing.get_args(hint) if (b := _limit(arg, bound)) is not None), None)
    return next((getattr(m, bound[2]) for m in getattr(hint, "__metadata__", ()) if isinstance(m, bound[1])), None)


_NAMES = {int: "an int", float: "a number", bool: "true or false", str: "a string", Path: "a non-empty path",
          type(None): "null"}
_SIMPLE = (int, float, bool, str, Path)


def _simple(hint: Any) -> tuple[type, ...] | None:
    if typing.get_origin(hint) is Annotated:
        return _simple(typing.get_args(hint)[0])
    if hint in _SIMPLE:
        return (hint,)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = tuple(typing.get_args(a)[0] if typing.get_origin(a) is Annotated else a for a in typing.get_args(hint))
        if all(a in _SIMPLE or a is type(None) for a in args):
            return args
    return None
