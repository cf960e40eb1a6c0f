"""Training plumbing: reward bank, run keys, checkpoint selection, and (slow) train + kill + resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from biocheck.agent.prompts import Prompts
from biocheck.labels import Label
from biocheck.pubmed.search import SearchConfig, search_tool
from biocheck.rewards.components import EpisodeView, RewardConfig, score_many
from biocheck.train.env import SearchEnv
from biocheck.train.grpo import TrainConfig, prepare_out_dir
from biocheck.train.rewards import COMPONENTS, RewardBank
from biocheck.train.select import SelectConfig, checkpoint_table, choose, select
from tests.conftest import REPO
from tests.test_agent import REPORT

# --- reward bank ----------------------------------------------------------------------------------


def _rollouts(evidence):
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


def test_reward_bank_components_equal_the_library_and_score_once(evidence, monkeypatch):
    envs, completions = _rollouts(evidence)
    claims, labels = ["Vitamin D prevents fractures."] * 3, ["SUPPORTED", "SUPPORTED", "REFUTED"]
    calls = []
    import biocheck.train.rewards as tr

    monkeypatch.setattr(tr, "score_many", lambda *a, **k: calls.append(1) or score_many(*a, **k))
    bank = RewardBank(RewardConfig(), judge=None)
    values = {f.__name__: f(completions, environments=envs, label=labels, claim=claims) for f in bank.functions()}
    assert len(calls) == 1  # one scoring pass serves all five components
    expected = score_many([EpisodeView(claim=c, gold=Label(g), queries=list(e.queries), ledger=dict(e.ledger),
                                       final_text=comp[-1]["content"])
                           for c, g, e, comp in zip(claims, labels, envs, completions, strict=True)], RewardConfig())
    for name in ("outcome", "search", "evidence", "hallucination"):
        assert values[name] == [getattr(b, name) for b in expected]
    assert values["outcome"] == [1.0, 0.0, 0.0] and values["searches"] == [1.0, 1.0, 0.0]
    total = [sum(w * values[n][i] for w, n in zip(bank.weights(), COMPONENTS, strict=True)) for i in range(3)]
    assert total == pytest.approx([b.total for b in expected])
    assert bank.last_batch[0]["reward"]["outcome"] == 1.0


def test_outcome_only_weights():
    assert RewardBank(RewardConfig(variant="outcome_only")).weights() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert RewardBank(RewardConfig(beta1=0.5, beta2=1.0, beta3=1.0)).weights() == [1.0, 0.5, 1.0, -1.0, 0.0]


def test_bank_needs_environments():
    with pytest.raises(ValueError, match="environment"):
        RewardBank(RewardConfig()).functions()[0]([[]], label=["SUPPORTED"], claim=["x"])


# --- run keys and configs -------------------------------------------------------------------------

def test_checkpoints_of_another_run_are_not_resumed(tmp_path):
    out = tmp_path / "ckpt"
    assert prepare_out_dir(out, "key-a") is None
    (out / "checkpoint-5").mkdir()
    assert prepare_out_dir(out, "key-a") == out / "checkpoint-5"  # same run: resume
    assert prepare_out_dir(out, "key-b") is None and not (out / "checkpoint-5").exists()  # new run: fresh


def test_each_checkpoint_needs_a_validation_reward():
    with pytest.raises(ValueError, match="save_steps"):
        TrainConfig(save_steps=15, eval_steps=10)
    assert TrainConfig(save_steps=20, eval_steps=10).save_steps == 20


# --- selection ------------------------------------------------------------------------------------

def _fake_checkpoints(root: Path, rewards: dict[int, float]) -> Path:
    history = [{"step": 0, "eval_reward": 0.1}]
    for step, r in rewards.items():
        history += [{"step": step, "reward": r - 0.05}, {"step": step, "eval_reward": r, "eval_rewards/outcome/mean": r / 2}]
    for step in rewards:
        d = root / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"step": step}))
        (d / "model.safetensors").write_bytes(b"w%d" % step)
        (d / "optimizer.pt").write_bytes(b"big")
        upto = [h for h in history if h["step"] <= step]
        (d / "trainer_state.json").write_text(json.dumps({"log_history": upto}))
    return root


def test_select_best_validation_reward_ties_to_earlier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpts = _fake_checkpoints(tmp_path / "ckpt", {10: 0.2, 20: 0.5, 30: 0.5, 40: 0.3})
    rows, _ = checkpoint_table(ckpts)
    assert [r["step"] for r in rows] == [10, 20, 30, 40] and rows[1]["outcome"] == 0.25
    assert choose(rows)["step"] == 20
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp_path / "selected", metrics_path=tmp_path / "sel.json",
                       curve_path=tmp_path / "curve.csv", registered_model="biocheck-test")
    result = select(cfg)
    assert result["selected_step"] == 20 and result["start_eval_reward"] == 0.1
    assert (tmp_path / "selected" / "model.safetensors").read_bytes() == b"w20"
    assert not (tmp_path / "selected" / "optimizer.pt").exists()
    assert json.loads((tmp_path / "sel.json").read_text())["table"][2]["eval_reward"] == 0.5
    assert (tmp_path / "curve.csv").read_text().splitlines()[:2] == ["step,train_reward,eval_reward", "0,,0.1"]
    from mlflow import MlflowClient

    from biocheck.tracking import tracking_uri

    mv = MlflowClient(tracking_uri()).get_model_version_by_alias("biocheck-test", "champion")
    assert mv.tags["step"] == "20" and mv.source.endswith("selected")
    select(cfg)  # a second selection is a new version, and takes the alias
    assert str(MlflowClient(tracking_uri()).get_model_version_by_alias("biocheck-test", "champion").version) == "2"


def test_select_without_checkpoints_explains(tmp_path):
    from biocheck.io import InputError

    with pytest.raises(InputError, match="biocheck train"):
        select(SelectConfig(checkpoints=tmp_path))


# --- the real loop: tiny model, a few steps, killed and resumed -----------------------------------

@pytest.fixture
def project(tmp_path, raw_dir, tiny_model):
    """A project folder with prepared data, index and the tiny model, and params for a short run."""
    from biocheck.data.prepare import PrepareConfig, prepare
    from biocheck.pubmed.build import EvidenceConfig, build_evidence

    prepared = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=prepared, metrics_path=None, subset={"val": 4}))
    build_evidence(EvidenceConfig(corpus=prepared / "corpus.jsonl", index_dir=tmp_path / "index",
                                  store=tmp_path / "ev.sqlite", metrics_path=None, progress=False))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["evidence"].update(index_dir=str(tmp_path / "index"), store=str(tmp_path / "ev.sqlite"))
    params["model"]["out_dir"] = str(tiny_model)
    params["reward"].update(judge=f"transformers:{tiny_model}", judge_cache=str(tmp_path / "judge.sqlite"))
    params["train"].update(out_dir=str(tmp_path / "ckpt"), max_steps=4, save_steps=1, eval_steps=1,
                           num_generations=2, per_device_train_batch_size=2, num_generations_eval=2,
                           max_completion_length=256, sft={"enabled": True, "epochs": 1})
    params["agent"].update(max_searches=1, max_new_tokens=64)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


RUN = """
import sys, time
from biocheck.config import load_params
from biocheck.train.stage import train
import transformers

class Slow(transformers.TrainerCallback):  # lets the test kill the run between checkpoints
    def on_save(self, args, state, control, **kw):
        time.sleep(float(sys.argv[2]))

import biocheck.train.grpo as g
orig = g.make_trainer
g.make_trainer = lambda *a, **k: orig(*a, **{**k, "callbacks": (k.get("callbacks") or []) + [Slow()]})
print("STATS", train(load_params(sys.argv[1]), progress=False), flush=True)
"""


@pytest.mark.slow
def test_train_is_killed_and_resumes_from_the_last_checkpoint(project):
    env = {**os.environ, "BIOCHECK_TRACKING": "off", "TRL_EXPERIMENTAL_SILENCE": "1"}
    ckpt = project / "ckpt"
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(project / "params.yaml"), "3"], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while not (ckpt / "checkpoint-2" / "trainer_state.json").exists() and time.time() < deadline:
        time.sleep(0.2)
        assert proc.poll() is None, proc.stdout.read()
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (ckpt / "checkpoint-4").exists()
    first = (ckpt / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns
    done = subprocess.run([sys.executable, "-c", RUN, str(project / "params.yaml"), "0"], cwd=project, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"'resumed_from': '{ckpt / 'checkpoint-2'}'" in done.stdout
    state = json.loads((ckpt / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert (ckpt / "checkpoint-1" / "trainer_state.json").stat().st_mtime_ns == first  # not redone
    train_steps = [h["step"] for h in state["log_history"] if "loss" in h]
    assert sorted(set(train_steps)) == [1, 2, 3, 4]
    assert {h["step"] for h in state["log_history"] if "eval_reward" in h} >= {0, 1, 2, 3, 4}
