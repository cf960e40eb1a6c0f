"""The DVC pipeline's data and evidence stages on the real data: they run, a second `dvc repro` does
nothing, and a data param change reruns only what depends on it. (Training is exercised end to end
on a small run in test_train.py; the full quickstart `dvc repro` is too long for the test suite.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def _copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _dvc(work: Path, env: dict, *args: str) -> str:
    p = subprocess.run([str(Path(sys.executable).parent / "dvc"), *args], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def test_dvc_repro_runs_once_and_reruns_only_what_changed(real_mirror, tmp_path):
    work = tmp_path / "repo"
    _copy_repo(work)
    for metric in ("metrics", "reports"):
        shutil.rmtree(work / metric, ignore_errors=True)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "BIOCHECK_DATA_MIRROR": str(real_mirror), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}"}

    out = _dvc(work, env, "repro", "evidence")
    for stage in ("fetch", "prepare", "validate", "evidence"):
        assert f"Running stage '{stage}'" in out
    assert json.loads((work / "metrics" / "evidence.json").read_text())["index"]["docs"] == 5183
    assert json.loads((work / "metrics" / "validation.json").read_text())["success"] is True
    assert json.loads((work / "metrics" / "data.json").read_text())["working"]["scifact"]["train"]["total"] == 64

    out = _dvc(work, env, "repro", "evidence")
    assert "Running stage" not in out and "up to date" in out

    params = yaml.safe_load((work / "params.yaml").read_text())
    params["data"]["subset"]["train"] = 40
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    out = _dvc(work, env, "repro", "evidence")
    assert "Stage 'fetch' didn't change, skipping" in out
    assert "Running stage 'prepare'" in out and "Running stage 'validate'" in out
    assert "Running stage 'evidence'" not in out  # same corpus, validation still passing
    assert json.loads((work / "metrics" / "data.json").read_text())["working"]["scifact"]["train"]["total"] == 40
