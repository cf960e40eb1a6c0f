"""Training outputs without training: fake GRPO rollouts and checkpoint folders, tiny real checkpoints, and an
isolated MLflow model registry (`store`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pytest

from biocheck import tracking
from biocheck.agent.prompts import Prompts
from biocheck.evidence.search import SearchConfig, search_tool
from biocheck.train.env import SearchEnv
from tests.helpers.turns import REPORT


def rollouts(evidence):
    cfg, _ = evidence
    tool = search_tool(SearchConfig(index_dir=cfg.index_dir, store=cfg.store))
    envs = [SearchEnv(tool, Prompts(max_searches=2), 2) for _ in range(3)]
    envs[0].search_pubmed('"vitamin D" AND fracture*')
    envs[1].search_pubmed("coffee")
    completions = [[{"role": "assistant", "content": REPORT}],
                   [{"role": "assistant", "content": "", "tool_calls": [{}]}, {"role": "tool", "content": "x"},
                    {"role": "assistant", "content": REPORT.replace("SUPPORTED\n", "REFUTED\n")}],
                   [{"role": "assistant", "content": "garbage"}]]
    return envs, completions


def grpo_weights(step: int) -> bytes:
    """A small, valid safetensors file that tells the checkpoints apart (selection and resume check them)."""
    import numpy as np
    from safetensors.numpy import save

    return save({"w": np.full(4, step, dtype=np.float32)})


def fake_checkpoints(root: Path, rewards: dict[int, float], start: float | None = 0.1) -> Path:
    history = [{"step": 0, "eval_reward": start}] if start is not None else []
    for step, r in rewards.items():
        history += [{"step": step, "reward": r - 0.05},
                    {"step": step, "eval_reward": r, "eval_rewards/outcome/mean": r / 2,
                     "eval_rewards/outcome/std": 0.01, "eval_completions/mean": 99.0}]
    for step in rewards:
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"step": step}))
        (d / "model.safetensors").write_bytes(grpo_weights(step))
        (d / "optimizer.pt").write_bytes(b"big")
        upto = [h for h in history if h["step"] <= step]
        (d / "trainer_state.json").write_text(json.dumps({"log_history": upto}))
    return root


NAME = "biocheck-agent"


@pytest.fixture
def store(tmp_path, monkeypatch, mlflow_db):
    """A tracking store of this test's own (its registry starts empty) and a model cache of its own."""
    for name in (tracking.PIPELINE_ENV, "DVC_STAGE", "DVC_ROOT", "BIOCHECK_TRACKING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{mlflow_db}")
    monkeypatch.setenv("BIOCHECK_MODEL_CACHE", str(tmp_path / "model-cache"))
    mlflow.set_tracking_uri(tracking.tracking_uri())
    return mlflow.MlflowClient()


def tiny_checkpoints(root: Path, model: Path, rewards: dict[int, float]) -> Path:
    """Training checkpoints holding the tiny model (a real causal LM with its tokenizer), best: max reward."""
    history = [{"step": 0, "eval_reward": 0.1}]
    for step, r in rewards.items():
        history.append({"step": step, "eval_reward": r})
        d = root / f"checkpoint-{step}"
        shutil.copytree(model, d, ignore=shutil.ignore_patterns(".biocheck-output"))
        (d / "trainer_state.json").write_text(json.dumps({"log_history": [h for h in history if h["step"] <= step]}))
    return root
