"""The model registry: each selection becomes a version of `biocheck-agent` that runs as the agent, and
`champion` moves only through a gate.

`register` logs the selected folder as an MLflow model of the run `select <variant>`: the files copied as they
are (nothing loaded: a 4B model costs a file copy) with two flavors, the agent (pyfunc, `wiring/served.py`: a
claim in, the report out, with the evidence backend's files as an artifact) and, for a full causal LM, MLflow's
`transformers` text-generation pipeline. The new version carries its validation results as tags and
description and gets the alias `challenger`; `champion` moves to it only when its validation reward beats the
champion's (the comparison is recorded on the version), or by `promote` (`biocheck model promote`). The
outcome-only comparison is registered under its own alias (`outcome_only`): never a challenger.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from biocheck.aliases import CHALLENGER, CHAMPION, OUTCOME_ONLY
from biocheck.io import InputError
from biocheck.llm.resolve import MODEL_DIR  # the model folder inside a logged model (`models:/` resolves to it)

log = logging.getLogger(__name__)

EVIDENCE_DIR = "evidence"  # the evidence backend's files inside a logged model
TOKENIZER_DIR = "components/tokenizer"  # the tokenizer's copy mlflow.transformers loads
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
EXAMPLE_CLAIM = "Vitamin D supplementation prevents fractures in older adults."


def _store_folder(uri: str) -> Path | None:
    """The local folder that holds a tracking store (a SQLite file's folder, a file store); None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).parent
    parts = urllib.parse.urlsplit(uri)
    if parts.scheme == "file":
        return Path(urllib.parse.unquote(parts.path))
    return Path(uri) if not parts.scheme else None


@contextlib.contextmanager
def registry_lock() -> Iterator[None]:
    """Hold the model registry for one change (a selection's new version and its champion gate, a promotion):
    two at once would both read the same champion and both move it, or register one selection twice. A second
    change started meanwhile fails at once in one line (outputs.one_writer on the store's folder). A tracking
    server orders its own writes: nothing to lock here; tracking off: no registry to change."""
    from biocheck import tracking
    from biocheck.outputs import one_writer

    uri = tracking.tracking_uri()
    folder = _store_folder(uri) if tracking.enabled() else None
    if folder is None or not folder.is_dir():  # no store there: tracking says so itself (never made here)
        yield
        return
    with one_writer(folder, f"the model registry ({tracking.shown_uri(uri)}):",
                    "another registry change (biocheck select, biocheck model promote)"):
        yield


def register(cfg: Any, best: dict[str, Any], variant: str = "eg_grpo", serve: Any = None) -> dict[str, Any] | None:
    """Log cfg.out_dir (a SelectConfig's) as an MLflow model of the run `select <variant>` and register it as a
    new version of `cfg.registered_model` under `cfg.alias`; then, for the challenger, the champion gate.
    None when tracking is off or fails (the selection itself is written). The caller holds `registry_lock()`."""
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
                client.create_registered_model(cfg.registered_model, description=(
                    f"The BioCheck agent: a claim in, a fact-checking report out (mlflow.pyfunc). Aliases: "
                    f"{CHALLENGER} (the newest selection), {CHAMPION} (the best on the validation reward, or "
                    f"promoted by hand), {OUTCOME_ONLY} (the outcome-only ablation)."))
            tags = {"validation_reward": str(best["eval_reward"]), "step": str(best["step"]), "variant": variant,
                    "model_fingerprint": fingerprint,
                    **{f"validation.{k}": str(v) for k, v in best.items()
                       if k not in ("step", "checkpoint", "eval_reward") and v is not None}}
            logged = log_model(cfg.out_dir, run.info.run_id, tags=tags, serve=serve)
            mv = client.create_model_version(cfg.registered_model, source=logged.model_uri, run_id=run.info.run_id,
                                             tags={**tags, **tracking.run_link(run)}, model_id=logged.model_id,
                                             description=_description(best, variant))
            client.set_registered_model_alias(cfg.registered_model, cfg.alias, mv.version)
            registered = {"name": cfg.registered_model, "version": mv.version, "alias": cfg.alias}
            if cfg.alias == CHALLENGER:
                registered["promoted"] = gate(client, cfg.registered_model, mv.version, best["eval_reward"],
                                              auto=cfg.promote)
    return registered


def _description(best: dict[str, Any], variant: str) -> str:
    parts = [f"{k} {v:.4f}" for k, v in best.items()
             if k not in ("step", "checkpoint", "eval_reward") and isinstance(v, int | float)]
    return (f"{variant} checkpoint of step {best['step']}, selected on the validation reward "
            f"{best['eval_reward']:.4f}" + (f" ({', '.join(parts)})" if parts else "") + ".")


def _reward(version: Any) -> float | None:
    try:
        return float(version.tags["validation_reward"])
    except (KeyError, TypeError, ValueError):
        return None


def gate(client: Any, name: str, version: str, reward: float, auto: bool = True) -> bool:
    """Move `champion` to `version` when there is none yet or `reward` beats the champion's validation reward
    (strictly: a tie keeps the champion). The comparison goes onto the version as tags either way."""
    from mlflow.exceptions import MlflowException

    try:
        champion = client.get_model_version_by_alias(name, CHAMPION)
    except MlflowException:
        champion = None
    theirs = _reward(champion) if champion is not None else None
    if champion is None:
        promoted, why = auto, "first version: no champion yet"
    elif theirs is None:
        promoted, why = False, f"champion v{champion.version} has no validation reward to compare with"
    else:
        promoted = auto and reward > theirs
        verb = "beats" if reward > theirs else "does not beat"
        why = f"validation reward {reward:.4f} {verb} champion v{champion.version}'s {theirs:.4f}"
    if not auto and (champion is None or (theirs is not None and reward > theirs)):
        why += " (select.promote is false: promote by hand)"
    tags = {"promoted": str(promoted).lower(), "promotion": why}
    if champion is not None:
        tags.update(compared_with=str(champion.version), champion_validation_reward=str(theirs))
    for key, value in tags.items():
        client.set_model_version_tag(name, version, key, value)
    if promoted:
        client.set_registered_model_alias(name, CHAMPION, version)
    log.info("registry: %s v%s is the challenger; %s: %s", name, version,
             "promoted to champion" if promoted else "champion unchanged", why)
    return promoted


def promote(name: str, which: str = CHALLENGER) -> dict[str, Any]:
    """`biocheck model promote`: point `champion` of the registered model `name` at `which` (a version number or
    an alias), whatever the validation rewards say; recorded on that version. InputError (one line) when the
    registry cannot be read or has no such model, version or alias, or another change holds it."""
    client, where = _client(name)
    with registry_lock():
        return _promote(client, where, name, which)


def _promote(client: Any, where: str, name: str, which: str) -> dict[str, Any]:
    from mlflow.exceptions import MlflowException

    try:
        model = client.get_registered_model(name)
    except MlflowException:
        raise InputError(f"model {name!r}: the model registry at {where} has no such model; give the name "
                         "`biocheck select` registered (select.registered_model, e.g. biocheck-agent), or set "
                         "MLFLOW_TRACKING_URI to the store that holds it.") from None
    try:
        version = (client.get_model_version(name, which) if which.isdigit()
                   else client.get_model_version_by_alias(name, which))
    except MlflowException:
        if which.isdigit():
            known = ", ".join(sorted((str(v.version) for v in client.search_model_versions(f"name = '{name}'")),
                                     key=int))
            what, have = f"version {which}", f"its versions: {known or 'none'}"
        else:
            what, have = f"alias {which!r}", f"its aliases: {', '.join(sorted(model.aliases)) or 'none'}"
        raise InputError(f"model {name!r}: no {what} ({have}); give one of those, e.g. "
                         f"`biocheck model promote {CHALLENGER}`.") from None
    old = model.aliases.get(CHAMPION)
    why = (f"promoted by hand (biocheck model promote {which})"
           + (f", replacing champion v{old}" if old and str(old) != str(version.version) else ""))
    client.set_registered_model_alias(name, CHAMPION, version.version)
    for key, value in {"promoted": "true", "promotion": why}.items():
        client.set_model_version_tag(name, version.version, key, value)
    return {"name": name, "version": str(version.version), "previous": str(old) if old else None,
            "validation_reward": _reward(version)}


def champion_version(name: str) -> str | None:
    """The version number `champion` of `name` points at; None when tracking is off, the store is missing or
    unreachable, or there is no such model or alias (a quiet lookup: `biocheck check` falls back)."""
    from biocheck import tracking

    uri = tracking.tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file():
        return None  # no store yet: a lookup would create one
    if not tracking.enabled() or tracking.store_problem():
        return None
    import mlflow
    from mlflow.exceptions import MlflowException

    try:
        return str(mlflow.MlflowClient(uri).get_model_version_by_alias(name, CHAMPION).version)
    except MlflowException:
        return None


def _client(name: str) -> tuple[Any, str]:
    from biocheck import tracking

    where = tracking.shown_uri(tracking.tracking_uri())
    if not tracking.enabled():
        raise InputError(f"model {name!r}: MLflow tracking is off (BIOCHECK_TRACKING), so the model registry "
                         "cannot be changed; unset BIOCHECK_TRACKING.")
    why = tracking.store_problem()
    if why:
        raise InputError(f"model {name!r}: the MLflow tracking store at {where} cannot be used ({why}); set "
                         "MLFLOW_TRACKING_URI to the store that holds the registry (or start that server).")
    import mlflow

    return mlflow.MlflowClient(tracking.tracking_uri()), where


def log_model(folder: Path, run_id: str, name: str = "agent", tags: dict[str, str] | None = None,
              serve: Any = None) -> Any:
    """Log the model folder as an MLflow model (MLflow 3 LoggedModel) of run `run_id`, its files copied as they
    are under MODEL_DIR, with the agent's pyfunc flavor (`serve`: the wiring.served.ServeConfig it runs with,
    None: the defaults; the evidence backend's files copied under EVIDENCE_DIR when they exist) and, for a full
    causal LM with its tokenizer, the transformers flavor (`mlflow.transformers.load_model`). Returns the
    LoggedModel (its `model_uri` is `models:/m-...`)."""
    import mlflow
    from mlflow.entities import LoggedModelStatus

    from biocheck import tracking
    from biocheck.outputs import MARK_FILE
    from biocheck.wiring.served import ServeConfig

    serve = serve or ServeConfig()
    model = mlflow.initialize_logged_model(name=name, source_run_id=run_id, tags=tags)
    try:
        # Staged beside the model (same disk, not a possibly small /tmp).
        with tempfile.TemporaryDirectory(prefix=".biocheck-model-", dir=Path(folder).resolve().parent) as tmp:
            staged = Path(tmp) / "model"
            _agent_model(staged, serve)
            files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name != MARK_FILE)
            (staged / MODEL_DIR).mkdir()
            for file in files:  # as every MLflow artifact: the environment's secrets blanked
                if not tracking.copy_redacted(file, staged / MODEL_DIR / file.name):
                    raise tracking.Unavailable(f"{file} holds a secret from the environment and is not text: "
                                               "the model is not logged without it")
            evidence = _copy_evidence(serve, staged)
            _mlmodel(staged, run_id, model.model_id, evidence)
            mlflow.MlflowClient().log_model_artifacts(model.model_id, str(staged))
    except BaseException:
        mlflow.finalize_logged_model(model.model_id, LoggedModelStatus.FAILED)
        raise
    return mlflow.finalize_logged_model(model.model_id, LoggedModelStatus.READY)


def _agent_model(staged: Path, serve: Any) -> None:
    """MLflow's own pyfunc model of the agent in `staged` (models-from-code: the entry file, the model config,
    a signature with an input example, the environment files)."""
    import dataclasses
    import warnings

    import mlflow
    import pandas as pd
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, Schema

    from biocheck import __version__
    from biocheck.wiring.served import CODE_FILE

    signature = ModelSignature(inputs=Schema([ColSpec("string", "claim")]),
                              outputs=Schema([ColSpec("string", "report")]))
    with warnings.catch_warnings():  # MLflow's hint to add type hints to predict: the signature is given
        warnings.simplefilter("ignore", UserWarning)
        mlflow.pyfunc.save_model(str(staged), python_model=str(CODE_FILE), model_config=dataclasses.asdict(serve),
                                 signature=signature, input_example=pd.DataFrame({"claim": [EXAMPLE_CLAIM]}),
                                 pip_requirements=[f"biocheck=={__version__}", f"mlflow=={mlflow.__version__}"])


def _copy_evidence(serve: Any, staged: Path) -> str | None:
    """The backend's files (local index folder, evidence store) under EVIDENCE_DIR; None (with a warning) when
    they are not there: the loaded agent then reads the configured path, which another machine may not have."""
    from biocheck import tracking

    source = serve.evidence_files()
    if serve.search.get("backend", "local") == "entrez" or source is None:
        return None  # live PubMed: the store only caches, nothing to carry
    if not source.exists():
        log.warning("the registered agent carries no evidence files: %s does not exist (its search reads that "
                    "path where it is loaded)", source)
        return None
    target = staged / EVIDENCE_DIR / source.name
    for file in ([source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())):
        dest = target if source.is_file() else target / file.relative_to(source)
        if not tracking.copy_redacted(file, dest):
            raise tracking.Unavailable(f"{file} holds a secret from the environment and is not text: the model is "
                                       "not logged without it")
    return f"{EVIDENCE_DIR}/{source.name}"


def _mlmodel(staged: Path, run_id: str, model_id: str, evidence: str | None) -> None:
    """Complete the MLmodel file mlflow.pyfunc wrote: the agent's artifacts (the weights where they are, no second
    copy), the run and model ids, and for a causal LM the transformers flavor (written as
    mlflow.transformers.save_model writes it for a local checkpoint, whose own code cannot read transformers 5's
    task registry; the tokenizer is copied to where that flavor loads it)."""
    import transformers
    from mlflow.models import Model

    from biocheck.wiring.served import EVIDENCE, POLICY

    mlmodel = Model.load(str(staged / "MLmodel"))
    mlmodel.run_id, mlmodel.model_id = run_id, model_id
    artifacts = {POLICY: {"path": MODEL_DIR}}
    if evidence:
        artifacts[EVIDENCE] = {"path": evidence}
    mlmodel.flavors["python_function"]["artifacts"] = artifacts
    folder = staged / MODEL_DIR
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = {}
    tokenizer = [folder / name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if isinstance(config, dict) and config.get("architectures") and tokenizer:
        (staged / TOKENIZER_DIR).mkdir(parents=True)
        for file in tokenizer:
            shutil.copy2(file, staged / TOKENIZER_DIR / file.name)
        mlmodel.add_flavor("transformers", transformers_version=transformers.__version__, code=None,
                           task="text-generation", instance_type="TextGenerationPipeline",
                           pipeline_model_type="AutoModelForCausalLM", source_model_name=MODEL_DIR,
                           model_binary=MODEL_DIR, torch_dtype=None, components=["tokenizer"],
                           tokenizer_type="AutoTokenizer", tokenizer_name=MODEL_DIR)
    mlmodel.save(str(staged / "MLmodel"))
