"""params.yaml and the profiles are in the form DVC's own YAML writer gives back, byte for byte.

`dvc exp run -S key=value` loads params.yaml with ruamel's round-trip loader, sets the key and dumps the whole
file again (dvc.utils.hydra.apply_overrides, dvc.utils.serialize.modify_yaml). Comments and alignment survive,
but an explicit `null` comes back as an empty value, so a file that spelled out `null` had every such line
rewritten by a run that changed one other key. `biocheck profile use` writes profiles/base.yaml with a
profile's values (biocheck.profiles.render): the base, the profiles' override files and every render keep the
same form.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import REPO

FILES = ["params.yaml", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "profiles").glob("*.yaml"))]
RENDERS = sorted(p.stem for p in (REPO / "profiles").glob("*.yaml") if p.name != "base.yaml")
WHOLE = ["params.yaml", "profiles/base.yaml", *(f"render:{name}" for name in RENDERS)]  # every key, not overrides


def text_of(name: str) -> str:
    """A file's text, or (render:NAME) the params.yaml `biocheck profile use NAME` writes."""
    if name.startswith("render:"):
        from biocheck.profiles import render

        return render(REPO / "profiles" / f"{name.removeprefix('render:')}.yaml")
    return (REPO / name).read_text()

pytest.importorskip("dvc")


def dvc_rewrites(path: Path) -> str:
    """The text DVC writes back after loading `path` for an update and changing nothing."""
    from dvc.utils.serialize import modify_yaml

    with modify_yaml(path):
        pass
    return path.read_text()


def changed_lines(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("name", [*FILES, *(f"render:{name}" for name in RENDERS)])
def test_dvc_writes_the_file_back_unchanged(name, tmp_path):
    copy = tmp_path / "params.yaml"
    text = text_of(name)
    copy.write_text(text)
    assert changed_lines(text, dvc_rewrites(copy)) == []


@pytest.mark.parametrize("name", WHOLE)
def test_set_param_changes_only_its_own_line(name, tmp_path):
    """What `dvc exp run -S evaluate.limit=7` does to the file: one line, the key's."""
    from dvc.utils.hydra import apply_overrides

    copy = tmp_path / "params.yaml"
    copy.write_text(text_of(name))
    text = copy.read_text()
    before = yaml.safe_load(text)
    limit, dtype = (before["evaluate"]["limit"] or 0) + 1, "float16" if before["agent"]["dtype"] != "float16" else None
    apply_overrides(copy, [f"evaluate.limit={limit}", f"agent.dtype={dtype if dtype else 'null'}"])
    diff = changed_lines(text, copy.read_text())
    assert len(diff) == 4, diff  # two lines out, two in
    assert {line.split(":")[0].strip("+- ") for line in diff} == {"limit", "dtype"}
    before["evaluate"]["limit"], before["agent"]["dtype"] = limit, dtype
    assert yaml.safe_load(copy.read_text()) == before


def test_the_check_sees_a_spelled_out_null(tmp_path):
    """The check can fail: `null` written out, or a comment DVC re-indents, is rewritten."""
    path = tmp_path / "params.yaml"
    path.write_text("agent:\n  dtype: null   # the weights' dtype\n  seed: 0\n")
    assert changed_lines(path.read_text(), dvc_rewrites(path)) == ["-  dtype: null   # the weights' dtype",
                                                                   "+  dtype:        # the weights' dtype"]
