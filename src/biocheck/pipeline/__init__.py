"""The pipeline's stages: one function per DVC stage (`fetch_stage` ... `evaluate_stage`, plus `refresh_stage`
and `audit_stage`), the configs of the stages above the build layer, `wiring` (train, select, evaluate, orchestrate,
audit), and what those stages need (the training setup, the evaluation's model policy and setup).

Only `biocheck.cli` (and through it DVC), `biocheck.study`, the Prefect flows in `flows/` and the benchmarks in
`bench/` import it; the configs and components below it are `biocheck.wiring`'s. Each stage function takes the
params (a file path or an already loaded dict) plus command-line overrides, runs the stage and records it in
MLflow.

    configs.py     the configs of the stages above `wiring`, and `train_setup`
    policy.py      which model each evaluated system runs, and the corpus it searches
    inputs.py      `stage_inputs` (what each stage reads; dvc.yaml lists exactly that), `check_params`
    run.py         `StageRun`: params, MLflow context, one run per stage
    stages.py      fetch, prepare, validate, evidence, model, judge, sft, train, select, refresh
    evaluation.py  the evaluate stage, its setup, its shards, its scorer
    audit.py       the reward audit stage
    narratives.py  the passage benchmark's two stages (narrative_passages, narratives)
"""

from biocheck.params import DEFAULT_PARAMS
from biocheck.pipeline.audit import audit_setup, audit_stage
from biocheck.pipeline.configs import (
    audit_config,
    evaluate_config,
    narratives_config,
    orchestrate_config,
    select_config,
    serve_config,
    train_config,
    train_setup,
)
from biocheck.pipeline.evaluation import EvalSetup, eval_scorer, evaluate_setup, evaluate_shard, evaluate_stage
from biocheck.pipeline.inputs import STAGES, check_params, evaluation_inputs, stage_inputs
from biocheck.pipeline.policy import eval_corpus, eval_model, eval_models, model_alias
from biocheck.pipeline.stages import (
    evidence_stage,
    fetch_stage,
    judge_stage,
    model_stage,
    prepare_stage,
    refresh_stage,
    select_stage,
    sft_stage,
    train_stage,
    validate_stage,
)

__all__ = ["DEFAULT_PARAMS", "STAGES", "EvalSetup", "audit_config", "audit_setup", "audit_stage", "check_params",
           "eval_corpus", "eval_model", "evaluation_inputs", "eval_models", "eval_scorer", "evaluate_config", "evaluate_setup",
           "evaluate_shard", "evaluate_stage", "evidence_stage", "fetch_stage", "judge_stage", "model_alias",
           "model_stage", "narratives_config", "orchestrate_config", "prepare_stage", "refresh_stage", "select_config", "select_stage",
           "serve_config", "sft_stage", "stage_inputs", "train_config", "train_setup", "train_stage",
           "validate_stage"]
