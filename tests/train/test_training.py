"""Training plumbing: reward bank, run keys, checkpoint selection, and (slow) train + kill + resume."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import yaml

from biocheck.agent.prompts import Prompts
from biocheck.io import InputError
from biocheck.labels import Label
from biocheck.pipeline import train_setup
from biocheck.rewards.components import EpisodeView, RewardBreakdown, RewardConfig, score_many
from biocheck.train.env import env_class
from biocheck.train.grpo import TrainConfig, latest_checkpoint, prepare_out_dir, previous_dir
from biocheck.train.reward_funcs import COMPONENTS, RewardBank
from biocheck.train.select import SelectConfig, checkpoint_table, choose, select
from biocheck.train.training import TRAINING_AGENT_FIELDS, run_key
from tests.helpers.builders import write_raw
from tests.helpers.checkpoints import fake_checkpoints, grpo_weights, rollouts
from tests.helpers.paths import REPO

# --- reward bank ----------------------------------------------------------------------------------


def test_reward_bank_components_equal_the_library_and_score_once(evidence, monkeypatch):
    envs, completions = rollouts(evidence)
    claims, labels = ["Vitamin D prevents fractures."] * 3, ["SUPPORTED", "SUPPORTED", "REFUTED"]
    calls = []
    import biocheck.train.reward_funcs as tr

    monkeypatch.setattr(tr, "score_many", lambda *a, **k: calls.append(1) or score_many(*a, **k))
    bank = RewardBank(RewardConfig(), judge=None)
    values = {f.__name__: f(completions, environments=envs, label=labels, claim=claims) for f in bank.functions()}
    assert len(calls) == 1  # one scoring pass serves all five components
    expected = score_many([EpisodeView(claim=c, gold=Label(g), queries=e.budget.query_texts(), ledger=dict(e.budget.ledger),
                                       final_text=comp[-1]["content"])
                           for c, g, e, comp in zip(claims, labels, envs, completions, strict=True)], RewardConfig())
    for name in ("outcome", "search", "evidence", "hallucination"):
        assert values[name] == [getattr(b, name) for b in expected]
    assert values["outcome"] == [1.0, 0.0, 0.0] and values["searches"] == [1.0, 1.0, 0.0]
    total = [sum(w * values[n][i] for w, n in zip(bank.weights(), COMPONENTS, strict=True)) for i in range(3)]
    assert total == pytest.approx([b.total for b in expected])
    assert bank.last_batch[0]["reward"]["outcome"] == 1.0


def test_group_stats_by_hand():
    from biocheck.train.reward_funcs import funnel_stats, group_stats

    def b(outcome, evidence):
        return RewardBreakdown(variant="eg_grpo", outcome=outcome, search=0.0, evidence=evidence, hallucination=0.0,
                               total=outcome + evidence, ehr=0.0, eqs=None, n_cited=0, n_hallucinated=0, n_searches=0,
                               n_advanced=0, conclusion=None, gold=None, judge_used=False)

    # claim a: evidence 0, 0.5 (varies; std 0.3536); claim b: evidence 0, 0 (does not); claim c: one episode
    got = group_stats([b(1, 0.0), b(0, 0.5), b(1, 0.0), b(1, 0.0), b(0, 0.9)], ["a", "a", "b", "b", "c"])
    assert got["groups/n"] == 2  # a group of one episode gives GRPO nothing: not counted
    assert got["groups/evidence/varying"] == 0.5 and got["groups/outcome/varying"] == 0.5
    assert got["groups/evidence/std"] == pytest.approx((0.5 / 2 ** 0.5) / 2)  # ddof 1 in a, 0 in b
    assert got["groups/evidence/mean"] == pytest.approx(1.4 / 5) and got["groups/total/varying"] == 0.5
    assert group_stats([b(1, 0.0)], ["a"]) == {"groups/n": 0.0, **{f"groups/{t}/mean": pytest.approx(v) for t, v in
                                                                    (("outcome", 1), ("search", 0), ("evidence", 0),
                                                                     ("hallucination", 0), ("total", 1))}}
    from biocheck.rewards.funnel import Funnel

    f = funnel_stats([Funnel(gold=1, retrieved=True, cited=True), Funnel(gold=1), None])
    assert f["funnel/retrieved"] == 0.5 and f["funnel/cited"] == 0.5 and f["funnel/credited"] == 0.0
    assert funnel_stats([None]) == {}


def test_the_bank_groups_by_claim_id_and_funnels_where_it_knows_the_gold(evidence):
    from biocheck.data.schema import GoldEvidence
    from biocheck.rewards.funnel import gold_papers

    envs, completions = rollouts(evidence)
    gold = {"c1": gold_papers([GoldEvidence(doc_id="101", sentences=[0], label=Label.SUPPORTED)],
                              lambda d: ["Vitamin D supplementation reduced hip fractures in older adults."])}
    bank = RewardBank(RewardConfig(), judge=None, gold=gold)
    bank.functions()[0](completions, environments=envs, label=["SUPPORTED"] * 3, claim=["x"] * 3,
                        claim_id=["c1", "c1", "c2"])
    stats = bank.last_stats
    assert stats["groups/n"] == 1 and stats["groups/outcome/varying"] == 1.0  # c1: right, then wrong
    assert stats["funnel/retrieved"] == 0.5  # c1's vitamin D search found 101, its coffee search did not (c2: no gold)
    assert stats["funnel/credited"] == 0.0  # no judge, no credit


def test_outcome_only_weights():
    assert RewardBank(RewardConfig(variant="outcome_only")).weights() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert RewardBank(RewardConfig(beta1=0.5, beta2=1.0, beta3=1.0)).weights() == [1.0, 0.5, 1.0, -1.0, 0.0]


def test_bank_needs_environments():
    with pytest.raises(ValueError, match="environment"):
        RewardBank(RewardConfig()).functions()[0]([[]], label=["SUPPORTED"], claim=["x"])


# --- run keys and configs -------------------------------------------------------------------------


def _checkpoint_dirs(out: Path, steps, complete: bool = True) -> None:
    for step in steps:
        d = out / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps({"step": step}))
        (d / "model.safetensors").write_bytes(grpo_weights(step))
        if complete:  # the Trainer writes its state last
            (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))


def test_checkpoints_of_another_run_are_not_resumed(tmp_path):
    out = tmp_path / "ckpt"
    assert prepare_out_dir(out, "key-a") is None
    _checkpoint_dirs(out, [5])
    assert prepare_out_dir(out, "key-a") == out / "checkpoint-5"  # same run: resume
    assert prepare_out_dir(out, "key-b") is None and not (out / "checkpoint-5").exists()  # new run: fresh
    kept = previous_dir(out) / "key-a"  # ... and the replaced run is still on disk, beside the output
    assert (kept / "checkpoint-5" / "trainer_state.json").is_file()
    assert json.loads((kept / "run_key.json").read_text()) == {"key": "key-a"}


@pytest.mark.parametrize("marker", [b"{not json", b"[1, 2]", b'{"key": 3}', b"\xff\xfe"])
def test_a_damaged_run_key_is_a_foreign_run_moved_aside_not_a_traceback(tmp_path, marker):
    out = tmp_path / "ckpt"
    prepare_out_dir(out, "key-a")
    _checkpoint_dirs(out, [5])
    (out / "run_key.json").write_bytes(marker)
    assert prepare_out_dir(out, "key-a") is None  # never resumed: whose checkpoints they are is unknown
    assert (previous_dir(out) / "unknown" / "checkpoint-5" / "trainer_state.json").is_file()  # never deleted


def test_only_the_latest_replaced_run_is_kept_and_an_empty_one_is_not(tmp_path, caplog):
    out = tmp_path / "models" / "checkpoints"
    prepare_out_dir(out, "key-a")
    _checkpoint_dirs(out, [2])
    prepare_out_dir(out, "key-b")
    _checkpoint_dirs(out, [4])
    with caplog.at_level("WARNING"):
        prepare_out_dir(out, "key-c")
    assert previous_dir(out) == tmp_path / "models" / ".previous" / "checkpoints"
    assert sorted(p.name for p in previous_dir(out).iterdir()) == ["key-b"]
    assert (previous_dir(out) / "key-b" / "checkpoint-4").is_dir()
    assert str(previous_dir(out) / "key-b") in caplog.text  # one line says where
    prepare_out_dir(out, "key-d")  # key-c never saved a checkpoint: nothing worth keeping
    assert sorted(p.name for p in previous_dir(out).iterdir()) == ["key-b"]


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
    c = train_setup(params)
    prompts = Prompts(max_searches=c.agent.max_searches, papers_per_search=c.search.max_results)
    return run_key(c, prompts, base, list(train_ids), list(val_ids))


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
    from biocheck.rewards.judge import base as judge_base

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
    assert (previous_dir(out) / _key(_params()) / "checkpoint-10").is_dir()  # the old run: moved, not deleted


def test_run_key_ignores_the_agent_settings_training_never_reads():
    base = _key(_params())
    for name, value in (("workers", 7), ("temperature", 0.9), ("top_p", 0.5), ("seed", 99),
                        ("llm", "openai:gpt-x")):
        params = _params()
        assert params["agent"][name] != value
        params["agent"][name] = value
        assert _key(params) == base, name
    for name in TRAINING_AGENT_FIELDS:  # and changes with each one it does read
        params = _params()
        params["agent"][name] = params["agent"][name] + 1
        assert _key(params) != base, name


def test_dvc_train_stage_lists_exactly_the_agent_settings_training_reads():
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["train"]["do"]
    agent = sorted(p for p in stage["params"] if isinstance(p, str) and p.startswith("agent"))
    assert agent == sorted(f"agent.{f}" for f in TRAINING_AGENT_FIELDS)


def test_each_checkpoint_needs_a_validation_reward():
    for save, ev in ((15, 10), (10, 20)):  # 10/20: checkpoint-10 would have no evaluation
        with pytest.raises(ValueError, match=r"train.save_steps must be a multiple of train.eval_steps \(each "
                                             r"checkpoint needs a validation reward\)"):
            TrainConfig(save_steps=save, eval_steps=ev)
    from biocheck.pipeline import train_config

    for save, ev, message in ((0, 10, "train.save_steps must be >= 1, not 0"),
                              (10, 0, "train.eval_steps must be >= 1, not 0"),
                              (-10, 5, "train.save_steps must be >= 1, not -10")):
        with pytest.raises(InputError) as e:  # a bound is the field's type (bounds.py), checked as params are read
            train_config({"train": {"save_steps": save, "eval_steps": ev}})
        assert str(e.value).endswith(message), str(e.value)
    assert TrainConfig(save_steps=20, eval_steps=10).save_steps == 20
    assert TrainConfig(save_steps=1, eval_steps=1).eval_steps == 1
    assert TrainConfig(out_dir="runs/x").out_dir == Path("runs/x")


def test_train_setup_reads_every_section_and_the_overrides():
    from biocheck.pipeline import train_config
    from biocheck.wiring import JudgeConfig, agent_config, model_config, reward_config, search_config

    params = _params(judge="openai:j", judge_cache="somewhere/j.sqlite")
    params["train"]["search_backend"] = "replay"
    params["data"]["out_dir"] = "elsewhere/prepared"
    c = train_setup(params, max_steps=3)
    assert c.train == train_config(params, max_steps=3) and c.train.max_steps == 3
    assert c.search == search_config(params, backend="replay") and c.search.backend == "replay"
    assert c.agent == agent_config(params) and c.model == model_config(params)
    assert (c.reward, c.judge) == reward_config(params)
    assert c.judge == JudgeConfig(spec="openai:j", cache=Path("somewhere/j.sqlite"), batch_size=8)
    assert c.prepared == Path("elsewhere/prepared")
    del params["data"]["out_dir"]
    assert train_setup(params).prepared == Path("data/prepared")


def test_fingerprint_inputs_is_a_short_order_free_hash():
    from biocheck.train.grpo import fingerprint_inputs

    key = fingerprint_inputs({"a": 1, "b": [2, 3]})
    assert len(key) == 16 and set(key) <= set("0123456789abcdef")
    assert fingerprint_inputs({"b": [2, 3], "a": 1}) == key  # key order does not matter
    assert fingerprint_inputs({"a": 1, "b": [3, 2]}) != key
    assert fingerprint_inputs({"p": Path("models/x")}) == fingerprint_inputs({"p": "models/x"})  # paths as text


def test_checkpoints_without_a_run_key_are_not_resumed_and_parents_are_made(tmp_path):
    out = tmp_path / "ckpt"
    _checkpoint_dirs(out, [5])  # left by an unknown run: no run_key.json
    assert prepare_out_dir(out, "key-a") is None and not (out / "checkpoint-5").exists()
    nested = tmp_path / "a" / "b" / "ckpt"
    assert prepare_out_dir(nested, "key-a") is None
    assert json.loads((nested / "run_key.json").read_text()) == {"key": "key-a"}


# --- the GRPO trainer's configuration --------------------------------------------------------------

GRPO_VALUES = dict(num_generations=2, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                   learning_rate=3e-6, beta=0.04, epsilon=0.3, loss_type="grpo", max_steps=7, save_steps=4,
                   eval_steps=2, logging_steps=3, max_completion_length=321, temperature=0.7, seed=11,
                   gradient_checkpointing=False, bf16=False, use_vllm=False, vllm_mode="server", vllm_server_base_url="http://gpu0:8000",
                   num_generations_eval=2, eval_on_start=False, cache_implementation="static")


def test_grpo_config_carries_every_field_and_the_fixed_settings(tmp_path):
    import torch

    assert set(GRPO_VALUES) == set(TrainConfig.GRPO_FIELDS)
    import warnings

    cfg = TrainConfig(out_dir=tmp_path / "ckpt", **GRPO_VALUES)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # no deprecated transformers name on every training run
        args = cfg.grpo_config(tmp_path / "out", 5, [])
    assert args.activation_checkpointing is False
    assert cfg.grpo_config(tmp_path / "o2", 5, ["mlflow"]).report_to == ["mlflow"]
    assert {k: getattr(args, k) for k in TrainConfig.GRPO_FIELDS} == GRPO_VALUES
    assert args.output_dir == str(tmp_path / "out") and args.max_tool_calling_iterations == 5
    assert (args.eval_strategy, args.save_strategy) == ("steps", "steps")
    assert args.per_device_eval_batch_size == 4  # unset: evaluation batches as large as training ones
    wide = TrainConfig(**{**GRPO_VALUES, "per_device_eval_batch_size": 8}).grpo_config(tmp_path / "w", 1, [])
    assert wide.per_device_eval_batch_size == 8 and wide.per_device_train_batch_size == 4
    assert args.use_cpu is (not torch.cuda.is_available()) and args.report_to == []
    assert (args.save_only_model, args.log_completions, args.remove_unused_columns) == (False, False, False)
    # a field left unset (None) keeps TRL's own default
    from trl import GRPOConfig

    # a model turn is cut at the agent's per-turn limit, never past the completion's; none given: TRL's own
    assert args.generation_kwargs is None
    assert cfg.grpo_config(tmp_path / "t", 1, [], turn_tokens=64).generation_kwargs == {"max_new_tokens": 64}
    capped = cfg.grpo_config(tmp_path / "c", 1, [], turn_tokens=10**6).generation_kwargs
    assert capped == {"max_new_tokens": cfg.max_completion_length}
    unset = TrainConfig(**{**GRPO_VALUES, "num_generations_eval": None}).grpo_config(tmp_path / "o", 1, [])
    default = GRPOConfig(output_dir=str(tmp_path / "d"), use_cpu=True, bf16=False).num_generations_eval
    assert unset.num_generations_eval == default and unset.num_generations == 2


class _Bank:
    def functions(self):
        return ["f_outcome", "f_search"]

    def weights(self):
        return [1.0, 0.25]


def _fake_trl(monkeypatch):
    import trl

    class FakeGRPOTrainer:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    monkeypatch.setattr(trl, "GRPOTrainer", FakeGRPOTrainer)
    return FakeGRPOTrainer


def test_make_trainer_hands_trl_the_bank_environment_and_config(tmp_path, monkeypatch):
    from biocheck.train.grpo import NoEvalLossMixin, TimedMixin, make_trainer

    fake = _fake_trl(monkeypatch)
    monkeypatch.delenv("TRL_EXPERIMENTAL_SILENCE", raising=False)
    cfg = TrainConfig(out_dir=tmp_path / "ckpt", **GRPO_VALUES)
    model, tok, train_ds, eval_ds, factory, cb = object(), object(), object(), object(), object(), object()
    trainer = make_trainer(model, tok, cfg, train_ds, eval_ds, factory, _Bank(), 6, [], callbacks=[cb])
    assert isinstance(trainer, TimedMixin) and isinstance(trainer, NoEvalLossMixin) and isinstance(trainer, fake)
    assert os.environ["TRL_EXPERIMENTAL_SILENCE"] == "1"
    k = trainer.kwargs
    assert (k["model"], k["processing_class"], k["train_dataset"], k["eval_dataset"], k["environment_factory"]) == (
        model, tok, train_ds, eval_ds, factory)
    assert k["reward_funcs"] == ["f_outcome", "f_search"] and k["args"].reward_weights == [1.0, 0.25]
    assert k["args"].output_dir == str(tmp_path / "ckpt") and k["args"].max_tool_calling_iterations == 6
    assert k["args"].max_steps == 7 and k["args"].report_to == []
    assert k["peft_config"] is None and k["callbacks"] == [cb]
    assert make_trainer(model, tok, cfg, train_ds, eval_ds, factory, _Bank(), 6, []).kwargs["callbacks"] == []


def test_make_trainer_with_lora_builds_a_causal_lm_adapter(tmp_path, monkeypatch):
    import types

    from biocheck.train.grpo import make_trainer

    _fake_trl(monkeypatch)
    peft = types.ModuleType("peft")
    peft.LoraConfig = lambda **kw: ("LoraConfig", kw)
    monkeypatch.setitem(sys.modules, "peft", peft)
    cfg = TrainConfig(out_dir=tmp_path, lora={"r": 4, "lora_alpha": 8}, **GRPO_VALUES)
    trainer = make_trainer(object(), object(), cfg, None, None, None, _Bank(), 1, [])
    assert trainer.kwargs["peft_config"] == ("LoraConfig", {"task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8})


def test_generation_time_is_logged_per_mode(monkeypatch):
    from collections import defaultdict
    from types import SimpleNamespace

    import biocheck.train.grpo as g

    class Base:
        def _generate_and_score_completions(self, inputs):
            self.inputs = inputs
            return {"scored": inputs}

    class Timed(g.TimedMixin, Base):
        def __init__(self, training: bool):
            self.model = SimpleNamespace(training=training)
            self._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}

    ticks = iter([10.0, 12.5, 20.0, 20.25])
    monkeypatch.setattr(g, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    train, ev = Timed(True), Timed(False)
    assert train._generate_and_score_completions(["batch"]) == {"scored": ["batch"]} and train.inputs == ["batch"]
    assert ev._generate_and_score_completions(["b2"]) == {"scored": ["b2"]}
    assert dict(train._metrics["train"]) == {"time/generation_s": [2.5]} and not train._metrics["eval"]
    assert dict(ev._metrics["eval"]) == {"time/generation_s": [0.25]} and not ev._metrics["train"]


def test_the_saved_training_state_holds_no_timings_and_the_callbacks_get_them():
    """trainer_state.json is in every checkpoint, a DVC output: the same run on another machine must write the same
    bytes, so the seconds are dropped from the state's log; MLflow and the console (on_log) still see them."""
    from types import SimpleNamespace

    import biocheck.train.grpo as g

    seen = []

    class Base:  # the Trainer's log: the state's copy, then the callbacks
        def __init__(self):
            self.state = SimpleNamespace(log_history=[{"loss": 0.1, "step_time": 9.0, "step": 1}])

        def log(self, logs, start_time=None):
            self.state.log_history.append({**logs, "step": 2})
            seen.append(dict(logs))

    class Trainer(g.PortableStateMixin, Base):
        pass

    t = Trainer()
    logs = {"loss": 0.5, "reward": 1.0, "step_time": 3.2, "time/generation_s": 1.5, "eval_time/generation_s": 0.5,
            "eval_runtime": 4.0, "eval_samples_per_second": 2.0, "eval_steps_per_second": 1.0, "train_runtime": 7.0,
            "num_tokens": 120.0}
    t.log(logs)
    assert seen == [logs]  # the callbacks got every value
    assert t.state.log_history[-1] == {"loss": 0.5, "reward": 1.0, "num_tokens": 120.0, "step": 2}
    assert t.state.log_history[0]["step_time"] == 9.0  # rows logged before are not this call's to change


def test_validation_scores_the_episodes_without_trls_eval_loss():
    import biocheck.train.grpo as g

    class Base:
        def _prepare_inputs(self, inputs):
            self.prepared = inputs  # TRL: generate, score and log the eval_* metrics
            return {"advantages": inputs}

        def prediction_step(self, *a, **k):  # TRL's: a GRPO loss forward pass over every episode
            raise AssertionError("the loss pass ran")

    class Trainer(g.NoEvalLossMixin, Base):
        pass

    t = Trainer()
    assert t.prediction_step(object(), ["b"], prediction_loss_only=True) == (None, None, None)
    assert t.prepared == ["b"]  # the episodes were still generated and scored


# --- selection ------------------------------------------------------------------------------------


def test_select_best_validation_reward_ties_to_earlier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ckpts = fake_checkpoints(tmp_path / "ckpt", {10: 0.2, 20: 0.5, 30: 0.5, 40: 0.3})
    rows, _ = checkpoint_table(ckpts)
    assert [r["step"] for r in rows] == [10, 20, 30, 40]
    # each component's validation mean, by name; other logged numbers are left out
    assert rows[1] == {"step": 20, "checkpoint": str(ckpts / "checkpoint-20"), "eval_reward": 0.5, "outcome": 0.25}
    assert choose(rows)["step"] == 20
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp_path / "selected", metrics_path=tmp_path / "sel.json",
                       curve_path=tmp_path / "curve.csv", registered_model="biocheck-test")
    result = select(cfg)
    assert result["selected_step"] == 20 and result["start_eval_reward"] == 0.1
    assert result["selected_eval_reward"] == 0.5
    assert json.loads((tmp_path / "selected" / "selection.json").read_text()) == rows[1]  # what was chosen, and why
    assert (tmp_path / "selected" / "model.safetensors").read_bytes() == grpo_weights(20)
    assert not (tmp_path / "selected" / "optimizer.pt").exists()
    assert json.loads((tmp_path / "sel.json").read_text())["table"][2]["eval_reward"] == 0.5
    curve = (tmp_path / "curve.csv").read_text().splitlines()  # long format: no empty cell for DVC to draw as 0
    assert curve[0] == "step,curve,reward" and "0,validation,0.1" in curve and not any(",," in r for r in curve)
    from mlflow import MlflowClient

    from biocheck.tracking import tracking_uri

    client = MlflowClient(tracking_uri())
    mv = client.get_model_version_by_alias("biocheck-test", "champion")
    assert mv.tags["step"] == "20" and mv.tags["validation_reward"] == "0.5"
    assert mv.source.startswith("models:/m-")  # a logged model holding a copy, not the models/selected folder
    run = client.get_run(mv.run_id)  # the selection is its own tracked run
    assert run.info.run_name == "select eg_grpo" and run.data.tags["stage"] == "select"
    assert run.data.params == {"selected_step": "20"}
    assert run.data.metrics == {"selected_eval_reward": 0.5, "selected_step": 20.0}
    assert client.get_registered_model("biocheck-test").description.startswith("The BioCheck agent: a claim in")
    assert result["registered"] == {"name": "biocheck-test", "version": mv.version, "alias": "challenger", "promoted": True}
    select(cfg)  # a second selection is a new version: the challenger; an equal reward keeps the champion
    registry = MlflowClient(tracking_uri())
    assert str(registry.get_model_version_by_alias("biocheck-test", "challenger").version) == "2"
    assert str(registry.get_model_version_by_alias("biocheck-test", "champion").version) == "1"


def test_a_checkpoint_name_with_more_dashes_is_read_by_its_last_number(tmp_path):
    ckpts = fake_checkpoints(tmp_path / "ckpt", {5: 0.3})
    (ckpts / "checkpoint-5").rename(ckpts / "checkpoint-run-a-5")  # still a finished checkpoint of step 5
    rows, _ = checkpoint_table(ckpts)
    assert [(r["step"], r["eval_reward"]) for r in rows] == [(5, 0.3)]


def test_checkpoints_are_ordered_by_step_and_read_from_the_latest_state(tmp_path):
    ckpts = fake_checkpoints(tmp_path / "ckpt", {9: 0.4, 10: 0.6})
    rows, history = checkpoint_table(ckpts)
    assert [r["step"] for r in rows] == [9, 10]  # not by name ("checkpoint-10" < "checkpoint-9")
    # the numerically latest state holds every evaluation; checkpoint-9's state stops before step 10
    assert [r["eval_reward"] for r in rows] == [0.4, 0.6]
    assert history[-1]["step"] == 10 and history[-1]["eval_reward"] == 0.6
    assert choose(rows)["step"] == 10


def test_a_checkpoint_without_a_validation_reward_is_never_chosen(tmp_path):
    ckpts = fake_checkpoints(tmp_path / "ckpt", {10: 0.2, 20: 0.3})
    history = json.loads((ckpts / "checkpoint-20" / "trainer_state.json").read_text())["log_history"]
    late = ckpts / "checkpoint-30"  # saved at a step without an evaluation, with a far better training reward
    late.mkdir()
    (late / "config.json").write_text("{}")
    (late / "model.safetensors").write_bytes(grpo_weights(30))
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
    with pytest.raises(InputError, match=r"^no checkpoint has a validation reward \(set train.save_steps to a "
                                         r"multiple of train.eval_steps\).$"):
        choose(rows((10, None), (20, None)))


def test_selection_without_a_start_evaluation_and_the_reward_curve(tmp_path):
    ckpts = fake_checkpoints(tmp_path / "ckpt", {9: 0.25, 10: 0.5}, start=None)
    state = ckpts / "checkpoint-10" / "trainer_state.json"
    logged = json.loads(state.read_text())["log_history"]
    state.write_text(json.dumps({"log_history": [*logged, {"step": 11, "reward": 0.125}]}))  # trained, not evaluated
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp_path / "selected", metrics_path=tmp_path / "sel.json",
                       curve_path=tmp_path / "curve.csv", register=False)
    result = select(cfg)
    assert result["selected_step"] == 10 and result["start_eval_reward"] is None and "registered" not in result
    assert "table" in json.loads((tmp_path / "sel.json").read_text())
    history = json.loads((ckpts / "checkpoint-10" / "trainer_state.json").read_text())["log_history"]
    logged = {(h["step"], curve): str(h[key]) for h in history
              for curve, key in (("train", "reward"), ("validation", "eval_reward")) if key in h}
    expected = [[str(step), curve, logged[(step, curve)]] for curve in ("train", "validation")
                for step in (9, 10, 11) if (step, curve) in logged]  # by step as a number
    assert ("11", "train") in {(s, c) for s, c, _ in expected} and len(expected) == 5
    with open(tmp_path / "curve.csv", newline="") as f:  # long format: step 11 has no validation row, no empty cell
        assert list(csv.reader(f)) == [["step", "curve", "reward"], *expected]


def test_select_with_only_unfinished_checkpoints_explains(tmp_path):
    _checkpoint_dirs(tmp_path, [10], complete=False)
    with pytest.raises(InputError, match="no finished checkpoints"):
        select(SelectConfig(checkpoints=tmp_path))


def test_select_without_checkpoints_explains(tmp_path):
    with pytest.raises(InputError, match="biocheck train"):
        select(SelectConfig(checkpoints=tmp_path))


# --- the train stage's wiring, in process: the heavy parts (models, TRL, SFT) replaced by recorders ---------

class _Loaded:
    """A stand-in tokenizer or model: remembers where it was loaded from; save_pretrained leaves its file."""

    def __init__(self, kind: str, path) -> None:
        self.kind, self.path, self.padding_side = kind, Path(path), "right"

    def save_pretrained(self, d) -> None:
        name = "config.json" if self.kind == "model" else "tokenizer.json"
        (Path(d) / name).write_text(json.dumps({"from": str(self.path)}))
        if self.kind == "model":  # weights that pass the model-folder check
            (Path(d) / "model.safetensors").write_bytes(grpo_weights(1))


class _Trainer:
    def __init__(self, history: list[dict], steps: int) -> None:
        from types import SimpleNamespace

        self.state = SimpleNamespace(log_history=history, global_step=steps)
        self.resumed: list = []

    def train(self, resume_from_checkpoint=None):
        from types import SimpleNamespace

        self.resumed.append(resume_from_checkpoint)
        return SimpleNamespace(training_loss=0.125)


WARM = {"demonstrations": {"SUPPORTED": 2}, "citing": 0}  # the two stub demonstrations: SUPPORTED, no evidence


class _Wiring:
    """Records every call `train` makes into the pieces it wires together."""

    HISTORY = [{"step": 0, "eval_reward": 0.25}, {"step": 1, "loss": 0.5, "reward": 0.1},
               {"step": 1, "eval_reward": 0.5}, {"step": 2, "loss": 0.4}, {"step": 2, "eval_reward": 0.75}]
    SFT_STATS = {"loss": 0.5, "examples": 2}
    SFT_SECONDS = {"seconds": 12.5}  # what train_sft also returns: its time, logged, never saved (issue 49)

    def __init__(self, monkeypatch, tmp_path: Path) -> None:
        import contextlib

        import transformers

        import biocheck.data.prepare as prep
        import biocheck.evidence.search as search_mod
        import biocheck.llm.load as tb
        import biocheck.rewards.judge as judge_mod
        import biocheck.train.dataset as data_mod
        import biocheck.train.demos as demos_mod
        import biocheck.train.grpo as grpo_mod
        import biocheck.train.sft as sft_mod
        from biocheck import tracking
        from biocheck.data.schema import ClaimRecord, CorpusDoc

        self.tmp = tmp_path
        (tmp_path / "base").mkdir()  # models/base as `model init` leaves it: checked before training reads it
        (tmp_path / "base" / "config.json").write_text("{}")
        (tmp_path / "base" / "model.safetensors").write_bytes(grpo_weights(0))
        self.loads, self.splits, self.corpus_dirs, self.fingerprinted, self.tools = [], [], [], [], []
        self.demos, self.sft, self.trainers, self.runs, self.metrics, self.judges = [], [], [], [], [], []
        self.tool, self.judge = types.SimpleNamespace(max_results=3), object()
        self.tracking_on = True
        self.history, self.steps = list(self.HISTORY), 4
        self.records = {split: [ClaimRecord(id=f"{split[0]}{i}", dataset="scifact", split=split,
                                            claim=f"{split} claim {i}", label="SUPPORTED") for i in range(1, n + 1)]
                        for split, n in (("train", 2), ("val", 1))}
        self.doc = CorpusDoc(id="d1", title="T", abstract=["A."])

        def auto(kind):
            class Auto:
                @staticmethod
                def from_pretrained(path):
                    self.loads.append((kind, Path(path)))
                    return _Loaded(kind, path)
            return Auto

        monkeypatch.setattr(transformers, "AutoTokenizer", auto("tokenizer"))
        monkeypatch.setattr(transformers, "AutoModelForCausalLM", auto("model"))
        monkeypatch.setattr(tb, "model_fingerprint",
                            lambda p: self.fingerprinted.append(Path(p)) or f"fp:{Path(p).name}")
        monkeypatch.setattr(prep, "load_split", lambda ds, split, d: self.splits.append((ds, split, Path(d)))
                            or self.records[split])
        monkeypatch.setattr(prep, "load_corpus", lambda d: self.corpus_dirs.append(Path(d)) or [self.doc])
        monkeypatch.setattr(search_mod, "search_tool", lambda cfg: self.tools.append(cfg) or self.tool)
        monkeypatch.setattr(demos_mod, "demonstration", self._demo)
        monkeypatch.setattr(sft_mod, "train_sft", lambda model, tok, convs, cfg, tools, seed, progress: self.sft.append(
            (model, tok, convs, cfg, tools, seed, progress)) or {**self.SFT_STATS, **self.SFT_SECONDS})
        monkeypatch.setattr(data_mod, "to_dataset", lambda recs, prompts: ("dataset", [r.id for r in recs], prompts))
        monkeypatch.setattr(grpo_mod, "make_trainer", self._make_trainer)
        monkeypatch.setattr(judge_mod, "make_judge",
                            lambda spec, batch_size, cache: self.judges.append((spec, batch_size, cache)) or self.judge)

        @contextlib.contextmanager
        def run(stage, params=None, **_names_and_tags):
            self.runs.append((stage, params))
            yield object() if self.tracking_on else None

        monkeypatch.setattr(tracking, "enabled", lambda: self.tracking_on)
        monkeypatch.setattr(tracking, "run", run)
        monkeypatch.setattr(tracking, "log_metrics", lambda m: self.metrics.append(m))

    def _demo(self, record, env, corpus, max_searches, query="and"):
        self.demos.append((record.id, env, corpus, max_searches))
        return [{"role": "assistant", "content": f"demo of {record.id}"}]

    def _make_trainer(self, model, tokenizer, cfg, train_ds, eval_ds, env_factory, bank, max_tool_iters, report_to,
                      callbacks=None, progress=True, turn_tokens=None):
        trainer = _Trainer(self.history, self.steps)
        self.trainers.append({"model": model, "tokenizer": tokenizer, "cfg": cfg, "train_ds": train_ds,
                              "eval_ds": eval_ds, "env_factory": env_factory, "bank": bank,
                              "max_tool_iters": max_tool_iters, "report_to": report_to, "callbacks": callbacks,
                              "progress": progress, "turn_tokens": turn_tokens,
                              "trainer": trainer})
        return trainer

    def params(self, sft: bool = True) -> dict:
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        params["data"]["out_dir"] = str(self.tmp / "prepared")
        params["model"]["out_dir"] = str(self.tmp / "base")
        params["agent"].update(max_searches=2, max_refusals=1, abstract_chars=123)
        params["reward"].update(judge="openai:judge-x", judge_cache=str(self.tmp / "judge.sqlite"))
        params["train"].update(out_dir=str(self.tmp / "ckpt"), metrics_path=str(self.tmp / "metrics" / "train.json"),
                               seed=7, sample_episodes=3, logging_steps=2, save_steps=2, eval_steps=2,
                               sft={"enabled": sft, "epochs": 1})
        return params


@pytest.fixture
def wiring(monkeypatch, tmp_path):
    return _Wiring(monkeypatch, tmp_path)


def test_train_wires_sft_the_trainer_tracking_and_metrics(wiring):
    from biocheck.params import plain
    from biocheck.pipeline import train_stage
    from biocheck.train.callbacks import SampleEpisodes
    from biocheck.train.reward_funcs import RewardBank
    from biocheck.train.sft import SFTConfig

    params = wiring.params()
    c = train_setup(params)
    prompts = Prompts(max_searches=2, papers_per_search=3)
    base, out, sft_dir = wiring.tmp / "base", wiring.tmp / "ckpt", wiring.tmp / "sft"
    stats = train_stage(params)

    # data, run key and search tool come from the params
    prepared = wiring.tmp / "prepared"
    assert wiring.splits == [("scifact", "train", prepared), ("scifact", "val", prepared)]
    assert wiring.fingerprinted == [base]
    key = run_key(c, prompts, "fp:base", ["t1", "t2"], ["v1"])
    assert json.loads((out / "run_key.json").read_text()) == {"key": key}
    assert wiring.tools == [c.search]
    # SFT warm start: demonstrations in the agent's environment, saved in sft/ beside the checkpoints
    assert wiring.corpus_dirs == [prepared]
    assert [(rid, type(env), env._tool, env._max, env._chars, env._prompts, corpus, n)
            for rid, env, corpus, n in wiring.demos] == [
        (rid, env_class(3), wiring.tool, 2, 123, prompts, {"d1": wiring.doc}, 2) for rid in ("t1", "t2")]
    [(sft_model, sft_tok, convs, sft_cfg, tools, seed, progress)] = wiring.sft
    assert tools == [prompts.tool_schema()]
    assert (sft_model.kind, sft_model.path, sft_tok.kind, sft_tok.path) == ("model", base, "tokenizer", base)
    assert convs == [prompts.messages(r.claim) + [{"role": "assistant", "content": f"demo of {r.id}"}]
                     for r in wiring.records["train"]]
    assert sft_cfg == SFTConfig(enabled=True, epochs=1, out_dir=sft_dir) and seed == 7 and progress is True
    assert json.loads((sft_dir / "config.json").read_text()) == {"from": str(base)}
    assert json.loads((sft_dir / "tokenizer.json").read_text()) == {"from": str(base)}
    # the trainer's stats, and what the demonstrations were: by gold label, and how many quote evidence
    assert json.loads((sft_dir / "sft_stats.json").read_text()) == {**wiring.SFT_STATS, **WARM}
    # GRPO starts from the SFT weights, with a left-padding tokenizer
    assert wiring.loads == [("tokenizer", base), ("model", base), ("tokenizer", sft_dir), ("model", sft_dir)]
    [t] = wiring.trainers
    assert (t["model"].kind, t["model"].path) == ("model", sft_dir)
    assert (t["tokenizer"].kind, t["tokenizer"].path, t["tokenizer"].padding_side) == ("tokenizer", sft_dir, "left")
    assert t["cfg"] == c.train
    assert t["train_ds"] == ("dataset", ["t1", "t2"], prompts)
    assert t["eval_ds"] == ("dataset", ["v1"], prompts)
    env = t["env_factory"]()
    assert (type(env), env._tool, env._prompts, env._max, env._chars) == (env_class(3), wiring.tool, prompts, 2, 123)
    assert isinstance(t["bank"], RewardBank) and t["bank"].cfg == c.reward and t["bank"].judge is wiring.judge
    assert wiring.judges == [("openai:judge-x", 8, wiring.tmp / "judge.sqlite")]
    assert t["max_tool_iters"] == 2 + 1  # the search budget plus the refusals after it
    # a rollout's model turn has the evaluated agent's limit (agent.max_new_tokens), not the whole completion's
    assert t["turn_tokens"] == yaml.safe_load((REPO / "params.yaml").read_text())["agent"]["max_new_tokens"]
    assert t["report_to"] == ["mlflow"] and t["progress"] is True
    [cb] = t["callbacks"]
    assert isinstance(cb, SampleEpisodes) and cb.bank is t["bank"] and (cb.n, cb.every) == (3, 2 * 5)
    assert t["trainer"].resumed == [None]
    # tracked: the run's params and the SFT numbers
    assert wiring.runs == [("train@eg_grpo", {"train": plain(c.train), "agent": plain(c.agent),
                                      "reward": plain(c.reward), "judge": "openai:judge-x",
                                      "prompt_hash": prompts.hash(), "run_key": key, "start": str(sft_dir)})]
    assert wiring.metrics == [{f"sft.{k}": v for k, v in {**wiring.SFT_STATS, **WARM}.items()}]
    assert stats == {"steps": 4, "train_loss": 0.125, "resumed_from": None, "eval_reward_start": 0.25,
                     "eval_reward_last": 0.75, "sft": {**wiring.SFT_STATS, **WARM}}
    assert json.loads((wiring.tmp / "metrics" / "train.json").read_text()) == {
        k: v for k, v in stats.items() if k not in ("sft", "resumed_from")}


def test_train_resumes_and_reuses_the_sft_weights(wiring):
    from biocheck.pipeline import train_stage as train

    params = wiring.params()
    train(params, progress=False)
    out, sft_dir = wiring.tmp / "ckpt", wiring.tmp / "sft"
    _checkpoint_dirs(out, [2])
    wiring.loads.clear()
    wiring.tracking_on, wiring.history, wiring.steps = False, [{"step": 3, "loss": 0.1}], 3
    stats = train(params, progress=False)
    assert len(wiring.sft) == 1  # the SFT weights are there: not trained again
    assert wiring.loads == [("tokenizer", sft_dir), ("model", sft_dir)]
    t = wiring.trainers[-1]
    assert t["progress"] is False  # --no-progress reaches the trainer's console output
    assert t["trainer"].resumed == [str(out / "checkpoint-2")] and t["report_to"] == []
    assert len(wiring.metrics) == 1  # tracking off: no SFT numbers logged this time
    assert stats == {"steps": 3, "train_loss": 0.125, "resumed_from": str(out / "checkpoint-2"),
                     "eval_reward_start": None, "eval_reward_last": None, "sft": {**wiring.SFT_STATS, **WARM}}
    assert json.loads((wiring.tmp / "metrics" / "train.json").read_text()) == {
        "steps": 3, "train_loss": 0.125, "eval_reward_start": None, "eval_reward_last": None}
    (sft_dir / "sft_stats.json").unlink()  # an SFT folder from before the stats were saved
    assert train(params, progress=False)["sft"] == {}


def test_train_without_sft_starts_from_the_base_model(wiring):
    from biocheck.pipeline import train_stage as train

    params = wiring.params(sft=False)
    params["train"]["metrics_path"] = None
    stats = train(params, progress=False, max_steps=3)
    assert wiring.trainers[-1]["cfg"].max_steps == 3  # keyword overrides reach the train config
    base = wiring.tmp / "base"
    assert wiring.sft == [] and wiring.demos == [] and wiring.corpus_dirs == []
    assert wiring.loads == [("tokenizer", base), ("model", base)]
    assert wiring.runs[0][1]["start"] == str(base) and not (wiring.tmp / "sft").exists()
    assert stats["sft"] == {} and wiring.metrics == [{}]
    assert not (wiring.tmp / "metrics").exists()  # metrics_path null: no metrics file


def test_both_variants_start_from_one_warm_start_trained_once(wiring):
    from biocheck.pipeline import sft_stage, train_stage

    params = wiring.params()
    sft_dir = wiring.tmp / "sft"
    stats = sft_stage(params, progress=False)
    assert stats == {"enabled": True, "out_dir": str(sft_dir), **wiring.SFT_STATS, **WARM} and len(wiring.sft) == 1
    assert (sft_dir / "sft_key.json").is_file()
    for variant in ("eg_grpo", "outcome_only"):
        train_stage(params, progress=False, variant=variant)
    assert len(wiring.sft) == 1  # neither run trained it again
    assert [(t["model"].path, t["cfg"].out_dir) for t in wiring.trainers] == [
        (sft_dir, wiring.tmp / "ckpt"), (sft_dir, wiring.tmp / "ckpt_outcome_only")]
    # the reward is not among its inputs; the warm start's own settings are
    params["reward"]["beta2"] = 0.25
    sft_stage(params, progress=False)
    assert len(wiring.sft) == 1
    params["train"]["sft"]["epochs"] = 2
    train_stage(params, progress=False)
    assert len(wiring.sft) == 2 and wiring.sft[-1][3].epochs == 2  # other inputs: trained again, in place
    assert wiring.trainers[-1]["model"].path == sft_dir


def test_the_warm_start_of_other_inputs_or_half_a_folder_is_not_reused(wiring, monkeypatch):
    import biocheck.train.demos as demos_mod
    from biocheck.pipeline import sft_stage

    params = wiring.params()
    sft_stage(params, progress=False)
    params["train"]["seed"] = 8
    sft_stage(params, progress=False)
    assert [seed for *_, seed, _ in wiring.sft] == [7, 8]
    (wiring.tmp / "sft" / "config.json").unlink()  # no weights: not a model, whatever its key says
    sft_stage(params, progress=False)
    assert len(wiring.sft) == 3
    sft_stage(params, progress=False)
    assert len(wiring.sft) == 3  # same inputs: reused
    monkeypatch.setattr(demos_mod, "DEMO_FORMAT", demos_mod.DEMO_FORMAT + 1)  # demonstrations of a new format
    sft_stage(params, progress=False)
    assert len(wiring.sft) == 4


@pytest.mark.parametrize("stage", ["sft", "train"])
def test_a_damaged_base_model_is_one_error_naming_the_file_before_any_work(wiring, stage):
    from biocheck import pipeline

    weights = wiring.tmp / "base" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-3])  # cut short
    with pytest.raises(InputError) as err:
        getattr(pipeline, f"{stage}_stage")(wiring.params(), progress=False)
    assert str(weights) in str(err.value) and "damaged or incomplete" in str(err.value)
    assert wiring.loads == [] and wiring.sft == [] and wiring.trainers == []
    assert not (wiring.tmp / "ckpt").exists()


@pytest.mark.parametrize("damage, file", [
    ("{\"global_step\": 2, \"log_history\": [", "trainer_state.json"),  # cut short
    ("[1, 2]", "trainer_state.json"),  # JSON, but not a trainer state
    ("{\"global_step\": 2, \"log_history\": [], \"surprise\": 1}", "trainer_state.json"),  # a key the Trainer rejects
    ("cut", "model.safetensors"),
    ("cut", "optimizer.pt"),
])
def test_resuming_from_a_damaged_checkpoint_is_one_error_naming_the_file(wiring, damage, file):
    import torch

    from biocheck.pipeline import train_stage as train

    params = wiring.params(sft=False)
    train(params, progress=False)
    ckpt = wiring.tmp / "ckpt" / "checkpoint-2"
    _checkpoint_dirs(ckpt.parent, [2])
    torch.save({"state": {}}, ckpt / "optimizer.pt")
    target = ckpt / file
    if damage == "cut":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    else:
        target.write_text(damage)
    before = len(wiring.trainers)
    with pytest.raises(InputError) as err:
        train(params, progress=False)
    assert str(target) in str(err.value) and "\n" not in str(err.value)
    assert f"delete {ckpt} to resume from the checkpoint before it" in str(err.value)
    assert len(wiring.trainers) == before  # no trainer was built, nothing trained


def test_sft_disabled_records_it_and_trains_nothing(wiring):
    from biocheck.pipeline import sft_stage

    params = wiring.params(sft=False)
    assert sft_stage(params, progress=False) == {"enabled": False, "out_dir": str(wiring.tmp / "sft")}
    assert json.loads((wiring.tmp / "sft" / "sft_stats.json").read_text()) == {"enabled": False}
    assert wiring.sft == [] and wiring.loads == []


# --- the real loop: tiny model, a few steps, killed and resumed -----------------------------------

@pytest.fixture(scope="module")
def _prepared(tmp_path_factory) -> Path:
    """Raw data, prepared data and its index + store, built once for this module's projects (each test copies them)."""
    from biocheck.data.prepare import PrepareConfig, prepare
    from biocheck.evidence.build import EvidenceConfig, build_evidence

    root = tmp_path_factory.mktemp("train-project")
    raw = write_raw(root / "raw")
    prepare(PrepareConfig(raw_dir=raw, out_dir=root / "prepared", metrics_path=None, subset={"val": 4}))
    build_evidence(EvidenceConfig(corpus=root / "prepared" / "corpus.jsonl", index_dir=root / "index",
                                  store=root / "ev.sqlite", metrics_path=None, progress=False))
    return root


@pytest.fixture
def project(tmp_path, _prepared, tiny_model):
    """A project folder with prepared data, index and the tiny model, and params for a short run."""
    shutil.copytree(_prepared, tmp_path, dirs_exist_ok=True)
    prepared = tmp_path / "prepared"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["evidence"].update(index_dir=str(tmp_path / "index"), store=str(tmp_path / "ev.sqlite"))
    params["model"]["out_dir"] = str(tiny_model)
    params["reward"].update(judge=f"transformers:{tiny_model}", judge_cache=str(tmp_path / "judge.sqlite"))
    # metrics_path in the project: a test that trains in this process must never write the repo's metrics/
    params["train"].update(out_dir=str(tmp_path / "ckpt"), metrics_path=str(tmp_path / "metrics" / "train.json"),
                           max_steps=4, save_steps=1, eval_steps=1, num_generations=2, per_device_train_batch_size=2, num_generations_eval=2,
                           per_device_eval_batch_size=4,  # 2 validation claims x 2 per batch
                           max_completion_length=256, sft={"enabled": True, "epochs": 1})
    params["agent"].update(max_searches=1, max_new_tokens=64)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    return tmp_path


RUN = """
import sys, time
from biocheck.pipeline import train_stage
import transformers

class Slow(transformers.TrainerCallback):  # lets the test kill the run between checkpoints
    def on_save(self, args, state, control, **kw):
        time.sleep(float(sys.argv[2]))

import biocheck.train.grpo as g
orig = g.make_trainer
g.make_trainer = lambda *a, **k: orig(*a, **{**k, "callbacks": (k.get("callbacks") or []) + [Slow()]})
print("STATS", train_stage(sys.argv[1], progress=False), flush=True)
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


@pytest.mark.slow
def test_a_kl_term_loads_a_reference_model_and_logs_the_kl(project):
    """beta > 0 (the paper profile): TRL keeps a frozen reference model and the loss carries beta * KL; the
    KL it logs starts at 0 (policy == reference) and is a finite number at every step."""
    from biocheck.pipeline import train_stage

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"].update(beta=0.04, loss_type="grpo", max_steps=2, save_steps=2, eval_steps=2,
                           eval_on_start=False, sft={"enabled": False})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIOCHECK_TRACKING", "off")
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        train_stage(params, progress=False)
    state = json.loads((project / "ckpt" / "checkpoint-2" / "trainer_state.json").read_text())
    kl = [row["kl"] for row in state["log_history"] if "kl" in row]
    assert len(kl) == 2 and all(math.isfinite(v) and v >= 0 for v in kl), state["log_history"]
    assert kl[0] == pytest.approx(0.0, abs=1e-6)  # first step: the policy is still the reference
    # every step logs its groups' statistics (reward_funcs.group_stats), validation too
    steps = [row for row in state["log_history"] if "loss" in row]
    assert all({"groups/n", "groups/evidence/varying", "groups/evidence/std", "groups/total/mean"} <= set(row)
               for row in steps), steps
    assert any("eval_groups/evidence/varying" in row for row in state["log_history"])


def _train_rows(project: Path, name: str, steps: int, **train) -> list[dict]:
    """Train `steps` steps from the tiny model (no SFT, one validation at the end) into project/name; the
    logged rows of the training steps."""
    from biocheck.pipeline import train_stage

    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"].update(out_dir=str(project / name), max_steps=steps, save_steps=steps, eval_steps=steps,
                           eval_on_start=False, sft={"enabled": False}, **train)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIOCHECK_TRACKING", "off")
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        train_stage(params, progress=False)
    state = json.loads((project / name / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    return [row for row in state["log_history"] if "loss" in row]


def _length_outcome(real):
    """RewardBank._component with the outcome term replaced by the episode's length, mod 5: the tiny model earns
    no reward, and equal rewards give no gradient; this one varies within a group."""

    def component(self, name):
        if name != "outcome":
            return real(self, name)

        def outcome(completions, **_):
            return [len(str(c)) % 5 / 4 for c in completions]

        outcome.__name__ = name
        return outcome

    return component


@pytest.mark.slow
def test_one_episode_per_backward_pass_without_checkpointing_is_the_same_step(project, monkeypatch):
    """Issue 32's memory setting (the smol profile): the loss's forward/backward one episode at a time
    (per_device_train_batch_size 1 x gradient_accumulation_steps = the group) and no activation checkpointing.
    The same seed generates the same episodes (one generation batch either way), so every reward is identical,
    and the update is the same one: the same gradient norm and loss up to float rounding. (The tiny model earns
    no reward, and equal rewards give no gradient: the outcome term here is the episode's length, mod 5.)"""
    import biocheck.train.reward_funcs as rf

    monkeypatch.setattr(rf.RewardBank, "_component", _length_outcome(rf.RewardBank._component))

    def run(name: str, **train) -> dict:
        return _train_rows(project, name, 1, **train)[0]

    batched = run("batched", per_device_train_batch_size=2, gradient_accumulation_steps=1,
                  gradient_checkpointing=True)
    single = run("single", per_device_train_batch_size=1, gradient_accumulation_steps=2,
                 gradient_checkpointing=False)
    rewards = sorted(k for k in batched if k.startswith("rewards/") or k in ("reward", "reward_std"))
    assert "reward" in rewards and any(k.startswith("rewards/") for k in rewards), batched
    assert batched["reward_std"] > 0 and batched["grad_norm"] > 0, batched  # a real update, not a zero one
    assert {k: single[k] for k in rewards} == {k: batched[k] for k in rewards}
    assert single["completions/mean_length"] == batched["completions/mean_length"]
    assert single["grad_norm"] == pytest.approx(batched["grad_norm"], rel=1e-3, abs=1e-6)
    assert single["loss"] == pytest.approx(batched["loss"], rel=1e-3, abs=1e-6)


@pytest.mark.slow
def test_the_shared_prompt_in_rollouts_and_loss_is_the_same_training(project, monkeypatch):
    """Issue 32: rollouts that start from the rows' shared prompt (train.prompt_cache, train/prompt_cache.py) and a
    loss that runs a group's shared prompt once a step (train.share_prompt, train/prefix.py) train as TRL's own
    paths do, on the smol profile's path (a generation copy, a static cache; one episode per backward pass): the
    same episodes (rewards and lengths over two steps), the same loss and gradient norm up to float rounding;
    and both were used: the prompt computed for both steps' rollouts and the validation, and carried into the
    weights once before each optimizer step. (Each mechanism is checked exactly, token by token and weight by
    weight, in tests/train/test_prompt_cache.py and tests/train/test_prefix.py.)"""
    import biocheck.train.reward_funcs as rf
    from biocheck.train.prefix import SharedPrefixMixin
    from biocheck.train.prompt_cache import PromptCache

    monkeypatch.setattr(rf.RewardBank, "_component", _length_outcome(rf.RewardBank._component))
    planned, flushed = [], []
    real_prefix, real_flush = PromptCache.prefix, SharedPrefixMixin.flush_prefixes
    monkeypatch.setattr(PromptCache, "prefix", lambda self, model, version, tokens:
                        (planned.append((version[0], tokens.size(1))), real_prefix(self, model, version, tokens))[1])
    monkeypatch.setattr(SharedPrefixMixin, "flush_prefixes",
                        lambda self: (flushed.append(len(self._prefixes or {})), real_flush(self))[1])
    setting = {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
               "generation_dtype": "float32", "cache_implementation": "static"}
    scratch = _train_rows(project, "scratch", 2, prompt_cache=False, share_prompt=False, **setting)
    assert planned == [] and flushed == []
    shared = _train_rows(project, "shared", 2, prompt_cache=True, share_prompt=True, **setting)
    assert {step for step, _ in planned} == {0, 1, 2} and min(n for _, n in planned) >= 16, planned
    assert flushed == [1, 1]  # one prompt per step
    keys = sorted(k for k in scratch[0] if k.startswith("rewards/") or k in ("reward", "completions/mean_length"))
    for mine, theirs in zip(scratch, shared, strict=True):
        assert mine["reward_std"] > 0 and mine["grad_norm"] > 0, mine  # a real update, not a zero one
        assert {k: theirs[k] for k in keys} == {k: mine[k] for k in keys}
        assert theirs["loss"] == pytest.approx(mine["loss"], rel=1e-4, abs=1e-7)
        assert theirs["grad_norm"] == pytest.approx(mine["grad_norm"], rel=1e-4, abs=1e-7)


@pytest.mark.slow
def test_rollouts_draw_with_the_cdf_sampler_where_it_is_on(project, monkeypatch):
    """train.cdf_sampling (train/sampling.py): every rollout token, in training and validation, is drawn by
    InverseCDFSampler and none by torch.multinomial; off, transformers' own sampling draws them all."""
    import torch

    from biocheck.train.sampling import InverseCDFSampler

    draws, multinomial = [], []
    real_call, real_multinomial = InverseCDFSampler.__call__, torch.multinomial
    monkeypatch.setattr(InverseCDFSampler, "__call__",
                        lambda self, ids, scores: (draws.append(scores.size(0)), real_call(self, ids, scores))[1])
    monkeypatch.setattr(torch, "multinomial", lambda *a, **k: (multinomial.append(1), real_multinomial(*a, **k))[1])
    on = _train_rows(project, "cdf", 1, cdf_sampling=True)
    assert draws and not multinomial and on[0]["completions/mean_length"] > 0
    draws.clear()
    _train_rows(project, "multinomial", 1, cdf_sampling=False)
    assert multinomial and not draws


def test_sft_refuses_a_wrong_out_dir_before_training(wiring):
    from biocheck.io import InputError
    from biocheck.pipeline import sft_stage

    params = wiring.params()
    store = wiring.tmp / "evidence"
    store.mkdir()
    (store / "evidence.sqlite").write_bytes(b"SQLite format 3\x00")
    params["train"]["sft"]["out_dir"] = str(store)
    with pytest.raises(InputError, match=r"train\.sft\.out_dir .*evidence: holds files that it did not write"):
        sft_stage(params, progress=False)
    assert wiring.sft == [] and wiring.loads == []  # nothing loaded, nothing trained
    assert sorted(p.name for p in store.iterdir()) == ["evidence.sqlite"]


@pytest.mark.parametrize("marker", [b"{not json", b"[]", b"\xff"])
def test_a_damaged_sft_key_trains_the_warm_start_again_not_a_traceback(wiring, marker):
    from biocheck.pipeline import sft_stage

    params = wiring.params()
    sft_stage(params, progress=False)
    (wiring.tmp / "sft" / "sft_key.json").write_bytes(marker)
    sft_stage(params, progress=False)
    assert len(wiring.sft) == 2


def test_a_finished_run_is_not_trained_past_max_steps(wiring):
    """DVC reruns a train stage when its code changes; the run key is the same, so it resumes. From the last
    checkpoint the Trainer would train one step more than max_steps (seen: checkpoint-41 of a 40-step run,
    other metrics). A finished run is reported from its checkpoint instead, nothing trained."""
    from biocheck.pipeline import train_stage as train

    params = wiring.params()
    train(params, progress=False, max_steps=2)
    out = wiring.tmp / "ckpt"
    _checkpoint_dirs(out, [2])
    history = [{"step": 1, "loss": 0.5}, {"step": 2, "loss": 0.25}, {"step": 2, "eval_reward": 0.75}]
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    trained = len(wiring.trainers)
    stats = train(params, progress=False, max_steps=2)
    assert len(wiring.trainers) == trained  # no trainer made, no step trained
    assert stats["steps"] == 2 and stats["train_loss"] == pytest.approx(0.375)
    assert stats["eval_reward_last"] == 0.75 and stats["resumed_from"] == str(out / "checkpoint-2")
    assert json.loads((wiring.tmp / "metrics" / "train.json").read_text())["train_loss"] == pytest.approx(0.375)
    stats = train(params, progress=False, max_steps=3)  # more steps are another run (max_steps is in its key)
    assert len(wiring.trainers) == trained + 1 and stats["resumed_from"] is None


@pytest.mark.slow
def test_rollouts_from_a_generation_copy_are_the_policys_own(project, monkeypatch):
    """train.generation_dtype (issue 32): rollouts come from a copy of the policy, refreshed after each optimizer
    step. In the policy's own dtype (float32) the copy is numerically the policy, so two steps give the same
    rewards, lengths and update as generating with the policy; a static KV cache as well. The copy is used
    at every generation and holds the policy's current weights then; the policy is put back after each."""
    from transformers.generation.utils import GenerationMixin

    import biocheck.train.grpo as grpo
    import biocheck.train.reward_funcs as rf

    seen: list[tuple[int, bool, float]] = []
    generated_by: list = []  # the model each generate ran on
    real, real_generate = grpo.GenerationCopyMixin._generate_single_turn, GenerationMixin.generate

    def generate(model, *args, **kwargs):
        generated_by.append(model)
        return real_generate(model, *args, **kwargs)

    def spy(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        copy = getattr(self, "_gen_copy", None)
        if copy is not None:
            policy = self.accelerator.unwrap_model(self.model_wrapped)
            weights = policy.state_dict()
            drift = max((t.float() - weights[n].float()).abs().max().item() for n, t in copy.state_dict().items())
            seen.append((self.state.global_step, policy is not copy and generated_by[-1] is copy, drift))
        return out

    monkeypatch.setattr(GenerationMixin, "generate", generate)
    monkeypatch.setattr(grpo.GenerationCopyMixin, "_generate_single_turn", spy)
    monkeypatch.setattr(rf.RewardBank, "_component", _length_outcome(rf.RewardBank._component))

    def run(name: str, **train) -> list[dict]:
        return _train_rows(project, name, 2, **train)

    policy = run("policy")
    assert seen == []  # generation_dtype null: no copy
    copied = run("copy", generation_dtype="float32")
    assert {step for step, _, _ in seen} == {0, 1, 2}  # both steps' rollouts and the validation's
    assert all(used_and_restored and drift == 0.0 for _, used_and_restored, drift in seen), seen
    static = run("static", generation_dtype="float32", cache_implementation="static")
    assert len(policy) == len(copied) == len(static) == 2
    keys = sorted(k for k in policy[0] if k.startswith("rewards/") or k in ("reward", "completions/mean_length"))
    for other in (copied, static):
        for mine, theirs in zip(policy, other, strict=True):
            assert {k: theirs[k] for k in keys} == {k: mine[k] for k in keys}
            assert theirs["loss"] == pytest.approx(mine["loss"], rel=1e-5, abs=1e-7)
            assert theirs["grad_norm"] == pytest.approx(mine["grad_norm"], rel=1e-5, abs=1e-7)
    assert all(row["grad_norm"] > 0 for row in policy), policy  # real updates: step 2 samples updated weights


def test_a_generation_copy_needs_full_fine_tuning_and_no_vllm():
    from biocheck.train.grpo import TrainConfig

    with pytest.raises(ValueError, match=r"train\.generation_dtype needs full fine-tuning"):
        TrainConfig(generation_dtype="bfloat16", lora={"r": 8})
    with pytest.raises(ValueError, match=r"train\.generation_dtype is for generation by transformers"):
        TrainConfig(generation_dtype="bfloat16", use_vllm=True)
