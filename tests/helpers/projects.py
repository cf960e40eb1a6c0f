"""Whole projects for the pipeline and flow tests: a copy of the repo's code and configs, a workspace over the
mirror, a flow project with scripted steps (`steps`), and a CLI project over the tiny raw data (`workdir`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import flows.pipeline as pipe
import pytest
import yaml
from prefect.exceptions import ObjectNotFound
from prefect.states import Completed

from biocheck.orchestration import dvc
from tests.helpers.paths import REPO


def copy_repo(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def workspace(tmp_path: Path, mirror: Path) -> tuple[Path, dict]:
    """A copy of the repo's tracked files (no metrics/reports) as a fresh git repo, and its environment."""
    work = tmp_path / "repo"
    copy_repo(work)
    for metric in ("metrics", "reports"):
        shutil.rmtree(work / metric, ignore_errors=True)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "BIOCHECK_DATA_MIRROR": str(mirror), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}",
           "DVC_NO_ANALYTICS": "1"}
    return work, env


def flow_project(root: Path, **orchestrate) -> Path:
    """Enough of a DVC project for the flow's checks: .dvc/, dvc.yaml, params.yaml (orchestrate edited)."""
    (root / ".dvc").mkdir(parents=True)
    (root / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["orchestrate"].update(orchestrate)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


@pytest.fixture
def steps(monkeypatch):
    """The flow's steps replaced by recorders; `steps.calls` lists (step, args) in order, `steps.fail` names a
    step that raises, `steps.stale` is what `dvc status` reports after a deployment."""
    rec = SimpleNamespace(calls=[], fail=None, stale={}, remotes={"local": "/elsewhere"}, state=Completed())

    def recorder(step):
        def run(*args, **kwargs):
            rec.calls.append((step, args, kwargs))
            if rec.fail == step:
                raise RuntimeError(f"{step} broke")
            return {"step": step}
        return run

    for name, step in (("pull_task", "pull"), ("data_flow", "data"), ("evidence_flow", "evidence"),
                       ("train_flow", "train"), ("run_stages", "evaluate"), ("push_task", "push")):
        monkeypatch.setattr(pipe, name, recorder(step))

    def run_deployment(name, parameters, timeout, **_):
        rec.calls.append(("deployment", (name,), {"parameters": parameters, "timeout": timeout}))
        if rec.fail == "deployment-missing":
            raise ObjectNotFound(http_exc=Exception("404"))
        return SimpleNamespace(id=uuid.uuid4(), state=rec.state)

    def status(root, targets=()):
        rec.calls.append(("status", (root, tuple(targets)), {}))
        return rec.stale

    monkeypatch.setattr(pipe, "run_deployment", run_deployment)
    monkeypatch.setattr(dvc, "status", status)
    monkeypatch.setattr(dvc, "remotes", lambda root: rec.remotes)
    return rec


@pytest.fixture
def workdir(tmp_path, monkeypatch, raw_dir) -> Path:
    """A project folder with the repo's profiles and a params.yaml pointing at the tiny raw data."""
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["raw_dir"] = str(raw_dir)
    params["data"]["subset"] = {"train": 4}
    params["validate"]["expected_rows"] = {"scifact": {"train+val": 23, "test": 4}, "healthfc": {"test": 7}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    return tmp_path
