"""`biocheck select`: pick the checkpoint with the best validation reward and register it as the challenger.

Each checkpoint's validation reward is the `eval_reward` TRL logged at its step (save_steps is a
multiple of eval_steps, so there is one); ties go to the earlier step. The selected weights are
copied to `models/selected`, the whole table goes to `metrics/selection.json` (+ a CSV curve for DVC
plots), and the selection is registered (`train/registry.py`): a new version of `biocheck-agent` with its
validation results, under the alias `challenger`; `champion` moves to it only when it beats the current
champion's validation reward (the outcome-only comparison gets its own alias, `outcome_only`).

Every finished checkpoint is checked before anything is selected or copied: its `trainer_state.json` must be
a trainer state (a log history of steps) and its model files loadable (`biocheck.llm.load.check_model_dir`).
A damaged one, the best or any other, is an error naming the file: the choice would otherwise be made from
a history that cannot be read, or among weights that cannot be used. Deleting that checkpoint folder
selects among the others (docs/training.md, "Selection").
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from biocheck.aliases import CHALLENGER
from biocheck.io import InputError, atomic_path, write_json_atomic
from biocheck.outputs import one_writer, output_dir
from biocheck.train.grpo import TRAINER_STATE, TrainConfig, complete_checkpoints
from biocheck.train.registry import log_model, register, registry_lock  # noqa: F401 (log_model: select's model logging, for callers)

log = logging.getLogger(__name__)

MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
               "adapter_config.json", "adapter_model.safetensors")


@dataclass
class SelectConfig:
    checkpoints: Path = TrainConfig.out_dir  # where training saves them (train.out_dir, its default too)
    out_dir: Path = Path("models/selected")
    metrics_path: Path = Path("metrics/selection.json")
    curve_path: Path = Path("metrics/reward_curve.csv")
    registered_model: str = "biocheck-agent"
    register: bool = True
    # the registry alias every new selection gets: challenger (the outcome-only comparison: outcome_only, never a
    # challenger); champion follows a challenger only when it beats the champion's validation reward
    alias: str = CHALLENGER
    promote: bool = True  # false: champion moves only by `biocheck model promote`

    def __post_init__(self) -> None:
        for k in ("checkpoints", "out_dir", "metrics_path", "curve_path"):
            setattr(self, k, Path(getattr(self, k)))


def _step(p: Path) -> int:
    return int(p.name.rsplit("-", 1)[-1])


class _Logged(BaseModel):
    """One entry of TRL's log history: the numbers selection reads must be numbers; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")
    step: int
    eval_reward: float | None = None
    reward: float | None = None


class _TrainerState(BaseModel):
    model_config = ConfigDict(extra="allow")
    log_history: list[_Logged]


def log_history(ckpt: Path, fix: str) -> list[dict[str, Any]]:
    """The log history in a checkpoint's trainer_state.json; InputError naming the file when it is not one."""
    file = ckpt / TRAINER_STATE
    try:
        state = _TrainerState.model_validate(json.loads(file.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, ValueError) as e:  # ValidationError is a ValueError
        why = _first_error(e) if isinstance(e, ValidationError) else f"not valid JSON: {e}"
        raise InputError(f"{file}: not a trainer state ({why}); {fix}.") from None
    return [h.model_dump(exclude_unset=True) for h in state.log_history]


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(part) for part in err["loc"]) or "the file"
    return f"{where}: {err['msg']}"


def check_checkpoint(ckpt: Path, fix: str) -> list[dict[str, Any]]:
    """The checkpoint's log history, after checking its state and model files (InputError naming the file)."""
    from biocheck.llm.load import check_model_dir

    history = log_history(ckpt, fix)
    check_model_dir(ckpt, fix=fix)
    return history


RESUMED_FILES = ("optimizer.pt", "scheduler.pt", "rng_state.pth")  # what the Trainer restores besides the weights


def check_resume(ckpt: Path) -> None:
    """InputError naming the file unless training can resume from `ckpt`: its state as the Trainer reads it,
    its model files, and the optimizer, scheduler and RNG states (torch zips: one cut short has no directory)."""
    from transformers import TrainerState

    from biocheck.llm.load import check_weights_file

    fix = (f"delete {ckpt} to resume from the checkpoint before it, or move {ckpt.parent} aside to train "
           "afresh")
    check_checkpoint(ckpt, fix)
    try:
        TrainerState.load_from_json(str(ckpt / TRAINER_STATE))
    except (TypeError, ValueError) as e:  # a key the Trainer does not know, a field of the wrong type
        raise InputError(f"{ckpt / TRAINER_STATE}: not a trainer state ({e}); {fix}.") from None
    for name in RESUMED_FILES:
        if (ckpt / name).is_file():
            check_weights_file(ckpt / name, fix)


def checkpoint_table(ckpt_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per saved checkpoint with its validation reward, the full log history)."""
    ckpts = complete_checkpoints(ckpt_dir)  # a folder cut off mid-save has no state and maybe half its weights
    if not ckpts:
        raise InputError(f"{ckpt_dir}: no finished checkpoints. Run `biocheck train` (or `dvc repro train`) first.")
    # Every candidate, before anything is chosen: a damaged checkpoint is never selected, nor silently passed over.
    histories = [check_checkpoint(p, f"nothing was selected; delete {p} to select among the other checkpoints, "
                                     "or train again (`biocheck train`)") for p in ckpts]
    history = histories[-1]
    evals = {h["step"]: h for h in history if "eval_reward" in h}
    rows = []
    for p in ckpts:
        e = evals.get(_step(p))
        row = {"step": _step(p), "checkpoint": str(p), "eval_reward": e["eval_reward"] if e else None}
        if e:
            row.update({k.removeprefix("eval_rewards/").removesuffix("/mean"): v for k, v in e.items()
                        if k.startswith("eval_rewards/") and k.endswith("/mean")})
        rows.append(row)
    return rows, history


def choose(rows: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in rows if r["eval_reward"] is not None]
    if not scored:
        raise InputError("no checkpoint has a validation reward (set train.save_steps to a multiple of "
                         "train.eval_steps).")
    return max(scored, key=lambda r: (r["eval_reward"], -r["step"]))  # ties: the earlier step


def select(cfg: SelectConfig | None = None, variant: str = "eg_grpo", serve: Any = None) -> dict[str, Any]:
    """Select, copy and write the metrics; register the selection (`variant`: the reward variant trained;
    `serve`: the wiring.served.ServeConfig the registered agent runs with, None: the defaults)."""
    cfg = cfg or SelectConfig()
    rows, history = checkpoint_table(cfg.checkpoints)
    best = choose(rows)
    # One selection of these checkpoints at a time, and one registry change: two selections at once would
    # register the same checkpoint twice and race for the champion. A second one fails here, before any write.
    with one_writer(cfg.checkpoints, "select.checkpoints", "another selection (biocheck select)"), \
            (registry_lock() if cfg.register else contextlib.nullcontext()):
        return _select(cfg, rows, history, best, variant, serve)


def _select(cfg: SelectConfig, rows: list[dict[str, Any]], history: list[dict[str, Any]], best: dict[str, Any],
            variant: str, serve: Any) -> dict[str, Any]:
    from biocheck.llm.load import weight_files

    src = Path(best["checkpoint"])
    with output_dir(cfg.out_dir, "biocheck select", "select.out_dir", ("selection.json",)) as tmp:
        for file in [*(src / name for name in MODEL_FILES), *weight_files(src)]:  # + a sharded model's shards
            if file.exists():
                shutil.copy2(file, tmp / file.name)
        write_json_atomic(tmp / "selection.json", best)
    start = next((h["eval_reward"] for h in history if "eval_reward" in h and h["step"] == 0), None)
    result = {"selected_step": best["step"], "selected_eval_reward": best["eval_reward"],
              "start_eval_reward": start, "table": rows}
    write_json_atomic(cfg.metrics_path, result)
    with atomic_path(cfg.curve_path) as tmp:
        with open(tmp, "w", newline="") as f:
            # Long format, a row per logged value: the validation reward exists every eval_steps only, and an
            # empty cell would be drawn as 0 (.dvc/plots/curves.json colours by `curve`).
            w = csv.writer(f)
            w.writerow(["step", "curve", "reward"])
            for curve, key in (("train", "reward"), ("validation", "eval_reward")):
                values = {h["step"]: h[key] for h in history if h.get(key) is not None}
                w.writerows([step, curve, values[step]] for step in sorted(values))
    if cfg.register:
        result["registered"] = register(cfg, best, variant, serve)
    return result
