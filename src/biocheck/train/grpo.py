"""EG-GRPO with TRL's GRPOTrainer over the agent's own tool loop.

Choice: TRL's built-in multi-turn tool loop (`environment_factory`, see env.py) rather than a
custom `rollout_func`: TRL then owns generation (transformers or vLLM), token bookkeeping and the
tool mask (tool-result tokens get loss weight 0), and our environment supplies exactly the agent's
tool step (agent/budget.py). tests/test_train_parity.py proves the parity: for a scripted episode, the
text the policy sees in training equals what `biocheck check` renders; tests/test_search_budget.py drives
both adapters with the same calls.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.bounds import Count, NonNegative, Positive
from biocheck.io import write_json_atomic
from biocheck.params import check_nested
from biocheck.train.sft import SFTConfig

log = logging.getLogger(__name__)


@dataclass
class TrainConfig:
    """params.yaml `train:` (GRPOConfig fields by the same names) plus BioCheck's own switches."""

    out_dir: Path = Path("models/checkpoints")
    search_backend: str = "local"  # the paper profile trains on `replay` over the warm evidence store
    num_generations: int = 8
    per_device_train_batch_size: Count = 8
    gradient_accumulation_steps: Count = 1
    learning_rate: Positive = 1e-6
    beta: float = 0.0  # KL coefficient
    epsilon: float = 0.2
    loss_type: str = "dapo"
    max_steps: Count = 70
    save_steps: Count = 10
    eval_steps: Count = 10
    logging_steps: Count = 1
    max_completion_length: Count = 4096
    temperature: float = 1.0
    seed: int = 0
    gradient_checkpointing: bool = False
    bf16: bool = False
    use_vllm: bool = False
    vllm_mode: str = "colocate"
    # vllm_mode "server": the `trl vllm-serve` server on its own GPU (docs/orchestration.md, multi-GPU training)
    vllm_server_base_url: str | None = None
    num_generations_eval: Count | None = None
    # episodes generated together in a validation pass (null: per_device_train_batch_size); a multiple of
    # num_generations_eval. One batch for the whole validation set is the fastest on a CPU.
    per_device_eval_batch_size: Count | None = None
    eval_on_start: bool = True  # the start's validation reward (the learning check compares against it)
    lora: dict[str, Any] | None = None  # e.g. {r: 16, lora_alpha: 32, target_modules: all-linear}
    # SFTConfig fields; {enabled: false} in the paper profile. Its out_dir defaults to `sft` beside out_dir
    # (models/sft): one warm start that every reward variant's run begins from (`biocheck sft`).
    sft: dict[str, Any] = field(default_factory=dict)
    sample_episodes: NonNegative = 4  # rollouts logged to MLflow per logging step
    metrics_path: Path | None = Path("metrics/train.json")  # null: write no metrics file (benchmarks)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.sft = dict(self.sft or {})
        self.sft.setdefault("out_dir", str(self.out_dir.parent / "sft"))
        check_nested(SFTConfig, self.sft, "sft")  # sft.epochs: -1 must fail here, not replace models/sft
        if self.num_generations < 2:  # GRPO's advantage compares completions within a group
            raise ValueError(f"num_generations must be >= 2 (a group to compare), not {self.num_generations!r}")
        if self.save_steps < 1 or self.eval_steps < 1:
            raise ValueError(f"train.save_steps={self.save_steps}, train.eval_steps={self.eval_steps}: "
                             "both must be >= 1")
        if self.save_steps % self.eval_steps:  # eval_steps=20, save_steps=10 would leave checkpoint-10 unscored
            raise ValueError("train.save_steps must be a multiple of train.eval_steps (each checkpoint needs "
                             "a validation reward)")

    GRPO_FIELDS = ("num_generations", "per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
                   "beta", "epsilon", "loss_type", "max_steps", "save_steps", "eval_steps", "logging_steps",
                   "max_completion_length", "temperature", "seed", "gradient_checkpointing", "bf16", "use_vllm",
                   "vllm_mode", "vllm_server_base_url", "num_generations_eval", "eval_on_start")

    def grpo_config(self, output_dir: Path, max_tool_calling_iterations: int, report_to: list[str],
                    turn_tokens: int | None = None):
        """`turn_tokens`: the most tokens one model turn may generate (the agent's `max_new_tokens`, the limit
        the evaluated agent has); None: TRL's own, the whole `max_completion_length` in one turn."""
        import torch
        from trl import GRPOConfig

        kwargs = {k: getattr(self, k) for k in self.GRPO_FIELDS if getattr(self, k) is not None}
        if turn_tokens is not None:  # the episode's total stays capped by max_completion_length (TRL truncates)
            kwargs["generation_kwargs"] = {"max_new_tokens": min(turn_tokens, self.max_completion_length)}
        # transformers renamed it; the new name avoids a FutureWarning on every run (params keep TRL's old name)
        kwargs["activation_checkpointing"] = kwargs.pop("gradient_checkpointing")
        return GRPOConfig(
            output_dir=str(output_dir), eval_strategy="steps", save_strategy="steps",
            per_device_eval_batch_size=self.per_device_eval_batch_size or self.per_device_train_batch_size,
            max_tool_calling_iterations=max_tool_calling_iterations,
            use_cpu=not torch.cuda.is_available(), report_to=report_to, save_only_model=False,
            log_completions=False, remove_unused_columns=False, **kwargs)


class UnknownToolsMixin:
    """Before each tool round, route tool names the env does not have to its SearchBudget (see env.ToolTable)."""

    def _tool_call_loop(self, *args, **kwargs):  # type: ignore[override]
        from biocheck.train.env import SearchEnv, ToolTable

        envs = getattr(self, "environments", None) or []
        tables = getattr(self, "_sync_tool_dicts", None) or []
        self._sync_tool_dicts = [ToolTable(t, e) if isinstance(e, SearchEnv) and not isinstance(t, ToolTable) else t
                                 for t, e in zip(tables, envs, strict=False)] + tables[len(envs):]
        return super()._tool_call_loop(*args, **kwargs)


class TimedMixin:
    """Logs the split of each step between rollout generation (+ scoring) and optimisation."""

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        t0 = time.perf_counter()
        out = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["time/generation_s"].append(time.perf_counter() - t0)
        return out


class NoEvalLossMixin:
    """Validation generates and scores the episodes (every eval_* reward metric, which selection reads) but
    skips TRL's evaluation loss: the GRPO loss of fresh episodes at importance ratio 1 says nothing about
    the policy, and its forward pass over every episode cost ~15% of a validation pass on a CPU."""

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):  # type: ignore[override]
        self._prepare_inputs(inputs)  # rollouts, rewards and their metrics
        return None, None, None  # no loss: the Trainer then logs no eval_loss


class ConsoleMixin:
    """Swaps the console callback the Trainer adds for itself (ProgressCallback, or PrinterCallback when
    tqdm is disabled; both print the whole ~60-key metrics dict at every logging step) for `console`,
    one bar or one short line every few steps. MLflowCallback still receives every key."""

    console: Any = None  # a TrainProgress, set by make_trainer

    def add_callback(self, callback):  # type: ignore[override]
        from transformers import PrinterCallback, ProgressCallback
        from transformers.trainer import DEFAULT_PROGRESS_CALLBACK  # a notebook bar under Jupyter

        cls = callback if isinstance(callback, type) else type(callback)
        if self.console is not None and issubclass(cls, (PrinterCallback, ProgressCallback, DEFAULT_PROGRESS_CALLBACK)):
            callback = self.console
        return super().add_callback(callback)


def progress_every(cfg: TrainConfig) -> int:
    """Steps between two progress lines off a terminal: about ten lines a run, never more than one per log."""
    return max(cfg.logging_steps, cfg.max_steps // 10, 1)


def fingerprint_inputs(payload: dict[str, Any]) -> str:
    """The identity of a training run's inputs (`biocheck.io.json_digest`)."""
    from biocheck.io import json_digest

    return json_digest(payload)


# The Trainer writes trainer_state.json last: a checkpoint folder without it was cut off mid-save.
TRAINER_STATE = "trainer_state.json"


def complete_checkpoints(out_dir: Path) -> list[Path]:
    """The finished `checkpoint-<step>` folders, by step as a number (checkpoint-9 before checkpoint-10)."""
    ckpts = [p for p in Path(out_dir).glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / TRAINER_STATE).is_file()]
    return sorted(ckpts, key=lambda p: int(p.name.split("-")[-1]))


def latest_checkpoint(out_dir: Path) -> Path | None:
    ckpts = complete_checkpoints(out_dir)
    return ckpts[-1] if ckpts else None


def previous_dir(out_dir: Path) -> Path:
    """Where `prepare_out_dir` moves the checkpoints of a run that another run replaces: beside the output,
    not inside it (DVC hashes and caches what is inside), e.g. models/.previous/checkpoints/<old key>/."""
    return out_dir.parent / ".previous" / out_dir.name


def recorded_key(marker: Path) -> str | None:
    """The run key a checkpoint folder records; None when there is none or it is unreadable (a damaged marker
    is treated like a foreign run: its checkpoints are moved aside, never resumed, never deleted)."""
    try:
        key = json.loads(marker.read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


def prepare_out_dir(out_dir: Path, run_key: str) -> Path | None:
    """Return the checkpoint to resume from, or None. Checkpoints of a different run (other params or
    inputs) are never resumed (that would mix two experiments) and never deleted: they are moved to
    `previous_dir(out_dir)/<old key>/`, which keeps the latest replaced run only (one line says where)."""
    import shutil

    marker = out_dir / "run_key.json"
    if out_dir.exists():
        old = recorded_key(marker)
        if old != run_key:
            if any(p.name != "run_key.json" for p in out_dir.iterdir()):
                keep = previous_dir(out_dir) / (old or "unknown")
                if keep.parent.exists():
                    shutil.rmtree(keep.parent)  # only the latest replaced run is kept
                keep.parent.mkdir(parents=True)
                shutil.move(str(out_dir), str(keep))
                log.warning("%s held checkpoints of another run (key %s, now %s): moved to %s; starting afresh",
                            out_dir, old, run_key, keep)
            else:
                shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(marker, {"key": run_key}, indent=None)
    return latest_checkpoint(out_dir)


def make_trainer(model, tokenizer, cfg: TrainConfig, train_ds, eval_ds, env_factory, bank, max_tool_iters: int,
                 report_to: list[str], callbacks: list | None = None, progress: bool = True,
                 turn_tokens: int | None = None):
    """`progress`: a bar (a terminal) or a short line every `progress_every` steps (logs, CI, --no-progress).
    `turn_tokens`: the agent's per-turn limit (`TrainConfig.grpo_config`)."""
    import os as _os

    _os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import warnings

    # TRL still calls the old transformers name internally; nothing a user can change, so not shown.
    for name in ("is_gradient_checkpointing", "gradient_checkpointing_disable", "gradient_checkpointing_enable"):
        warnings.filterwarnings("ignore", message=f"`{name}` is deprecated", category=FutureWarning)
    from trl import GRPOTrainer

    from biocheck.train.callbacks import TrainProgress, train_log

    class BioCheckGRPOTrainer(ConsoleMixin, NoEvalLossMixin, TimedMixin, UnknownToolsMixin, GRPOTrainer):
        console = TrainProgress(bar=progress, every=progress_every(cfg))

    callbacks = list(callbacks or [])
    if "mlflow" in report_to:  # our MLflow callback (callbacks.train_log), not the stock one report_to adds,
        # and no `profiling/...` timers (TRL sends them to every backend in report_to)
        report_to = [r for r in report_to if r != "mlflow"]
        rc = bank.cfg
        callbacks.append(train_log({"outcome": 1.0, "search": rc.beta1, "evidence": rc.beta2,
                                    "hallucination": -rc.beta3}))
    args = cfg.grpo_config(cfg.out_dir, max_tool_iters, report_to, turn_tokens=turn_tokens)
    args.reward_weights = bank.weights()
    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(task_type="CAUSAL_LM", **cfg.lora)
    return BioCheckGRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=bank.functions(), args=args,
                               train_dataset=train_ds, eval_dataset=eval_ds, environment_factory=env_factory,
                               peft_config=peft_config, callbacks=callbacks)


__all__ = ["TrainConfig", "make_trainer", "progress_every", "prepare_out_dir", "previous_dir", "complete_checkpoints",
           "latest_checkpoint", "fingerprint_inputs"]
