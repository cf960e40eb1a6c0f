"""What each DVC stage reads from params (`stage_inputs`; dvc.yaml lists exactly those keys) and the check
`biocheck profile use` makes with it (`check_params`)."""

from __future__ import annotations

from typing import Any

from biocheck.io import InputError
from biocheck.llm.spec import split_spec
from biocheck.params import plain, raw_section
from biocheck.pipeline.configs import (
    audit_config,
    evaluate_config,
    narratives_config,
    select_config,
    serve_config,
    train_config,
    train_setup,
)
from biocheck.pipeline.policy import eval_corpus, eval_models
from biocheck.wiring import (
    agent_config,
    evidence_config,
    fetch_config,
    judge_config,
    model_config,
    params_of,
    prepare_config,
    prepared_dir,
    reward_config,
    search_config,
    validate_config,
)


def stage_inputs(params: dict[str, Any], stage: str) -> dict[str, Any]:
    """What DVC stage `stage` (dvc.yaml's name; `train@outcome_only`) reads from params, as plain data: the
    configs its code builds. dvc.yaml lists exactly the keys that change this (tests/project/test_dvc_params.py
    checks it for every profile), so a key a stage never reads never reruns it."""
    from biocheck.train.training import training_inputs

    p = params_of(params)
    name, _, variant = stage.partition("@")
    if name == "fetch":
        return {"fetch": plain(fetch_config(p))}
    if name == "prepare":
        return {"data": plain(prepare_config(p))}
    if name == "validate":
        return {"validate": plain(validate_config(p))}
    if name == "evidence":
        return {"evidence": plain(evidence_config(p))}
    if name == "model":
        return {"model": plain(model_config(p))}
    if name in ("judge", "judge_eqs"):
        return {"judge": plain(judge_config(p, eqs=name == "judge_eqs"))}
    if name == "sft":
        c = train_setup(p)
        return {"sft": c.train.sft, "seed": c.train.seed, "max_searches": c.agent.max_searches,
                "abstract_chars": c.agent.abstract_chars, "search": plain(c.search), "model": str(c.model.out_dir)}
    if name == "train":
        return training_inputs(train_setup(p, variant=variant or None))
    if name == "select":
        return {"select": plain(select_config(p, variant=variant or None)), "serve": plain(serve_config(p))}
    if name == "audit":
        train_cfg, (reward_cfg, judge_cfg) = train_config(p), reward_config(p)
        # The samples run the start model at train.temperature, seeds audit.seed + k: of agent.llm only its kind.
        agent = {k: v for k, v in plain(agent_config(p)).items() if k not in ("temperature", "seed")}
        agent["llm"] = split_spec(agent["llm"])[0]
        return {"audit": plain(audit_config(p)), "agent": agent, "reward": plain(reward_cfg),
                "judge": plain(judge_cfg), "search": plain(search_config(p, backend=train_cfg.search_backend)),
                "train": {k: getattr(train_cfg, k) for k in ("num_generations", "temperature", "sft", "curriculum")},
                "start": str(model_config(p).out_dir), "prepared": str(prepared_dir(p))}
    if name == "evaluate":
        return {"evaluate": plain(evaluate_config(p)), "models": eval_models(p), **evaluation_inputs(p)}
    if name in ("narrative_passages", "narratives"):
        cfg = plain(narratives_config(p))
        if name == "narrative_passages":
            return {"narratives": {k: cfg[k] for k in ("passages", "seed", "passages_path")},
                    "prepared": str(prepared_dir(p))}
        # the EQS judge and batched turns as the evaluate stage has them; the model evaluate runs for the system
        ecfg = evaluate_config(p)
        return {"narratives": cfg, "eqs_judge": ecfg.eqs_judge, "batch_turns": ecfg.batch_turns,
                "model": eval_models(p)[cfg["system"]], **evaluation_inputs(p)}
    raise InputError(f"{stage}: not a stage of dvc.yaml")


def evaluation_inputs(params: dict[str, Any]) -> dict[str, Any]:
    """What every evaluation reads besides its `evaluate:` section and its models: the agent, search, reward
    and judge settings, the judges' folders, the corpus searched and the prepared data. The evaluate stage
    and the study's evaluation units (study/units.py) build their inputs from this one statement."""
    p = params_of(params)
    reward_cfg, judge_cfg = reward_config(p)
    judge_section = raw_section(p, "judge")
    return {"agent": plain(agent_config(p)), "search": plain(search_config(p)), "reward": plain(reward_cfg),
            "judge": plain(judge_cfg),
            "judge_dirs": [judge_section.get("out_dir"), (judge_section.get("eqs") or {}).get("out_dir")],
            "corpus": eval_corpus(p), "prepared": str(prepared_dir(p))}


# Every stage of dvc.yaml by name (a foreach stage by each of its items): what `check_params` checks.
STAGES = ("fetch", "prepare", "validate", "evidence", "model", "judge", "judge_eqs", "sft", "audit", "train@eg_grpo",
          "train@outcome_only", "select@eg_grpo", "select@outcome_only", "evaluate",
          "narrative_passages", "narratives")


def check_params(params: dict[str, Any]) -> None:
    """InputError (naming the file, the key and what is accepted) unless every stage can read its params: the
    check `biocheck profile use` makes before it installs a profile."""
    for stage in STAGES:
        stage_inputs(params, stage)
