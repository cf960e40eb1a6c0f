"""Training plumbing: reward bank, run keys, checkpoint selection, and (slow) train + kill + resume."""

from __future__ import annotations

import csv
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
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.pubmed.search import SearchConfig, search_tool
from biocheck.rewards.components import EpisodeView, RewardConfig, score_many
from biocheck.train.env import SearchEnv
from biocheck.train.grpo import TrainConfig, latest_checkpoint, prepare_out_dir
from biocheck.train.rewards import COMPONENTS, RewardBank
from biocheck.train.select import SelectConfig, checkpoint_table, choose, select
from biocheck.train.stage import build_components, run_key
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

def _checkpoint_dirs(out: Path, steps, complete: bool = True) -> None:
    for step in steps:
        (out / f"checkpoint-{step}").mkdir(parents=True)
        if complete:  # the Trainer writes its state last
            (out / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))


def test_checkpoints_of_another_run_are_not_resumed(tmp_path):
    out = tmp_path / "ckpt"
    assert prepare_out_dir(out, "key-a") is None
    _checkpoint_dirs(out, [5])
    assert prepare_out_dir(out, "key-a") == out / "checkpoint-5"  # same run: resume
    assert prepare_out_dir(out, "key-b") is None and not (out / "checkpoint-5").exists()  # new run: fresh


def test_latest_checkpoint_is_the_highest_step_not_the_last_name(tmp_path):
    out = tmp_path / "ckpt"
    _checkpoint_dirs(out, [9, 10, 2])  # by name, "checkpoint-9" sorts after "checkpoint-10"
    (out / "checkpoint-99").write_text("a stray file, not a checkpoint")
    (out / "checkpoint-final").mkdir()  # not numbered
    (out / "checkpoint-11.tmp").mkdir()  # a save under another name
    _checkpoint_dirs(out, [12], complete=False)  # killed mid-save: no trainer_state.json, weights maybe partial
    (out / "runs").mkdir()
    assert latest_checkpoint(out) == out / "checkpoint-10"
    assert latest_checkpoint(tmp_path / "empty") is None
    _checkpoint_dirs(out, [100])
    assert latest_checkpoint(out) == out / "checkpoint-100"


def test_resume_picks_the_numerically_latest_checkpoint(tmp_path):
    out = tmp_path / "ckpt"
    assert prepare_out_dir(out, "key-a") is None
    _checkpoint_dirs(out, [9, 10])
    assert prepare_out_dir(out, "key-a") == out / "checkpoint-10"
    assert json.loads((out / "run_key.json").read_text()) == {"key": "key-a"}


def _params(**reward) -> dict:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["reward"].update(reward)
    return params


def _key(params: dict, base: str = "base-fp", train_ids=("t1", "t2"), val_ids=("v1",)) -> str:
    return run_key(build_components(params), base, list(train_ids), list(val_ids))


REWARD_CHANGES = [("variant", "outcome_only"), ("beta1", 0.25), ("beta2", 2.0), ("beta3", 0.5), ("alpha", 2.0),
                  ("threshold", 0.6), ("unique_papers", True), ("judge", "openai:gpt-x"), ("judge", "none")]


def test_run_key_changes_with_every_reward_setting():
    base = _key(_params())
    assert _key(_params()) == base  # the same config: the same run
    assert all(_params()["reward"].get(k) != v for k, v in REWARD_CHANGES)  # each is a real change
    keys = [_key(_params(**{name: value})) for name, value in REWARD_CHANGES]
    assert base not in keys and len(set(keys)) == len(keys)
    # where the judge's scores are cached changes no score: still the same run
    assert _key(_params(judge_cache="elsewhere/judge.sqlite")) == base


def test_run_key_changes_with_the_judge_prompt_base_model_and_data(monkeypatch):
    from biocheck.rewards import judge_base

    base = _key(_params())
    assert _key(_params(), base="other-fp") != base
    assert _key(_params(), train_ids=("t1",)) != base and _key(_params(), val_ids=("v2",)) != base
    monkeypatch.setattr(judge_base, "prompt_template", lambda: "Is the claim true? {claim} {title} {abstract}")
    assert _key(_params()) != base


def test_a_changed_reward_starts_afresh_and_an_unchanged_one_resumes(tmp_path):
    out = tmp_path / "ckpt"
    assert prepare_out_dir(out, _key(_params())) is None
    _checkpoint_dirs(out, [5, 10])
    assert prepare_out_dir(out, _key(_params())) == out / "checkpoint-10"  # rebuilt from the same params: resume
    assert prepare_out_dir(out, _key(_params(beta2=2.0))) is None  # another reward: another experiment
    assert sorted(p.name for p in out.iterdir()) == ["run_key.json"]


def test_each_checkpoint_needs_a_validation_reward():
    with pytest.raises(ValueError, match="save_steps"):
        TrainConfig(save_steps=15, eval_steps=10)
    assert TrainConfig(save_steps=20, eval_steps=10).save_steps == 20


# --- selection ------------------------------------------------------------------------------------

def _fake_checkpoints(root: Path, rewards: dict[int, float], start: float | None = 0.1) -> Path:
    history = [{"step": 0, "eval_reward": start}] if start is not None else []
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


def test_checkpoints_are_ordered_by_step_and_read_from_the_latest_state(tmp_path):
    ckpts = _fake_checkpoints(tmp_path / "ckpt", {9: 0.4, 10: 0.6})
    rows, history = checkpoint_table(ckpts)
    assert [r["step"] for r in rows] == [9, 10]  # not by name ("checkpoint-10" < "checkpoint-9")
    # the numerically latest state holds every evaluation; checkpoint-9's state stops before step 10
    assert [r["eval_reward"] for r in rows] == [0.4, 0.6] and history[-1] == {"step": 10, "eval_reward": 0.6,
                                                                                 "eval_rewards/outcome/mean": 0.3}
    assert choose(rows)["step"] == 10


def test_a_checkpoint_without_a_validation_reward_is_never_chosen(tmp_path):
    ckpts = _fake_checkpoints(tmp_path / "ckpt", {10: 0.2, 20: 0.3})
    history = json.loads((ckpts / "checkpoint-20" / "trainer_state.json").read_text())["log_history"]
    late = ckpts / "checkpoint-30"  # saved at a step without an evaluation, with a far better training reward
    late.mkdir()
    (late / "trainer_state.json").write_text(json.dumps({"log_history": history + [{"step": 30, "reward": 9.0}]}))
    (ckpts / "checkpoint-40").mkdir()  # killed mid-save: no trainer_state.json
    rows, _ = checkpoint_table(ckpts)
    assert [(r["step"], r["eval_reward"]) for r in rows] == [(10, 0.2), (20, 0.3), (30, None)]
    assert choose(rows)["step"] == 20


def test_choose_best_validation_reward_rules():
    def rows(*pairs):
        return [{"step": step, "eval_reward": r} for step, r in pairs]

    assert choose(rows((30, 0.5), (20, 0.5), (40, 0.5)))["step"] == 20  # ties: the earliest step, in any order
    assert choose(rows((10, -1.0), (20, -0.25), (30, None)))["step"] == 20  # negative rewards: still the highest
    assert choose(rows((10, 0.0), (20, None)))["step"] == 10  # 0.0 is a reward, not a missing one
    with pytest.raises(InputError, match="save_steps"):
        choose(rows((10, None), (20, None)))


def test_selection_without_a_start_evaluation_and_the_reward_curve(tmp_path):
    ckpts = _fake_checkpoints(tmp_path / "ckpt", {9: 0.25, 10: 0.5}, start=None)
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp_path / "selected", metrics_path=tmp_path / "sel.json",
                       curve_path=tmp_path / "curve.csv", register=False)
    result = select(cfg)
    assert result["selected_step"] == 10 and result["start_eval_reward"] is None and "registered" not in result
    assert "table" in json.loads((tmp_path / "sel.json").read_text())
    history = json.loads((ckpts / "checkpoint-10" / "trainer_state.json").read_text())["log_history"]
    expected = [[str(step), str(next(h["reward"] for h in history if h["step"] == step and "reward" in h)),
                 str(next(h["eval_reward"] for h in history if h["step"] == step and "eval_reward" in h))]
                for step in (9, 10)]  # by step as a number
    with open(tmp_path / "curve.csv", newline="") as f:
        assert list(csv.reader(f)) == [["step", "train_reward", "eval_reward"], *expected]


def test_select_with_only_unfinished_checkpoints_explains(tmp_path):
    _checkpoint_dirs(tmp_path, [10], complete=False)
    with pytest.raises(InputError, match="no finished checkpoints"):
        select(SelectConfig(checkpoints=tmp_path))


def test_select_without_checkpoints_explains(tmp_path):
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
