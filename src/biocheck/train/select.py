"""`biocheck select`: pick the checkpoint with the best validation reward and make it the champion.

Each checkpoint's validation reward is the `eval_reward` TRL logged at its step (save_steps is a
multiple of eval_steps, so there is one); ties go to the earlier step. The selected weights are
copied to `models/selected`, the whole table goes to `metrics/selection.json` (+ a CSV curve for DVC
plots), and the model is logged as an MLflow model of the run `select <variant>` (train experiment; a copy
of the files, docs/mlflow.md) and registered from there: a new version tagged with its validation reward,
step, variant, model fingerprint and a link to that run, under the alias `champion` (the outcome-only
comparison: `challenger`), loadable as `models:/biocheck-agent@champion`.

Every finished checkpoint is checked before anything is selected or copied: its `trainer_state.json` must be
a trainer state (a log history of steps) and its model files loadable (`biocheck.llm.load.check_model_dir`).
A damaged one, the best or any other, is an error naming the file: the choice would otherwise be made from
a history that cannot be read, or among weights that cannot be used. Deleting that checkpoint folder
selects among the others (docs/training.md, "Selection").
"""

from __future__ import annotations

import csv
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from biocheck.io import InputError, atomic_path, write_json_atomic
from biocheck.llm.resolve import MODEL_DIR  # the model folder inside a logged model (`models:/` resolves to it)
from biocheck.outputs import output_dir
from biocheck.train.grpo import TRAINER_STATE, complete_checkpoints

log = logging.getLogger(__name__)

MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
               "adapter_config.json", "adapter_model.safetensors")


@dataclass
class SelectConfig:
    checkpoints: Path = Path("models/checkpoints")
    out_dir: Path = Path("models/selected")
    metrics_path: Path = Path("metrics/selection.json")
    curve_path: Path = Path("metrics/reward_curve.csv")
    registered_model: str = "biocheck-agent"
    register: bool = True
    alias: str = "champion"  # the registry alias this selection moves (the comparison variant: "challenger")

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


def select(cfg: SelectConfig | None = None, variant: str = "eg_grpo") -> dict[str, Any]:
    """Select, copy and write the metrics; register the selection (`variant`: the reward variant trained)."""
    from biocheck.llm.load import weight_files

    cfg = cfg or SelectConfig()
    rows, history = checkpoint_table(cfg.checkpoints)
    best = choose(rows)
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
        result["registered"] = register(cfg, best, variant)
    return result


def register(cfg: SelectConfig, best: dict[str, Any], variant: str = "eg_grpo") -> dict[str, Any] | None:
    """Log models/selected as an MLflow model of the run `select <variant>` and register that logged model as a
    new version of `cfg.registered_model` under `cfg.alias` (champion). The version holds a copy of the files:
    the next selection overwrites models/selected, not what a version holds. None when tracking is off or fails
    (the selection itself is written)."""
    from biocheck import tracking
    from biocheck.llm.load import model_fingerprint

    if not tracking.enabled():
        return None
    fingerprint = model_fingerprint(cfg.out_dir)  # evaluate attaches metrics to this version only if it ran these
    registered = None
    with tracking.run(f"select@{variant}", run_name=f"select {variant}", params={"selected_step": best["step"]},
                      tags={"variant": variant, "model_fingerprint": fingerprint}) as run:
        if run is None:
            return None
        tracking.log_metrics({"selected_eval_reward": best["eval_reward"], "selected_step": best["step"]})
        with tracking.guard("registering the selected model"):
            import mlflow
            from mlflow import MlflowClient

            client = MlflowClient()
            try:
                client.get_registered_model(cfg.registered_model)
            except mlflow.exceptions.MlflowException:
                client.create_registered_model(cfg.registered_model, description="BioCheck agent policy (EG-GRPO)")
            tags = {"validation_reward": str(best["eval_reward"]), "step": str(best["step"]), "variant": variant,
                    "model_fingerprint": fingerprint}
            logged = log_model(cfg.out_dir, run.info.run_id, tags=tags)
            mv = client.create_model_version(cfg.registered_model, source=logged.model_uri, run_id=run.info.run_id,
                                             tags={**tags, **tracking.run_link(run)}, model_id=logged.model_id)
            client.set_registered_model_alias(cfg.registered_model, cfg.alias, mv.version)
            registered = {"name": cfg.registered_model, "version": mv.version, "alias": cfg.alias}
    return registered


TOKENIZER_DIR = "components/tokenizer"  # the tokenizer's copy mlflow.transformers loads
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")


def log_model(folder: Path, run_id: str, name: str = "agent", tags: dict[str, str] | None = None) -> Any:
    """Log the model folder as an MLflow model (MLflow 3 LoggedModel) of run `run_id`, its files copied as they
    are into the model's artifacts under MODEL_DIR (nothing loaded: a 4B model costs a file copy), with a
    signature (a claim in, a report out). A full causal LM with its tokenizer also gets the transformers
    flavor, so that `mlflow.transformers.load_model("models:/...")` builds a text-generation pipeline; any
    other folder (a LoRA adapter) is artifacts only, read by `biocheck check --llm models:/...`. Returns the
    LoggedModel (its `model_uri` is `models:/m-...`)."""
    import tempfile

    import mlflow
    from mlflow.entities import LoggedModelStatus

    from biocheck import tracking
    from biocheck.outputs import MARK_FILE

    model = mlflow.initialize_logged_model(name=name, source_run_id=run_id, tags=tags)
    try:
        # Staged beside the model (same disk, not a possibly small /tmp).
        with tempfile.TemporaryDirectory(prefix=".biocheck-model-", dir=Path(folder).resolve().parent) as tmp:
            staged = Path(tmp)
            files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name != MARK_FILE)
            (staged / MODEL_DIR).mkdir()
            for file in files:  # as every MLflow artifact: the environment's secrets blanked
                if not tracking.copy_redacted(file, staged / MODEL_DIR / file.name):
                    raise tracking.Unavailable(f"{file} holds a secret from the environment and is not text: "
                                               "the model is not logged without it")
            _mlmodel(staged, run_id, model.model_id).save(str(staged / "MLmodel"))
            mlflow.MlflowClient().log_model_artifacts(model.model_id, str(staged))
    except BaseException:
        mlflow.finalize_logged_model(model.model_id, LoggedModelStatus.FAILED)
        raise
    return mlflow.finalize_logged_model(model.model_id, LoggedModelStatus.READY)


def _mlmodel(staged: Path, run_id: str, model_id: str) -> Any:
    """The MLmodel file of a logged model: signature, and the transformers + pyfunc flavors for a causal LM
    (written as mlflow.transformers.save_model writes them for a local checkpoint, whose own code cannot
    read transformers 5's task registry; the tokenizer is copied to where that flavor loads it)."""
    import mlflow
    import transformers
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, Schema

    signature = ModelSignature(inputs=Schema([ColSpec("string", "claim")]), outputs=Schema([ColSpec("string", "report")]))
    mlmodel = Model(run_id=run_id, model_id=model_id, signature=signature)
    folder = staged / MODEL_DIR
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    tokenizer = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not isinstance(config, dict) or not config.get("architectures") or not tokenizer:
        return mlmodel
    (staged / TOKENIZER_DIR).mkdir(parents=True)
    for file in tokenizer:
        shutil.copy2(file, staged / TOKENIZER_DIR / file.name)
    mlmodel.add_flavor("transformers", transformers_version=transformers.__version__, code=None,
                       task="text-generation", instance_type="TextGenerationPipeline",
                       pipeline_model_type="AutoModelForCausalLM", source_model_name=MODEL_DIR,
                       model_binary=MODEL_DIR, torch_dtype=None, components=["tokenizer"],
                       tokenizer_type="AutoTokenizer", tokenizer_name=MODEL_DIR)
    mlflow.pyfunc.add_to_model(mlmodel, loader_module="mlflow.transformers")
    return mlmodel
