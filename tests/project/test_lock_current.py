"""The committed dvc.lock is the code's: every stage's params and every dependency git tracks (code, prompts,
templates) hash as they are now, so the committed metrics the PR comment compares against were made by this
code with these params. Data and model dependencies are not in git (a fresh clone has none) and are left out.

When it fails: refresh with one quickstart run (`dvc repro` on the default params.yaml) and commit dvc.lock with
metrics/ and reports/ (DEVELOPERS.md, "Working rules")."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from biocheck.orchestration import dvc
from tests.helpers.paths import REPO


def _tracked() -> set[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    files = set(out.stdout.split())
    return files | {str(p) for f in files for p in Path(f).parents}  # a folder dependency is tracked as its files


def stale(status: dict, tracked: set[str]) -> list[str]:
    """What `dvc status --json` says changed in git-tracked dependencies and params, stage by stage."""
    found = []
    for stage, changes in status.items():
        for change in changes:
            if not isinstance(change, dict):
                found.append(f"{stage}: {change}")  # e.g. "changed command"
                continue
            for path, what in change.get("changed deps", {}).items():
                if path.startswith("params") and isinstance(what, dict):  # params.yaml: {key: modified|new|deleted}
                    found += [f"{stage}: param {k} {v}" for k, v in what.items()]
                elif path in tracked:
                    found.append(f"{stage}: {path} {what}")
    return found


def test_stale_finds_code_and_params_and_ignores_data():
    status = {"train": [{"changed deps": {"src/a.py": "modified", "data/x": "deleted",
                                          "params.yaml": {"train.seed": "modified"}}},
                        {"changed outs": {"models/x": "deleted"}}],
              "prepare": ["changed command"]}
    assert stale(status, {"src/a.py", "src"}) == ["train: src/a.py modified", "train: param train.seed modified",
                                                  "prepare: changed command"]


def test_the_committed_dvc_lock_is_the_codes():
    if not (REPO / "dvc.lock").is_file():
        pytest.skip("no dvc.lock")
    found = stale(dvc.status(REPO, ["dvc.yaml"]), _tracked())
    assert not found, ("dvc.lock is not HEAD's: " + "; ".join(found) + ". Refresh it with one quickstart run "
                       "(`dvc repro`) and commit dvc.lock, metrics/ and reports/.")
