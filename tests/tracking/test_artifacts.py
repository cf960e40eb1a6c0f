"""`dvc repro` of real BioCheck stages in a temporary DVC project: one pipeline parent run with the stages
nested, and each run's `dvc_deps_md5` equal to the hash of its inputs as the resulting dvc.lock records them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml

from biocheck import tracking
from tests.helpers.builders import write_raw
from tests.helpers.paths import REPO

STAGES = {
    "prepare": {"cmd": "biocheck data prepare", "deps": ["raw"], "params": ["data"], "outs": ["data/prepared"]},
    # a foreach stage, as train@eg_grpo is: DVC names it evidence@local
    "evidence": {"foreach": ["local"], "do": {"cmd": "biocheck evidence build --no-progress",
                                              "deps": ["data/prepared/corpus.jsonl"], "params": ["evidence"],
                                              "outs": ["data/evidence/index"]}},
}


@pytest.fixture
def proj(tmp_path) -> Path:
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".dvc").mkdir()  # what `dvc init` writes, without a DVC start
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    write_raw(root / "raw")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(raw_dir="raw", subset={"train": 4, "val": 2, "test": 2})
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": STAGES}))
    return root


def _repro(root: Path, db: Path) -> None:
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "MLFLOW_TRACKING_URI": f"sqlite:///{db}", "DVC_NO_ANALYTICS": "1"}
    for name in (tracking.PIPELINE_ENV, "DVC_STAGE", "DVC_ROOT", "BIOCHECK_TRACKING"):
        env.pop(name, None)
    p = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=root, env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def _by_stage(client, pipeline: str) -> dict:
    exp = client.get_experiment_by_name("biocheck-data").experiment_id
    runs = client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pipeline}'")
    return {r.data.tags.get("dvc_stage", "parent"): r for r in runs}


@pytest.mark.slow  # two `dvc repro`s, each starting `biocheck` per stage (~40 s on 2 cores)
def test_dvc_repro_is_one_pipeline_run_and_tags_match_dvc_lock(proj, tmp_path):
    db = tmp_path / "mlflow.db"
    _repro(proj, db)
    client = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("biocheck-data").experiment_id
    [parent] = client.search_runs([exp], filter_string="tags.kind = 'pipeline'")
    pid = parent.data.tags["pipeline_id"]
    assert pid.startswith("dvc-") and parent.info.run_name.startswith("pipeline ")
    runs = _by_stage(client, pid)
    assert set(runs) == {"parent", "prepare", "evidence@local"}
    for stage in ("prepare", "evidence@local"):
        tags = runs[stage].data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id
        assert tags["dvc_deps_md5"] == tracking.locked_deps_md5(proj, stage) is not None  # what dvc.lock says
    assert runs["prepare"].info.run_name == "prepare" and runs["evidence@local"].data.tags["stage"] == "evidence"
    assert client.get_run(parent.info.run_id).info.status == "FINISHED"  # ended with its last stage
    first = runs["prepare"].data.tags["dvc_deps_md5"]

    params = yaml.safe_load((proj / "params.yaml").read_text())
    params["data"]["seed"] += 1  # another split: prepare reruns; the corpus is the same, so evidence does not
    (proj / "params.yaml").write_text(yaml.safe_dump(params))
    _repro(proj, db)
    [new_parent] = [p for p in client.search_runs([exp], filter_string="tags.kind = 'pipeline'")
                    if p.info.run_id != parent.info.run_id]
    rerun = _by_stage(client, new_parent.data.tags["pipeline_id"])
    assert set(rerun) == {"parent", "prepare"}  # a new `dvc repro`: a new pipeline run, holding what ran
    again = rerun["prepare"].data.tags["dvc_deps_md5"]
    assert again != first and again == tracking.locked_deps_md5(proj, "prepare")


def test_the_inputs_hash_of_a_foreach_stage_covers_its_command(tmp_path):
    """train@eg_grpo and train@outcome_only read the same files and params; only `--variant` differs. Their
    dvc_deps_md5 differ, each equal to what dvc.lock records for that stage."""
    root = tmp_path / "variants"
    (root / ".dvc").mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / "src.py").write_text("x = 1\n")
    stage = {"foreach": ["eg_grpo", "outcome_only"],
             "do": {"cmd": "python -c \"open('out_${item}', 'w').write('--variant ${item}')\"",
                    "deps": ["src.py"], "outs": ["out_${item}"]}}
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    now = {v: tracking.stage_deps_md5(str(root), f"train@{v}") for v in ("eg_grpo", "outcome_only")}
    assert "unknown" not in now.values() and now["eg_grpo"] != now["outcome_only"]
    env = {k: v for k, v in os.environ.items() if k not in ("DVC_STAGE", "DVC_ROOT")}
    p = subprocess.run([sys.executable, "-m", "dvc", "repro"], cwd=root, env={**env, "DVC_NO_ANALYTICS": "1"},
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert {v: tracking.locked_deps_md5(root, f"train@{v}") for v in now} == now  # what dvc.lock records
