"""Trainer callbacks: one short progress display, and sample episodes to MLflow (TRL only sends
completion tables to wandb/trackio)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm
from transformers import TrainerCallback

log = logging.getLogger(__name__)

# The numbers a person watches during GRPO: (shown as, the Trainer's log key). Everything else
# (60-odd keys per step) goes to MLflow only.
KEY_NUMBERS = (("reward", "reward"), ("eval_reward", "eval_reward"), ("loss", "loss"),
               ("searches", "rewards/searches/mean"))


class Progress:
    """A loop's progress: a bar on a terminal, else (logs, CI, `--no-progress`) one short log line
    every `every` steps, e.g. `train step 10/40  reward 0.31  loss 0.02  12.3 s/step`.

    Seconds per step count only the time between `start()` and `advance()`, so an evaluation or a
    checkpoint save between steps does not inflate it.
    """

    def __init__(self, name: str, total: int, bar: bool, keys: tuple[str, ...], every: int = 1, initial: int = 0,
                 stream=None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.name, self.total, self.every, self.step = name, total, max(1, every), initial
        self.numbers: dict[str, float | None] = dict.fromkeys(keys)  # shown in this order, once known
        self._clock, self._began, self._busy, self._timed = clock, None, 0.0, 0
        self._bar = tqdm(total=total, initial=initial, desc=name, file=stream, dynamic_ncols=True) if bar else None

    def start(self) -> None:
        self._began = self._clock()

    def advance(self, step: int) -> None:
        if self._began is not None:
            self._busy += self._clock() - self._began
            self._timed += 1
            self._began = None
        if self._bar is not None:
            self._bar.update(step - self.step)
        self.step = step

    def note(self, **numbers: Any) -> None:
        """Remember the latest value of some of `keys` (others, and non-numbers, are ignored)."""
        self.numbers.update({k: float(v) for k, v in numbers.items()
                             if k in self.numbers and isinstance(v, (int, float))})
        if self._bar is not None:
            self._bar.set_postfix_str(self.text(rate=False))

    def due(self) -> bool:
        """Whether a line is owed for the current step (line mode only; the bar shows every step)."""
        return self._bar is None and (self.step % self.every == 0 or self.step == self.total)

    def text(self, rate: bool = True) -> str:
        parts = [f"{k} {v:.3g}" for k, v in self.numbers.items() if v is not None]
        if rate and self._timed:
            parts.append(f"{self._busy / self._timed:.1f} s/step")
        return "  ".join(parts)

    def line(self) -> str:
        return f"{self.name} step {self.step}/{self.total}  {self.text()}".rstrip()

    def emit(self) -> None:
        log.info("%s", self.line())

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class TrainProgress(TrainerCallback):
    """GRPO's console output: a Progress over the optimizer steps with the KEY_NUMBERS.

    Replaces transformers' ProgressCallback / PrinterCallback, which print the whole metrics dict at
    every logging step (see grpo.ConsoleMixin); MLflowCallback still logs every key.
    """

    def __init__(self, bar: bool = True, every: int = 1, stream=None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.bar, self.every, self.stream, self.clock = bar, every, stream, clock
        self.progress: Progress | None = None
        self._owed = False  # a line for the last step, written once its train/eval logs are in
        self._hf_bars = False

    def on_train_begin(self, args, state, control, **kwargs):
        from transformers.utils import logging as hf_logging

        # transformers' own bars (e.g. "Writing model shards" at every checkpoint) would break the one bar
        self._hf_bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()
        if state.is_world_process_zero:  # global_step > 0 when resuming: the bar starts there
            self.progress = Progress("train", state.max_steps, self.bar, tuple(shown for shown, _ in KEY_NUMBERS),
                                     self.every, initial=state.global_step, stream=self.stream, clock=self.clock)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.progress is not None:
            self._flush()
            self.progress.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.advance(state.global_step)
            # The Trainer logs and evaluates this step only after on_step_end: the line waits for them.
            self._owed = self._owed or self.progress.due()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is None or not logs:
            return
        self.progress.note(**{shown: logs.get(key) for shown, key in KEY_NUMBERS})
        if state.global_step == 0:  # the validation reward before any step (eval_on_start)
            self._owed = self._owed or self.progress.due()

    def on_train_end(self, args, state, control, **kwargs):
        from transformers.utils import logging as hf_logging

        if self.progress is not None:
            self._flush()
            self.progress.close()
            self.progress = None
        if self._hf_bars:
            hf_logging.enable_progress_bar()

    def _flush(self) -> None:
        if self._owed:
            self.progress.emit()
            self._owed = False


class SampleEpisodes(TrainerCallback):
    """Every `every` steps, log a few of the last batch's rollouts (messages + reward breakdown)."""

    def __init__(self, bank, n: int = 4, every: int = 5) -> None:
        self.bank, self.n, self.every = bank, n, every

    def on_step_end(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or self.n <= 0 or state.global_step % self.every:
            return
        try:
            import mlflow

            if mlflow.active_run() is None or not self.bank.last_batch:
                return
            from biocheck import tracking

            tracking.log_text(json.dumps(self.bank.last_batch[: self.n], indent=2, default=str),
                              f"samples/step_{state.global_step:05d}.json")  # secrets blanked
        except Exception as e:  # logging must never stop training
            log.warning("could not log sample episodes: %s", e)


def _mlflow_callback_class():
    from transformers.integrations import MLflowCallback

    return MLflowCallback


class TrainMetrics:
    """What a GRPO run logs to MLflow besides TRL's own keys, and what it leaves out (TrainLog uses it).

    `eval_reward` / `reward` is each variant's own formula (outcome-only: R_outcome alone), so those curves do
    not compare across variants. Both variants compute and log every component (`rewards/<name>/mean`,
    `eval_rewards/<name>/mean`; outcome-only with weight 0), and TrainLog adds the EG-GRPO formula over them
    for both: `reward_eg_grpo` and `eval_reward_eg_grpo` (the mean of a weighted sum is the weighted sum of
    the means). The clip ratios (`clip_ratio/*`) are left out while `num_iterations` is 1: one optimiser step
    per batch keeps the importance ratio at exactly 1, so they are 0 by construction."""

    def __init__(self, weights: dict[str, float]) -> None:
        self.weights = dict(weights)  # the EG-GRPO weight of each component (hallucination negative)

    def derived(self, logs: dict[str, Any]) -> dict[str, float]:
        out = {}
        for prefix, name in (("rewards/", "reward_eg_grpo"), ("eval_rewards/", "eval_reward_eg_grpo")):
            parts = [logs.get(f"{prefix}{c}/mean") for c in self.weights]
            if all(isinstance(v, (int, float)) for v in parts):
                out[name] = float(sum(w * v for w, v in zip(self.weights.values(), parts, strict=True)))
        return out

    def keep(self, key: str, num_iterations: int) -> bool:
        return not (num_iterations == 1 and (key.startswith("clip_ratio/") or key.startswith("eval_clip_ratio/")))


def train_log(weights: dict[str, float]):
    """A transformers MLflowCallback for BioCheck's training run (make_trainer adds it when tracking is on).

    Differences from the stock callback, which `report_to=["mlflow"]` would add: it logs into the run
    `tracking.run` opened and never ends it; TrainingArguments and the model config (~280 values) are the
    artifact `trainer_config.json`, not params (the run's params are BioCheck's own train/agent/reward
    config); every step's logs get TrainMetrics' derived keys and lose the always-zero clip ratios. With
    report_to=[] TRL's profiling timers (`profiling/Time taken: ...`) are not sent to MLflow at all."""
    metrics = TrainMetrics(weights)

    class TrainLog(_mlflow_callback_class()):
        def setup(self, args, state, model):
            from biocheck import tracking

            self._log_artifacts, self._async_log, self._auto_end_run = False, False, False
            if state.is_world_process_zero and self._ml_flow.active_run() is not None:
                config = getattr(model, "config", None)
                tracking.log_text(json.dumps({"training_arguments": args.to_dict(),
                                              "model_config": config.to_dict() if config is not None else None},
                                             indent=2, default=str), "trainer_config.json")
            self._initialized = True

        def on_log(self, args, state, control, logs, model=None, **kwargs):
            if self._ml_flow.active_run() is None:
                return
            n = getattr(args, "num_iterations", 1)
            logs = {**{k: v for k, v in (logs or {}).items() if metrics.keep(k, n)}, **metrics.derived(logs or {})}
            super().on_log(args, state, control, logs, model=model, **kwargs)

    return TrainLog()
