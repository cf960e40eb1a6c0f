"""Trainer callbacks: sample episodes to MLflow (TRL only sends completion tables to wandb/trackio)."""

from __future__ import annotations

import json
import logging

from transformers import TrainerCallback

log = logging.getLogger(__name__)


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
            mlflow.log_text(json.dumps(self.bank.last_batch[: self.n], indent=2, default=str),
                            f"samples/step_{state.global_step:05d}.json")
        except Exception as e:  # logging must never stop training
            log.warning("could not log sample episodes: %s", e)
