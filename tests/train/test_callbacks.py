"""Training curves in MLflow (train/callbacks.train_log): both variants get the EG-GRPO reward over the same
components, the always-zero clip ratios and TRL's profiling timers stay out, and TrainingArguments are an
artifact, not ~280 params."""

from __future__ import annotations

import json
from types import SimpleNamespace

import mlflow
import pytest

from biocheck.train.callbacks import TrainMetrics, train_log

WEIGHTS = {"outcome": 1.0, "search": 0.5, "evidence": 1.0, "hallucination": -1.0}


def _logs(prefix: str, outcome: float, search: float, evidence: float, hallucination: float) -> dict[str, float]:
    values = {"outcome": outcome, "search": search, "evidence": evidence, "hallucination": hallucination}
    return {f"{prefix}{k}/mean": v for k, v in values.items()}


def test_the_eg_grpo_reward_is_derived_from_the_components_for_train_and_eval():
    m = TrainMetrics(WEIGHTS)
    logs = {**_logs("rewards/", 1.0, 0.4, 0.5, 0.25), **_logs("eval_rewards/", 0.0, 1.0, 0.0, 0.5)}
    assert m.derived(logs) == {"reward_eg_grpo": pytest.approx(1.0 + 0.2 + 0.5 - 0.25),
                               "eval_reward_eg_grpo": pytest.approx(0.5 - 0.5)}
    assert m.derived({"rewards/outcome/mean": 1.0}) == {}  # a component missing: no made-up number


def test_clip_ratios_are_dropped_only_while_they_are_zero_by_construction():
    m = TrainMetrics(WEIGHTS)
    assert not m.keep("clip_ratio/low_mean", 1) and not m.keep("eval_clip_ratio/high_max", 1)
    assert m.keep("clip_ratio/low_mean", 2) and m.keep("rewards/outcome/mean", 1) and m.keep("loss", 1)


def test_the_callback_logs_into_the_open_run_with_the_config_as_an_artifact(tmp_path, mlflow_db):
    from transformers import TrainingArguments

    mlflow.set_tracking_uri(f"sqlite:///{mlflow_db}")
    mlflow.set_experiment("curves")
    args = TrainingArguments(output_dir=str(tmp_path / "o"), report_to=[], use_cpu=True)
    state = SimpleNamespace(is_world_process_zero=True, global_step=3)
    model = SimpleNamespace(config=SimpleNamespace(to_dict=lambda: {"hidden_size": 8}))
    cb = train_log(WEIGHTS)
    with mlflow.start_run() as run:
        cb.on_train_begin(args, state, None, model=model)
        cb.on_log(args, state, None, {"loss": 0.5, "clip_ratio/low_mean": 0.0, **_logs("rewards/", 1, 0, 0, 0)})
        cb.on_train_end(args, state, None)
        assert mlflow.active_run() is not None  # the callback does not end BioCheck's run
    got = mlflow.MlflowClient().get_run(run.info.run_id)
    assert got.data.params == {}  # TrainingArguments are not params ...
    config = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/trainer_config.json"))
    assert config["training_arguments"]["output_dir"] == str(tmp_path / "o")  # ... but an artifact
    assert config["model_config"] == {"hidden_size": 8}
    assert set(got.data.metrics) == {"loss", "reward_eg_grpo", *_logs("rewards/", 0, 0, 0, 0)}
    assert got.data.metrics["reward_eg_grpo"] == 1.0


def test_make_trainer_sends_mlflow_through_its_own_callback_not_report_to(tmp_path, monkeypatch):
    from biocheck.rewards.components import RewardConfig
    from biocheck.train import grpo

    seen = {}

    class Trainer:
        def __init__(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr("trl.GRPOTrainer", Trainer)
    cfg = grpo.TrainConfig(out_dir=tmp_path / "ckpt", max_steps=2, save_steps=1, eval_steps=1)
    bank = SimpleNamespace(cfg=RewardConfig(), weights=lambda: [1.0, 0.5, 1.0, -1.0, 0.0], functions=lambda: [])
    grpo.make_trainer(None, None, cfg, [], [], None, bank, 6, ["mlflow"], callbacks=[], progress=False)
    assert seen["args"].report_to == []  # TRL's profiling timers go nowhere
    assert [type(c).__name__ for c in seen["callbacks"]] == ["TrainLog"]
