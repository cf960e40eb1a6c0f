"""Training's console output: one bar (a terminal) or one short line every few steps, never the metrics dict.

The callback is driven with transformers' own TrainerState/TrainerControl in the order the Trainer calls it
(on_step_end, then the step's logs and evaluation, then the next on_step_begin); no real training.
"""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

import pytest
from transformers import PrinterCallback, ProgressCallback, TrainerControl, TrainerState

from biocheck.train.callbacks import Progress, TrainProgress

LOGGER = "biocheck.train.callbacks"


def big_log(step: int, eval_: bool = False) -> dict[str, float]:
    """A GRPO-sized log dict: 60 keys, the key numbers among them."""
    logs = {f"rewards/component_{i}/mean": 0.123456 * i for i in range(52)}
    logs.update({"reward": 0.3 + step / 100, "loss": 0.0213, "rewards/searches/mean": 1.4, "grad_norm": 3.5,
                 "learning_rate": 1e-4, "completions/mean_length": 412.0, "entropy": 2.25, "epoch": step / 40})
    assert len(logs) == 60
    return {f"eval_{k}": v for k, v in logs.items()} if eval_ else logs


class Clock:
    """Each call is 2 seconds after the last: a step (start -> advance) takes 2 s."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 2.0
        return self.t


def run(cb: TrainProgress, max_steps: int, start: int = 0, eval_steps: int = 0, eval_on_start: bool = False) -> None:
    """Call `cb` as Trainer._inner_training_loop does, with a 60-key log every step."""
    args, control = SimpleNamespace(), TrainerControl()
    state = TrainerState(max_steps=max_steps, global_step=start)
    cb.on_train_begin(args, state, control)
    if eval_on_start:
        cb.on_log(args, state, control, logs=big_log(0, eval_=True))
    for step in range(start + 1, max_steps + 1):
        cb.on_step_begin(args, state, control)
        state.global_step = step
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs=big_log(step))
        if eval_steps and step % eval_steps == 0:
            cb.on_log(args, state, control, logs=big_log(step, eval_=True))
    cb.on_log(args, state, control, logs={"train_runtime": 9.0, "train_loss": 0.5, "total_flos": 1.0})
    cb.on_train_end(args, state, control)


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_60_key_log_becomes_one_short_line_with_the_key_numbers(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    run(TrainProgress(bar=False, every=10, clock=Clock()), max_steps=10, eval_steps=10)
    [line] = lines(caplog)
    assert line == "train step 10/10  reward 0.4  eval_reward 0.4  loss 0.0213  searches 1.4  2.0 s/step"
    assert len(line) < 120 and "grad_norm" not in line and "{" not in line


def test_off_a_terminal_a_line_every_n_steps_only(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    run(TrainProgress(bar=False, every=3, clock=Clock()), max_steps=10, eval_steps=5, eval_on_start=True)
    got = lines(caplog)
    # step 0: the validation reward before training; then every 3rd step and the last one
    assert [line.split()[2] for line in got] == ["0/10", "3/10", "6/10", "9/10", "10/10"]
    assert got[0] == "train step 0/10  eval_reward 0.3"  # no step timed yet: no s/step
    # each line carries the numbers of its own step, logged after on_step_end (eval_reward: step 5's)
    assert got[2].startswith("train step 6/10  reward 0.36  eval_reward 0.35  loss 0.0213")


def test_resumed_lines_count_from_the_checkpoint_step(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    run(TrainProgress(bar=False, every=5, clock=Clock()), max_steps=20, start=10)
    assert [line.split()[2] for line in lines(caplog)] == ["15/20", "20/20"]


def test_on_a_terminal_the_bar_advances_to_max_steps_and_no_dict_is_printed(caplog, capsys):
    from transformers.utils import logging as hf_logging

    caplog.set_level(logging.INFO, logger=LOGGER)
    stream = io.StringIO()
    cb = TrainProgress(bar=True, every=1, stream=stream)
    args, control, state = SimpleNamespace(), TrainerControl(), TrainerState(max_steps=8, global_step=2)
    hf_logging.enable_progress_bar()
    cb.on_train_begin(args, state, control)
    assert not hf_logging.is_progress_bar_enabled()  # no "Writing model shards" bar at each checkpoint
    bar = cb.progress._bar
    for step in range(3, 9):
        cb.on_step_begin(args, state, control)
        state.global_step = step
        cb.on_step_end(args, state, control)
        cb.on_log(args, state, control, logs=big_log(step))
        assert bar.n == step  # resumed at step 2: the bar starts there
    cb.on_train_end(args, state, control)
    assert hf_logging.is_progress_bar_enabled()  # given back after training
    out = stream.getvalue()
    assert "8/8" in out and "reward 0.38" in out and "searches 1.4" in out
    assert "grad_norm" not in out and "{" not in out
    assert max(len(frame) for frame in out.replace("\r", "\n").splitlines()) < 200
    assert lines(caplog) == [] and capsys.readouterr() == ("", "")  # the bar only: nothing on stdout or in logs


def test_the_trainer_built_by_make_trainer_prints_through_trainprogress_only(tiny_model, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biocheck.agent.prompts import Prompts
    from biocheck.rewards.components import RewardConfig
    from biocheck.train.env import env_factory
    from biocheck.train.grpo import TrainConfig, make_trainer
    from biocheck.train.reward_funcs import RewardBank

    class NoSearch:
        def run(self, query):
            raise AssertionError("building a trainer runs no search")

    prompts = Prompts(max_searches=1)
    ds = Dataset.from_list([{"prompt": prompts.messages("c"), "claim": "c", "label": "SUPPORTED"}] * 2)
    cfg = TrainConfig(out_dir=tmp_path, num_generations=2, per_device_train_batch_size=2, num_generations_eval=2,
                      max_steps=40, save_steps=10, eval_steps=10, logging_steps=1)
    trainer = make_trainer(AutoModelForCausalLM.from_pretrained(tiny_model), AutoTokenizer.from_pretrained(tiny_model),
                           cfg, ds, ds, env_factory(NoSearch(), prompts, 1), RewardBank(RewardConfig()), 2, [],
                           progress=False)
    kinds = [type(c) for c in trainer.callback_handler.callbacks]
    assert PrinterCallback not in kinds and ProgressCallback not in kinds
    [mine] = [c for c in trainer.callback_handler.callbacks if isinstance(c, TrainProgress)]
    assert (mine.bar, mine.every) == (False, 4)  # 40 steps: a line every 4


@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_console_mixin_replaces_either_printing_callback(tmp_path, disable_tqdm):
    import torch
    from transformers import Trainer, TrainingArguments

    from biocheck.train.grpo import ConsoleMixin

    mine = TrainProgress(bar=False)

    class Quiet(ConsoleMixin, Trainer):
        console = mine

    args = TrainingArguments(output_dir=str(tmp_path), disable_tqdm=disable_tqdm, report_to=[], use_cpu=True)
    callbacks = Quiet(model=torch.nn.Linear(1, 1), args=args).callback_handler.callbacks
    assert mine in callbacks and not any(isinstance(c, (PrinterCallback, ProgressCallback)) for c in callbacks)


# --- the SFT warm start --------------------------------------------------------------------------


class CharTokenizer:
    """A chat template in miniature: each message is [role id] + its characters; the generation prompt is
    the assistant's role id, so renders are prefix-preserving as train_sft requires."""

    ROLES = {"system": 1, "user": 2, "assistant": 3, "tool": 4}

    def apply_chat_template(self, messages, tools=None, add_generation_prompt=False, tokenize=True,
                            return_dict=False):
        ids = [t for m in messages for t in [self.ROLES[m["role"]], *(5 + ord(c) % 50 for c in m["content"])]]
        return ids + [self.ROLES["assistant"]] * add_generation_prompt


class TinyLM:
    """Enough of a causal LM for train_sft: parameters, train/eval, and a loss."""

    def __new__(cls):
        import torch

        class LM(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb, self.out = torch.nn.Embedding(64, 8), torch.nn.Linear(8, 64)

            def forward(self, input_ids, labels):
                logits = self.out(self.emb(input_ids))
                loss = torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100)
                return SimpleNamespace(loss=loss)

        return LM()


CONVS = [[{"role": "user", "content": f"claim {i}"}, {"role": "assistant", "content": "SUPPORTED"}] for i in range(5)]


def test_sft_off_a_terminal_logs_about_ten_short_lines(caplog, capsys):
    from biocheck.train.sft import SFTConfig, train_sft

    caplog.set_level(logging.INFO, logger=LOGGER)
    stats = train_sft(TinyLM(), CharTokenizer(), CONVS, SFTConfig(epochs=4), tools=[], progress=False)
    got = lines(caplog)
    assert stats["steps"] == 20
    assert [line.split()[2] for line in got] == [f"{s}/20" for s in range(2, 21, 2)]  # every 20 // 10 steps
    assert all(line.startswith("sft step ") and " loss " in line and line.endswith(" s/step") for line in got)
    assert got[-1].startswith("sft step 20/20  epoch 4  loss ") and max(map(len, got)) < 80
    assert capsys.readouterr() == ("", "")


def test_sft_on_a_terminal_shows_one_bar_to_the_end(monkeypatch):
    import biocheck.train.callbacks as callbacks
    from biocheck.train.sft import SFTConfig, train_sft

    stream, real_tqdm = io.StringIO(), callbacks.tqdm
    monkeypatch.setattr(callbacks, "tqdm", lambda **kw: real_tqdm(**{**kw, "file": stream}))
    train_sft(TinyLM(), CharTokenizer(), CONVS, SFTConfig(epochs=2), tools=[], progress=True)
    out = stream.getvalue()
    assert "sft" in out and "10/10" in out and "epoch 2" in out and " loss " in out


def test_progress_ignores_non_numbers_and_unknown_keys():
    p = Progress("x", 4, bar=False, keys=("a", "b"))
    p.note(a="text", b=None, c=1.0)
    assert p.line() == "x step 0/4"
    p.note(b=2, a=0.5)
    assert p.line() == "x step 0/4  a 0.5  b 2"  # the keys' order, not the order they arrived in
