"""The evaluate stage: its setup (systems and claims, checked before any work), the stage, one shard of a sharded
run (flows/evaluate.py), the scorer and the params digest its outputs record."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck import aliases
from biocheck.io import InputError, json_digest
from biocheck.llm.load import is_model_dir
from biocheck.llm.spec import split_spec
from biocheck.outputs import one_writer
from biocheck.params import DEFAULT_PARAMS, plain, raw_section
from biocheck.pipeline.configs import evaluate_config, select_config
from biocheck.pipeline.inputs import stage_inputs
from biocheck.pipeline.policy import check_model, eval_corpus, eval_model, eval_models, model_alias
from biocheck.wiring import (
    agent_config,
    make_judge,
    params_of,
    prepare_config,
    prepared_dir,
    reward_config,
    search_config,
    tracked,
)


@dataclass
class EvalSetup:
    """What an evaluation runs on, checked before any work: its config, its systems (built lazily, no model
    loaded yet) and its claims per dataset (evaluate.limit applied)."""

    cfg: Any
    systems: dict[str, Any]
    claims: dict[str, list]
    models: dict[str, str] = dataclasses.field(default_factory=dict)  # the model spec each system runs


def evaluate_setup(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, out: Path | str | None = None,
                   model: str | None = None, fingerprints: dict[str, str] | None = None,
                   **overrides: Any) -> EvalSetup:
    """evaluate_stage's inputs; `model` (eval_model) replaces the eg_grpo system's model (None: models/selected);
    `fingerprints`: systems' fingerprints known already (a sharded run's shards report them)."""
    from biocheck.data.prepare import load_full, load_split
    from biocheck.evaluate.config import BASELINES, DATASETS
    from biocheck.evaluate.systems import make_system

    p = params_of(params)
    cfg = evaluate_config(p, **overrides)
    if out is not None:
        out = Path(out)
        cfg.out_dir, cfg.report_dir, cfg.plots_dir = out, out / "gallery", out / "plots"
        cfg.metrics_path, cfg.paired_path = out / "eval.json", out / "eval_paired.json"
        cfg.headline_dir = out / "headline"  # <dataset>/<system>.json, as metrics/eval/ holds them
    agent_cfg, search_cfg = agent_config(p), search_config(p)
    models = eval_models(p)
    maker = {name: name for name in cfg.systems}  # whose `dvc repro` command makes the model a system runs
    maker.update({name: "sft" for name in maker if name in BASELINES and cfg.model_of(name) == "sft"})
    if model is not None:
        models["eg_grpo"] = eval_model(p, model)
        maker["eg_grpo"] = aliases.LOCAL.get(model, "")  # a folder, spec or registered version: nothing to suggest
    for name in cfg.systems:
        check_model(maker[name], models[name])
    systems = {name: make_system(name, llm=models[name], agent_cfg=agent_cfg, search_cfg=search_cfg, eval_cfg=cfg,
                                 fingerprint=(fingerprints or {}).get(name))
               for name in cfg.systems}
    claims = {}
    for d in cfg.datasets:
        dataset, split = DATASETS[d].split("/")
        if cfg.full_split:  # the whole split, not data.subset's sample of it
            keep = prepare_config(p).keep_labels.get(split)
            found = [c for c in load_full(dataset, prepared_dir(p)) if c.split == split and (not keep or c.label in keep)]
            where = prepared_dir(p) / "full" / f"{dataset}.jsonl"
        else:
            found, where = load_split(dataset, split, prepared_dir(p)), prepared_dir(p) / f"{DATASETS[d]}.jsonl"
        claims[d] = found[: cfg.limit]
        if not claims[d]:
            raise InputError(f"{where}: no {split} claims to evaluate; check data.subset "
                             "and data.keep_labels, then `dvc repro prepare`.")
    return EvalSetup(cfg, systems, claims, {name: models[name] for name in cfg.systems})


def evaluate_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                   out: Path | str | None = None, model: str | None = None,
                   fingerprints: dict[str, str] | None = None, **overrides: Any) -> dict:
    """Every system in evaluate.systems on every dataset in evaluate.datasets; `out` puts every output of an
    ad-hoc run (outside DVC) under one folder instead of eval/, metrics/ and reports/; `model` (eval_model)
    is the model the eg_grpo system runs (None: models/selected, the newest selection); `fingerprints`: the
    systems' fingerprints as the shards of a sharded run reported them, so the full pass finds their episodes
    without building any."""
    from biocheck.evaluate.evaluation import evaluate

    p = params_of(params)
    registered = select_config(p).registered_model
    # the name of the model each evaluated system ran (MLflow param and tag `model_alias`; baselines: none).
    # The registry's aliases of those weights (champion, challenger: by fingerprint) are tags of their own.
    ran = {system: name for name, system in aliases.LOCAL.items()}
    if model is not None:
        ran["eg_grpo"] = model_alias(model, registered)
    track = tracked(p, registered_model=registered, model_aliases=ran)
    setup = evaluate_setup(p, out=out, model=model, fingerprints=fingerprints, **overrides)
    # one evaluation at a time into a folder (before the judge loads): two would each leave half the results
    with one_writer(setup.cfg.out_dir, "--out" if out is not None else "evaluate.out_dir", "another evaluation",
                    "give another --out" if out is not None else "evaluate into another folder (--out)"):
        scorer, about = eval_scorer(p, setup.cfg)
        # MLflow (evaluate/compare.EvalRuns): a run `evaluate` with one child per (system, dataset) in the eval
        # experiment, each open while its work runs; the metrics go onto the registered versions whose weights
        # the systems ran.
        with track:
            return evaluate(setup.cfg, setup.systems, setup.claims, scorer, progress=progress,
                            profile=p.get("profile"), about=about, models=setup.models,
                            params_digest=eval_params_digest(p, setup))


# Where an evaluation writes: no part of what its numbers mean (left out of its params digest).
EVAL_OUTPUTS = ("out_dir", "report_dir", "headline_dir", "metrics_path", "paired_path", "plots_dir")


def eval_params_digest(params: dict[str, Any], setup: EvalSetup) -> str:
    """16 hex digits over what an evaluation ran with: stage_inputs("evaluate") with the command line's choices
    (systems, datasets, limit, the eg_grpo model) and without the output paths. The values as params.yaml
    gives them (no clock, no resolved path), so the same run in another folder has the same digest."""
    inputs = stage_inputs(params, "evaluate")
    inputs["evaluate"] = {k: v for k, v in plain(setup.cfg).items() if k not in EVAL_OUTPUTS}
    inputs["models"] = dict(setup.models)
    return json_digest(inputs)


def eval_scorer(params: dict[str, Any], cfg: Any):
    """(scorer, about): the evaluation's report scorer (EQS by evaluate.eqs_judge, else reward.judge, and by
    the training judge too when they differ; SciFact rationales from the prepared corpus) and, per dataset,
    what its numbers can mean (held out or selection claims, the corpus searched, which judge scored EQS)."""
    from biocheck.evaluate.config import dataset_about
    from biocheck.evaluate.harness import make_scorer
    from biocheck.evaluate.rationale import CorpusSentences
    from biocheck.rewards.judge_train.train import JudgeTrainConfig

    reward_cfg, judge_cfg = reward_config(params)
    eqs_spec = cfg.eqs_judge or judge_cfg.spec
    same = eqs_spec == judge_cfg.spec
    judge_section = raw_section(params, "judge")
    _check_judge(judge_cfg.spec, judge_section.get("out_dir") or JudgeTrainConfig.out_dir, "reward.judge",
                 "judge")
    if not same:
        _check_judge(eqs_spec, (judge_section.get("eqs") or {}).get("out_dir"), "evaluate.eqs_judge", "judge_eqs",
                     " (or set evaluate.eqs_judge: null to score EQS with the training judge, said in every output)")
    reward_judge = make_judge(judge_cfg)
    eqs_judge = reward_judge if same else make_judge(dataclasses.replace(judge_cfg, spec=eqs_spec))
    corpus_file = prepared_dir(params) / "corpus.jsonl"
    corpus = CorpusSentences.from_jsonl(corpus_file) if corpus_file.is_file() else None
    scorer = make_scorer(eqs_judge, reward_cfg, reward_judge=reward_judge, corpus=corpus)
    desc, kind = eval_corpus(params)
    judge_note = {"eqs_judge": eqs_spec, "reward_judge": judge_cfg.spec,
                  "eqs_by_training_judge": bool(same and eqs_spec)}
    return scorer, {d: {**dataset_about(d, desc, kind), **judge_note} for d in cfg.datasets}


def _check_judge(spec: str | None, stage_dir: str | Path | None, key: str, stage: str, alternative: str = "") -> None:
    """A judge that a DVC stage trains into `stage_dir` must be there before a long evaluation starts."""
    kind, ref = split_spec(spec)
    if kind == "transformers" and stage_dir and Path(ref) == Path(stage_dir) and not is_model_dir(ref):
        raise InputError(f"{key}: no judge in {ref}; run `dvc repro {stage}` first{alternative}.")


def evaluate_shard(params: Path | str | dict[str, Any], shard: Any, out: Path | str | None = None,
                   model: str | None = None, run: str | None = None, **overrides: Any) -> dict:
    """One shard (evaluate/shards.Shard) of a sharded evaluation, on a Dask worker (flows/evaluate.py): its
    episodes, cached as traces where evaluate_stage with the same arguments finds them; no predictions,
    no metrics (that pass writes them), the system's fingerprint and how many systems it built. With `run` (the
    flow run's id) the worker keeps the system it built for the next shard of the same system in that run
    (shards.held); a later run builds its own, as its models or index may have changed in between."""
    from biocheck.evaluate.shards import held, run_shard
    from biocheck.evaluate.systems import Lazy

    p = params_of(params)
    setup = evaluate_setup(p, out=out, model=model,
                           **{**overrides, "systems": [shard.system], "datasets": [shard.dataset]})
    by_id = {c.id: c for c in setup.claims[shard.dataset]}
    missing = [i for i in shard.claim_ids if i not in by_id]
    if missing:
        raise InputError(f"{shard.name}: claim(s) {', '.join(missing[:5])} are no longer in the {shard.dataset} "
                         "split (it changed during the run); run the evaluation again.")
    built = Lazy.builds
    if run is None:
        system = setup.systems[shard.system]
    else:  # within one run, the same params, folder, model and settings build the same system, whatever the dataset
        key = (run, str(Path.cwd()), json_digest(p), str(out), model,
               json_digest({k: v for k, v in overrides.items() if k != "datasets"}), shard.system)
        system = held(key, lambda: setup.systems[shard.system])
    try:
        done = run_shard(system, [by_id[i] for i in shard.claim_ids], shard.dataset, setup.cfg.out_dir,
                         workers=setup.cfg.workers)
    finally:
        if run is None:
            system.close()
    return {**done, "builds": Lazy.builds - built}
