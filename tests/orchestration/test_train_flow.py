"""The training flow: the train area of dvc.yaml, each task one DVC stage; stages that run a model tagged gpu.

The flow body runs as a plain function (`.fn`) with its tasks replaced by recorders; each task body runs the
same way with `dvc.repro` recorded: no Prefect server, no DVC, no training.
"""

from __future__ import annotations

from pathlib import Path

import flows.tasks as tasks
import flows.train as flow_mod
import pytest
import yaml

from biocheck.io import InputError
from biocheck.orchestration import dvc
from biocheck.orchestration.dvc import StageRun
from biocheck.rewards.components import VARIANTS
from tests.helpers.paths import REPO


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    return tmp_path.resolve()


def test_tasks_are_named_after_their_stages_and_those_that_run_a_model_are_tagged_gpu():
    assert flow_mod.train_flow.name == "biocheck-train"
    stages = dvc.pipeline(REPO).order
    made = {s: tasks.task_for(s) for s in stages}
    assert {s: t.name for s, t in made.items()} == {s: s.partition("@")[0] for s in stages}
    gpu = {s for s, t in made.items() if "gpu" in t.tags}
    assert gpu == {"judge", "judge_eqs", "sft", "audit", "train@eg_grpo", "train@outcome_only"}
    for s, t in made.items():  # each stage its own timeout, a listed one (a stage dvc.yaml gains: the default)
        assert t.timeout_seconds == tasks.TIMEOUT_S[t.name], s
    assert tasks.task_for("newstage").timeout_seconds == tasks.DEFAULT_TIMEOUT_S
    assert tasks.task_for("validate").fn is tasks.validate_task.fn and tasks.task_for("evaluate").fn is tasks.evaluate_task.fn
    assert tasks.pull_task.timeout_seconds == tasks.push_task.timeout_seconds == tasks.TIMEOUT_S["dvc"]
    # network stages retry; a stage that computes does not (a rerun would fail the same way)
    assert made["fetch"].retries == tasks.pull_task.retries == tasks.push_task.retries == 2
    assert made["fetch"].retry_delay_seconds == tasks.RETRY_DELAYS_S
    assert {s for s, t in made.items() if t.retries} == {"fetch"}


def test_the_variants_are_dvc_yamls_train_and_select_stages():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert tuple(stages["train"]["foreach"]) == VARIANTS == tuple(stages["select"]["foreach"])


@pytest.fixture
def recorded(monkeypatch):
    """Every stage task replaced by a recorder; returns the list of (stage, root) calls."""
    calls: list[tuple] = []

    def task_for(stage):
        def run(stage, root) -> dict:
            calls.append((stage, root))
            return {"step": stage}
        return run

    monkeypatch.setattr(tasks, "task_for", task_for)
    return calls


def test_flow_runs_the_whole_train_area_in_dvcs_order(recorded, project):
    out = flow_mod.train_flow.fn(root=str(project))
    stages = ["model", "judge", "judge_eqs", "sft", "audit", "train@eg_grpo", "train@outcome_only", "select@eg_grpo",
              "select@outcome_only"]
    assert recorded == [(s, str(project)) for s in stages]
    assert list(out) == stages


def test_flow_with_one_variant_and_without_the_model_step(recorded, project):
    flow_mod.train_flow.fn(root=str(project), variants=["outcome_only"], init_model=False)
    root = str(project)  # what that variant's training and selection need: the judge it is rewarded by, the start
    assert recorded == [("judge", root), ("sft", root), ("train@outcome_only", root), ("select@outcome_only", root)]


def test_an_unknown_variant_or_project_fails_before_any_stage(recorded, project, tmp_path):
    with pytest.raises(InputError, match=r"variants: unknown grpo; known: eg_grpo, outcome_only"):
        flow_mod.train_flow.fn(root=str(project), variants=["grpo"])
    with pytest.raises(dvc.DvcError, match="not a DVC project"):
        flow_mod.train_flow.fn(root=str(tmp_path / "nowhere"))
    assert recorded == []


def test_each_task_runs_its_dvc_stage(monkeypatch, project):
    seen: list[tuple[str, str]] = []

    def repro(stage, root, logger=None, force=False):
        seen.append((stage, root))
        return StageRun(stage=stage, ran=True, seconds=0.5)

    monkeypatch.setattr(dvc, "repro", repro)
    root = str(project)
    stages = ["model", "judge_eqs", "audit", "train@outcome_only", "select@eg_grpo", "fetch", "prepare", "evidence"]
    for stage in stages:
        assert tasks.task_for(stage).fn(stage, root) == {"stage": stage, "ran": True, "seconds": 0.5}
    assert seen == [(s, root) for s in stages]
