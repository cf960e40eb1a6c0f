"""Fuzzing output paths: `data prepare --out-dir P` and `model init --out-dir P` for any P in a folder full of
things a user keeps. Either the command succeeds and only its own output changed, or it fails with one
`error:` line and nothing changed at all."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from biocheck.cli import app
from tests.helpers.builders import write_raw
from tests.helpers.paths import REPO

runner = CliRunner()

# What a project folder may hold: the keys are names the command may be pointed at.
ENTRIES = ["notes.txt", "store", "store/evidence.sqlite", "empty", "link", "prev", "new/deeper", "ünïcödé ✓",
           "store/", ".", "..", "data", "metrics"]


def _sandbox(root: Path) -> None:
    (root / "notes.txt").write_text("keep me\n")
    (root / "store").mkdir()
    (root / "store" / "evidence.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(64))
    (root / "empty").mkdir()
    (root / "link").symlink_to(root / "store")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["raw_dir"] = str(root / "raw")
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    write_raw(root / "raw")


def _snapshot(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def _run(command: list[str], target: str) -> tuple[object, set[str], Path]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "project"
        root.mkdir()
        _sandbox(root)
        before = _snapshot(Path(tmp))
        cwd = os.getcwd()
        os.chdir(root)
        try:
            r = runner.invoke(app, [*command, "--out-dir", target])
        finally:
            os.chdir(cwd)
        changed = _changed(before, _snapshot(Path(tmp)))
        out = os.path.normpath(os.path.join("project", target))
        return r, changed, Path(out)


def _within(changed: set[str], *roots: str) -> bool:
    """Every change is inside one of `roots` or is a (new) parent folder of one."""
    return all(any(c == r or c.startswith(r.rstrip("/") + "/") or r.startswith(c + "/") for r in roots)
               for c in changed)


@given(st.sampled_from(ENTRIES))
def test_prepare_changes_only_its_own_output_or_nothing(target):
    r, changed, out = _run(["data", "prepare"], target)
    if r.exit_code == 0:
        assert _within(changed, out.as_posix(), "project/metrics"), changed
    else:
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert isinstance(r.exception, SystemExit), repr(r.exception)
        assert len(lines) == 1 and lines[0].startswith("error: "), r.output
        assert not changed, changed


# Paths that hold something (the sandbox has no corpus, so a free path would fail later, for that reason).
TAKEN = [e for e in ENTRIES if e not in ("empty", "new/deeper", "ünïcödé ✓", "prev", "data", "metrics")]


@given(st.sampled_from(TAKEN))
def test_model_init_never_replaces_what_it_did_not_write(target):
    r, changed, _ = _run(["model", "init"], target)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code != 0 and isinstance(r.exception, SystemExit), (target, r.output)
    assert len(lines) == 1 and lines[0].startswith("error: --out-dir / model.out_dir "), r.output
    assert not changed, changed
