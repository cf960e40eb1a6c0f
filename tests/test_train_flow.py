"""The training flow wires the same functions in order: model -> train -> select; its training task is tagged gpu.

The flow body is run as a plain function (`.fn`) with its tasks replaced by recorders, and each task body is
run the same way over the stage functions: no Prefect server, no model, no training.
"""

from __future__ import annotations

from pathlib import Path

import flows.train as flow_mod
import pytest
import yaml

from biocheck.pipeline import train_setup
from tests.conftest import REPO


def test_train_flow_tasks_and_gpu_tag():
    assert "gpu" in flow_mod.train_task.tags
    assert "gpu" not in flow_mod.select_task.tags and "gpu" not in flow_mod.model_task.tags
    assert flow_mod.train_flow.name == "biocheck-train"
    assert (flow_mod.model_task.name, flow_mod.train_task.name, flow_mod.select_task.name) == (
        "model-init", "train", "select")


@pytest.fixture
def recorded(monkeypatch):
    """The flow's three tasks replaced by recorders; returns the list of (step, params path) calls."""
    calls: list[tuple[str, str]] = []
    results = {"model": {"model": "built"}, "train": {"steps": 4, "train_loss": 0.5},
               "select": {"selected_step": 20, "selected_eval_reward": 0.7, "table": [{"step": 20}]}}

    def recorder(step):
        def run(params: str) -> dict:
            calls.append((step, params))
            return dict(results[step])
        return run

    monkeypatch.setattr(flow_mod, "model_task", recorder("model"))
    monkeypatch.setattr(flow_mod, "train_task", recorder("train"))
    monkeypatch.setattr(flow_mod, "select_task", recorder("select"))
    return calls


def test_flow_runs_model_train_select_in_order_and_returns_the_selection_without_its_table(recorded):
    out = flow_mod.train_flow.fn("my/params.yaml")
    assert recorded == [("model", "my/params.yaml"), ("train", "my/params.yaml"), ("select", "my/params.yaml")]
    assert out == {"train": {"steps": 4, "train_loss": 0.5},
                   "selection": {"selected_step": 20, "selected_eval_reward": 0.7}}


def test_flow_without_init_model_skips_the_model_step(recorded):
    out = flow_mod.train_flow.fn("p.yaml", init_model=False)
    assert recorded == [("train", "p.yaml"), ("select", "p.yaml")]
    assert out["selection"] == {"selected_step": 20, "selected_eval_reward": 0.7}


def test_each_task_calls_its_stage_function_with_the_params_file(tmp_path, monkeypatch):
    import biocheck.models.stage as model_stage
    import biocheck.train.select as select_mod
    import biocheck.train.stage as train_stage

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["model"]["out_dir"] = str(tmp_path / "base")
    params["train"]["out_dir"] = str(tmp_path / "ckpt")
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    seen: dict[str, tuple] = {}

    def record(name: str, result: dict):
        def stage(*args, **kwargs):
            seen[name] = (*args, *kwargs.values())
            return result
        return stage

    monkeypatch.setattr(model_stage, "init_model", record("model", {"m": 1}))
    monkeypatch.setattr(train_stage, "train", record("train", {"t": 1}))
    monkeypatch.setattr(select_mod, "select", record("select", {"s": 1}))

    assert flow_mod.model_task.fn(str(path)) == {"m": 1}
    assert flow_mod.train_task.fn(str(path)) == {"t": 1}
    assert flow_mod.select_task.fn(str(path)) == {"s": 1}
    assert seen["model"][0].out_dir == Path(params["model"]["out_dir"])
    setup, progress = seen["train"]  # the whole params file, no progress bars in a flow
    assert setup == train_setup(params) and progress is False
    assert seen["select"][0].checkpoints == Path(params["train"]["out_dir"])  # select reads what train wrote
