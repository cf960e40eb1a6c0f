"""The training flow: model -> judge -> train@VARIANT -> select@VARIANT, each task one DVC stage; training tagged gpu.

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
from tests.conftest import REPO


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    return tmp_path.resolve()


def test_tasks_are_named_after_their_stages_and_training_is_tagged_gpu():
    assert flow_mod.train_flow.name == "biocheck-train"
    assert (flow_mod.model_task.name, flow_mod.judge_task.name, flow_mod.sft_task.name, flow_mod.train_task.name,
            flow_mod.select_task.name) == ("model", "judge", "sft", "train", "select")
    for t in (flow_mod.train_task, flow_mod.judge_task, flow_mod.sft_task):  # each trains or runs the model
        assert "gpu" in t.tags
    assert not ({"gpu"} & (flow_mod.select_task.tags | flow_mod.model_task.tags))
    stage_tasks = (tasks.fetch_task, tasks.prepare_task, tasks.validate_task, tasks.evidence_task, tasks.model_task,
                   tasks.judge_task, tasks.sft_task, tasks.train_task, tasks.select_task, tasks.evaluate_task)
    for t in stage_tasks:  # each stage its own timeout
        assert t.timeout_seconds == tasks.TIMEOUT_S[t.name]
    assert tasks.pull_task.timeout_seconds == tasks.push_task.timeout_seconds == tasks.TIMEOUT_S["dvc"]
    # network stages retry; a stage that computes does not (a rerun would fail the same way)
    assert tasks.fetch_task.retries == tasks.pull_task.retries == tasks.push_task.retries == 2
    assert tasks.train_task.retries == tasks.validate_task.retries == 0


def test_the_variants_are_dvc_yamls_train_and_select_stages():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    assert tuple(stages["train"]["foreach"]) == VARIANTS == tuple(stages["select"]["foreach"])


@pytest.fixture
def recorded(monkeypatch):
    """The flow's four tasks replaced by recorders; returns the list of (step, args) calls."""
    calls: list[tuple] = []

    def recorder(step):
        def run(*args) -> dict:
            calls.append((step, *args))
            return {"step": step}
        return run

    for name in ("model_task", "judge_task", "sft_task", "train_task", "select_task"):
        monkeypatch.setattr(flow_mod, name, recorder(name.removesuffix("_task")))
    return calls


def test_flow_runs_model_judge_sft_then_every_variant_trained_then_selected(recorded, project):
    out = flow_mod.train_flow.fn(root=str(project))
    root = str(project)
    assert recorded == [("model", root), ("judge", root), ("sft", root), ("train", root, "eg_grpo"),
                        ("train", root, "outcome_only"), ("select", root, "eg_grpo"), ("select", root, "outcome_only")]
    assert list(out) == ["model", "judge", "sft", "train@eg_grpo", "train@outcome_only", "select@eg_grpo", "select@outcome_only"]


def test_flow_with_one_variant_and_without_the_model_step(recorded, project):
    flow_mod.train_flow.fn(root=str(project), variants=["outcome_only"], init_model=False)
    root = str(project)  # the judge stage still runs (DVC skips it when up to date): the reward needs it
    assert recorded == [("judge", root), ("sft", root), ("train", root, "outcome_only"), ("select", root, "outcome_only")]


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
    assert flow_mod.model_task.fn(root) == {"stage": "model", "ran": True, "seconds": 0.5}
    flow_mod.judge_task.fn(root)
    flow_mod.sft_task.fn(root)
    flow_mod.train_task.fn(root, "outcome_only")
    flow_mod.select_task.fn(root, "eg_grpo")
    tasks.fetch_task.fn(root)
    tasks.prepare_task.fn(root)
    tasks.evidence_task.fn(root)
    assert seen == [("model", root), ("judge", root), ("sft", root), ("train@outcome_only", root), ("select@eg_grpo", root), ("fetch", root),
                    ("prepare", root), ("evidence", root)]
