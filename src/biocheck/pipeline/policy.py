"""What an evaluation runs on: each system's model (`eval_models`; `eval_model` for the eg_grpo system's
--model, `model_alias` for the name MLflow logs), the check that a local model exists before a long run, and the
corpus the systems search (`eval_corpus`: what the numbers are about)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from biocheck import aliases
from biocheck.io import InputError
from biocheck.llm.load import is_model_dir
from biocheck.llm.spec import split_spec
from biocheck.pipeline.configs import evaluate_config, select_config
from biocheck.wiring import (
    agent_config,
    evidence_config,
    model_config,
    prepared_dir,
    search_config,
    sft_dir,
)


def eval_models(params: dict[str, Any]) -> dict[str, str]:
    """The model spec each evaluated system runs (agent.llm semantics): the BioCheck agents with the base
    model and the two selected checkpoints; every baseline with the base model. A hosted model
    (openai:...) has no checkpoints: every system then runs agent.llm, unless agent.llm names the base
    model's folder (`openai:models/base`): a server that loads models by path (`transformers serve` without
    a forced model; vLLM serving several) is then asked for each agent's own checkpoint."""
    from biocheck.evaluate.config import BASELINES, SYSTEMS

    llm = agent_config(params).llm
    kind, ref = split_spec(llm)
    base_dir = Path(model_config(params).out_dir)
    served = kind == "openai" and Path(ref).expanduser().resolve() == base_dir.resolve()
    local = kind in ("transformers", "vllm") or served
    base = f"{kind}:{base_dir}" if local else llm
    models = {name: base for name in SYSTEMS}
    if local:
        models["eg_grpo"] = f"{kind}:{select_config(params).out_dir}"
        models["outcome_only"] = f"{kind}:{select_config(params, variant='outcome_only').out_dir}"
        chosen = evaluate_config(params)
        for name in BASELINES:  # a baseline on the SFT start both GRPO runs share, where the profile says so
            if chosen.model_of(name) == "sft":
                models[name] = f"{kind}:{sft_dir(params)}"
    return models


MAKE_MODEL = {"base": "dvc repro model", "eg_grpo": "dvc repro select@eg_grpo",
              "outcome_only": "dvc repro train@outcome_only select@outcome_only", "sft": "dvc repro sft"}


def check_model(system: str, spec: str) -> None:
    """A local model folder must exist before a long evaluation starts, with the command that makes it."""
    kind, ref = split_spec(spec)
    if kind in ("transformers", "vllm") and system in MAKE_MODEL and not is_model_dir(ref):
        raise InputError(f"{system}: no model in {ref}; run `{MAKE_MODEL[system]}` first.")


def eval_model(params: dict[str, Any], model: str) -> str:
    """The model spec `model` names for the eg_grpo system (the `evaluate` deployment's model): a name
    (aliases.EVAL_MODELS: `selected`, `outcome_only` and `base` read from their local folders, `champion` the
    registry's, downloaded), a model folder, or a spec (KIND:REF, as agent.llm; `models:/NAME@ALIAS` too)."""
    from biocheck.llm import KINDS

    registered = select_config(params).registered_model
    why = aliases.renamed(model, registered)
    if why:
        raise InputError(f"--model {model}: {why}.")
    if model in aliases.LOCAL:
        return eval_models(params)[aliases.LOCAL[model]]
    if model == aliases.CHAMPION:  # a registered version is a transformers model (llm/spec.py), downloaded once
        return f"transformers:models:/{registered}@{aliases.CHAMPION}"
    kind, ref = split_spec(model)
    if ref and kind in KINDS:
        return model
    if is_model_dir(model):
        # A folder runs where the checkpoints run (in-process, or a server that loads by path); else in-process.
        checkpoint = eval_models(params)["eg_grpo"]
        return f"{split_spec(checkpoint)[0] if checkpoint != agent_config(params).llm else 'transformers'}:{model}"
    what = "no model folder (config.json) at" if Path(model).exists() or "/" in model else "unknown model"
    raise InputError(f"--model {model}: {what} {model!r}; give a name ({', '.join(aliases.EVAL_MODELS)}), a model "
                     f"folder, or a spec KIND:REF with KIND one of {', '.join(KINDS)}.")


def model_alias(model: str, registered: str) -> str:
    """The name a --model value gives the model it runs (MLflow `model_alias`): one of aliases.EVAL_MODELS, or
    the alias of `models:/<registered>@<alias>`; else "none"."""
    from biocheck.llm.resolve import REGISTERED

    if model in aliases.EVAL_MODELS:
        return model
    kind, ref = split_spec(model)
    m = REGISTERED.fullmatch(ref) if kind == "transformers" else None
    return m["alias"] if m and m["name"] == registered and m["alias"] in aliases.REGISTRY else aliases.NONE


def eval_corpus(params: dict[str, Any]) -> tuple[str, str]:
    """(description, kind) of the corpus the evaluated systems search: kind "scifact" (the local index of the
    prepared SciFact corpus only), "mixed" (a local index with more in it), "pubmed" (live or replayed)."""
    search, evidence = search_config(params), evidence_config(params)
    if search.backend != "local":
        where = "live PubMed (E-utilities)" if search.backend == "entrez" else "PubMed answers recorded in the store"
        return f"{where}, {evidence.store}", "pubmed"
    default = evidence.corpus is not None and Path(evidence.corpus) == prepared_dir(params) / "corpus.jsonl"
    if default and not evidence.baseline:
        return f"local index of the SciFact corpus ({evidence.corpus})", "scifact"
    parts = [str(evidence.corpus)] if evidence.corpus is not None else []
    parts += [f"PubMed files {', '.join(map(str, evidence.baseline))}"] if evidence.baseline else []
    return f"local index of {' + '.join(parts)}", "mixed"
