"""Real DVC on the real dvc.yaml: a setting that training never reads leaves both `train@` stages up to date,
and a reward setting reruns them, with the replaced run's checkpoints moved aside, never deleted.

The project is the repository's dvc.yaml, params.yaml and source, with every data dependency and output
stood in by a small file (`dvc commit` records them without running anything), so `dvc status` answers
exactly as it would after a full `dvc repro`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.builders import dvc_project
from tests.helpers.params import stages
from tests.helpers.paths import REPO

TRAIN = ("train@eg_grpo", "train@outcome_only")


def _dvc(work: Path, *args: str) -> str:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    p = subprocess.run([str(Path(sys.executable).parent / "dvc"), *args], cwd=work, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def _entries(entries) -> list[str]:
    return [e if isinstance(e, str) else next(iter(e)) for e in entries or []]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    work = dvc_project(tmp_path_factory.mktemp("dvc"), REPO)
    params = yaml.safe_load((work / "params.yaml").read_text())
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    for stage, spec in stages().items():
        name, _, key = stage.partition("@")
        for path in _entries(spec.get("deps")) + _entries(spec.get("outs")) + _entries(spec.get("metrics")) \
                + _entries(spec.get("plots")):
            if key:
                item = declared[name]["foreach"][key]
                for field, value in item.items():
                    path = path.replace(f"${{item.{field}}}", str(value))
            target = work / path
            if target.exists():
                continue
            if target.suffix:  # a file (jsonl, json, csv, sqlite): one line of content
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("{}\n")
            else:  # a folder (a model, an index): one file in it
                target.mkdir(parents=True, exist_ok=True)
                (target / "stand-in.txt").write_text(f"{path}\n")
    assert params["orchestrate"]["train_launcher"]  # the train stages' cmd interpolates it
    _dvc(work, "init", "--no-scm", "-q")
    _dvc(work, "commit", "--force", "-q")
    assert json.loads(_dvc(work, "status", "--json") or "{}") == {}
    return work


def _changed(project: Path, edit) -> set[str]:
    """The stages `dvc status` reports after `edit(params)`; params.yaml restored afterwards."""
    path = project / "params.yaml"
    saved = path.read_text()
    params = yaml.safe_load(saved)
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        return set(json.loads(_dvc(project, "status", "--json") or "{}"))
    finally:
        path.write_text(saved)


def _set(section: str, key: str, value):
    def edit(params):
        params[section][key] = value
    return edit


@pytest.mark.parametrize("edit", [
    _set("agent", "workers", 4), _set("agent", "temperature", 0.7), _set("agent", "llm", "openai:gpt-4o-mini"),
    _set("evaluate", "limit", 100), _set("evaluate", "systems", ["eg_grpo"]), _set("evaluate", "bootstrap", 50),
    _set("tracking", "experiments", {"data": "d", "train": "t", "eval": "e"}),
    _set("reward", "judge_cache", "elsewhere.sqlite"), _set("reward", "judge_batch_size", 2),
    _set("search", "backend", "entrez"),
], ids=["agent.workers", "agent.temperature", "agent.llm", "evaluate.limit", "evaluate.systems",
        "evaluate.bootstrap", "tracking.experiments", "reward.judge_cache", "reward.judge_batch_size",
        "search.backend"])
def test_a_setting_training_never_reads_leaves_both_training_stages_up_to_date(project, edit):
    changed = _changed(project, edit)
    assert not changed & {*TRAIN, "sft"}, changed


def test_evaluation_settings_rerun_the_evaluation(project):
    assert "evaluate" in _changed(project, _set("evaluate", "limit", 100))
    assert "evaluate" in _changed(project, _set("agent", "workers", 4))


@pytest.mark.parametrize(("key", "value"), [("beta2", 0.25), ("judge", "openai:gpt-4o-mini"), ("threshold", 0.6)])
def test_a_reward_setting_reruns_both_training_stages(project, key, value):
    changed = _changed(project, _set("reward", key, value))
    assert set(TRAIN) <= changed and "sft" not in changed, changed


def test_the_rerun_keeps_the_replaced_runs_checkpoints(tmp_path):
    """What the rerun's `prepare_out_dir` does with the checkpoints the old reward trained: moved aside."""
    from biocheck.train.grpo import prepare_out_dir, previous_dir

    out = tmp_path / "models" / "checkpoints"
    assert prepare_out_dir(out, "old-key") is None
    (out / "checkpoint-10").mkdir()
    (out / "checkpoint-10" / "model.safetensors").write_bytes(b"weights of 10 steps")
    assert prepare_out_dir(out, "new-key") is None  # a new reward: nothing to resume
    kept = previous_dir(out) / "old-key"
    assert (kept / "checkpoint-10" / "model.safetensors").read_bytes() == b"weights of 10 steps"
    assert not (out / "checkpoint-10").exists() and json.loads((out / "run_key.json").read_text())["key"] == "new-key"


def test_dvc_status_on_dvc_yaml_is_the_pipeline_and_a_plain_one_adds_the_studys_stages():
    """What README.md tells a user: `dvc status dvc.yaml` is the pipeline's status alone; a plain `dvc status`
    reads every dvc.yaml of the project (DVC's own rule), so it adds exactly what `dvc status study/dvc.yaml`
    says of the study's stages (all of them until a study has run)."""
    pipeline = json.loads(_dvc(REPO, "status", "dvc.yaml", "--json"))
    study = json.loads(_dvc(REPO, "status", "study/dvc.yaml", "--json"))
    plain = json.loads(_dvc(REPO, "status", "--json"))
    assert not [s for s in pipeline if s.startswith("study/")], pipeline.keys()
    assert all(s.startswith("study/dvc.yaml:") for s in study), study.keys()
    assert plain == {**pipeline, **study}
