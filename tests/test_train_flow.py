"""The training flow wires the same functions; its training task is tagged for a GPU work pool."""

from __future__ import annotations


def test_train_flow_tasks_and_gpu_tag():
    from flows.train import model_task, select_task, train_flow, train_task

    assert "gpu" in train_task.tags and "gpu" not in select_task.tags and "gpu" not in model_task.tags
    assert train_flow.name == "biocheck-train"
