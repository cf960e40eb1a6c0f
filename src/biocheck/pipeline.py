"""The pipeline's stages: one function per DVC stage (`fetch_stage` ... `evaluate_stage`, plus `refresh_stage`
and `audit_stage`), the configs of the stages above the build layer, `wiring` (train, select, evaluate, orchestrate,
audit), and what those stages need (the training setup, the evaluation's model policy and setup).

Only `cli/` (and through it DVC), the Prefect flows in `flows/` and the benchmarks in `bench/` import it;
the configs and components below it are `biocheck.wiring`'s. Each stage function takes the params (a file
path or an already loaded dict) plus command-line overrides, runs the stage and records it in MLflow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from biocheck import aliases, tracking
from biocheck.io import InputError, json_digest
from biocheck.llm.load import is_model_dir
from biocheck.llm.spec import split_spec
from biocheck.outputs import claim_file, one_writer
from biocheck.params import DEFAULT_PARAMS, plain, raw_section, section
from biocheck.wiring import (
    agent_config,
    evidence_config,
    fetch_config,
    judge_config,
    make_judge,
    model_config,
    params_of,
    prepare_config,
    prepared_dir,
    refresh_config,
    reward_config,
    search_config,
    sft_dir,
    tracked,
    validate_config,
    variant_path,
    variant_suffix,
    with_default,
)

if TYPE_CHECKING:  # the training layer is imported when a stage runs, not when the CLI starts
    from biocheck.train.training import TrainSetup

log = logging.getLogger(__name__)


# --- the configs of the stages above the build layer ----------------------------------------------------

def train_config(params: dict[str, Any], **overrides: Any):
    from biocheck.train.grpo import TrainConfig

    return section(params, "train", TrainConfig, **overrides)


def select_config(params: dict[str, Any], variant: str | None = None, **overrides: Any):
    """SelectConfig for a reward variant: the primary one (reward.variant) selects into select.out_dir and
    registers the `challenger` (champion if it beats the champion); another one (the outcome-only comparison)
    uses `_<variant>` paths and an alias of its own, the variant's name: never a challenger."""
    from biocheck.train.select import SelectConfig

    variant, suffix = variant_suffix(params, variant)
    values = with_default(params, "select", "checkpoints", raw_section(params, "train").get("out_dir"))
    cfg = section(params, "select", SelectConfig, values=values, **overrides)
    if suffix:
        for key in ("checkpoints", "out_dir", "metrics_path", "curve_path"):
            setattr(cfg, key, variant_path(getattr(cfg, key), suffix))
        cfg.alias = variant  # its own alias, the variant's name (aliases.OUTCOME_ONLY)
    return cfg


def serve_config(params: dict[str, Any]):
    """What a registered agent runs with besides its weights: `agent:` and `search:` (wiring/served.py)."""
    from biocheck.wiring.served import ServeConfig

    return ServeConfig(agent=plain(agent_config(params)), search=plain(search_config(params)))


def evaluate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.evaluate.config import EvaluateConfig

    return section(params, "evaluate", EvaluateConfig, options={"systems": "--systems", "datasets": "--datasets"},
                   **overrides)


def orchestrate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.orchestration.config import OrchestrateConfig

    return section(params, "orchestrate", OrchestrateConfig, **overrides)


def train_setup(params: dict[str, Any], variant: str | None = None, **overrides: Any) -> TrainSetup:
    """Everything one training run needs. `variant` trains another reward variant than reward.variant with
    everything else identical (the outcome-only comparison) into `_<variant>` paths."""
    p = params_of(params)
    train_cfg = train_config(p, **overrides)
    reward_cfg, judge_cfg = reward_config(p)
    variant, suffix = variant_suffix(p, variant)
    if suffix:
        reward_cfg = dataclasses.replace(reward_cfg, variant=variant)
        train_cfg.out_dir = variant_path(train_cfg.out_dir, suffix)
        train_cfg.metrics_path = variant_path(train_cfg.metrics_path, suffix) if train_cfg.metrics_path else None
    from biocheck.train.training import TrainSetup

    return TrainSetup(train=train_cfg, agent=agent_config(p), search=search_config(p, backend=train_cfg.search_backend),
                      reward=reward_cfg, judge=judge_cfg, model=model_config(p), prepared=prepared_dir(p))

# --- what each DVC stage reads -----------------------------------------------------------------------

def stage_inputs(params: dict[str, Any], stage: str) -> dict[str, Any]:
    """What DVC stage `stage` (dvc.yaml's name; `train@outcome_only`) reads from params, as plain data: the
    configs its code builds. dvc.yaml lists exactly the keys that change this (tests/test_dvc_params.py
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
        cfg, (reward_cfg, judge_cfg) = evaluate_config(p), reward_config(p)
        judge_section = raw_section(p, "judge")
        return {"evaluate": plain(cfg), "agent": plain(agent_config(p)), "search": plain(search_config(p)),
                "models": eval_models(p), "reward": plain(reward_cfg), "judge": plain(judge_cfg),
                "judge_dirs": [judge_section.get("out_dir"), (judge_section.get("eqs") or {}).get("out_dir")],
                "corpus": eval_corpus(p), "prepared": str(prepared_dir(p))}
    raise InputError(f"{stage}: not a stage of dvc.yaml")


# Every stage of dvc.yaml by name (a foreach stage by each of its items): what `check_params` checks.
STAGES = ("fetch", "prepare", "validate", "evidence", "model", "judge", "judge_eqs", "sft", "audit", "train@eg_grpo",
          "train@outcome_only", "select@eg_grpo", "select@outcome_only", "evaluate")


def check_params(params: dict[str, Any]) -> None:
    """InputError (naming the file, the key and what is accepted) unless every stage can read its params: the
    check `biocheck profile use` makes before it installs a profile."""
    for stage in STAGES:
        stage_inputs(params, stage)


# --- stages (DVC runs them through the CLI; Prefect tasks call them directly) ---------------------------

@dataclass
class StageRun:
    """What every stage runner does around its work: the params loaded and checked (`p`), the MLflow context
    made before the work (a bad `tracking:` section fails in seconds, not after hours), and after it one run
    with the profile and the stage's configs as params. A stage whose own code opens its runs (sft, train,
    select, evaluate) enters `track` instead."""

    p: dict[str, Any]
    track: Any

    @classmethod
    def of(cls, params: Path | str | dict[str, Any], **values: Any) -> StageRun:
        p = params_of(params)
        return cls(p, tracked(p, **values))

    @contextlib.contextmanager
    def record(self, stage: str, run_name: str | None = None, tags: dict[str, Any] | None = None,
               **params: Any) -> Iterator[Any]:
        """The stage's MLflow run: params are the profile and `params` (a config is logged as plain data)."""
        logged = {"profile": self.p.get("profile"),
                  **{k: plain(v) if dataclasses.is_dataclass(v) else v for k, v in params.items()}}
        with self.track, tracking.run(stage, run_name=run_name, params=logged, tags=tags) as active:
            yield active


def fetch_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.data.fetch import fetch

    return fetch(fetch_config(params_of(params), **overrides))


def prepare_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.data.prepare import prepare

    run = StageRun.of(params)
    cfg = prepare_config(run.p, **overrides)
    stats = prepare(cfg)
    with run.record("prepare", data=cfg):
        tracking.log_metrics(stats)
    return stats


def validate_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any):
    from biocheck.data.validate import validate

    run = StageRun.of(params)
    cfg = validate_config(run.p, **overrides)
    result = validate(cfg)
    with run.record("validate", tags={"success": str(result.success)}, validate=cfg):
        tracking.log_metrics({"checks": len(result.checks), "failed": len(result.failures),
                              "success": int(result.success)}, prefix="validation")
        manifest = cfg.prepared_dir / "manifest.json"
        try:  # the dataset stats of the data that was validated (the validator reports a bad manifest)
            stats = json.loads(manifest.read_text(encoding="utf-8")).get("stats", {}) if manifest.is_file() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            stats = {}
        tracking.log_metrics(stats if isinstance(stats, dict) else {})
    return result


def evidence_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.evidence.build import build_evidence

    run = StageRun.of(params)
    cfg = evidence_config(run.p, **overrides)
    stats = build_evidence(cfg)
    with run.record("evidence", evidence=cfg):
        tracking.log_metrics(stats)
    return stats


def model_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.agent.prompts import prompt_texts
    from biocheck.base_model.build import init_model

    run = StageRun.of(params)
    cfg = model_config(run.p, **overrides)
    stats = init_model(cfg, prompt_texts())
    with run.record("model", run_name="model init", tags={"model_fingerprint": _fingerprint(cfg.out_dir, stats)},
                    model=cfg):
        tracking.log_metrics(stats)
    return stats


def judge_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, eqs: bool = False, **overrides: Any) -> dict:
    """Train the evidence judge (or measure the base zero-shot, judge.train false); metrics/judge.json, MLflow.
    `eqs`: the second judge instead (judge.eqs), which scores EQS; metrics/judge_eqs.json."""
    from biocheck.rewards.judge.align_judge import judge_fingerprint
    from biocheck.rewards.judge_train.train import metrics_of, train_judge

    run = StageRun.of(params)
    cfg = judge_config(run.p, eqs=eqs, **overrides)
    stats = train_judge(cfg)
    trained = cfg.train and is_model_dir(cfg.out_dir)
    name = "judge train" if cfg.train else "judge zero-shot"
    with run.record("judge", run_name=f"{name} (EQS judge)" if eqs else name,
                    tags={"model_fingerprint": judge_fingerprint(cfg.out_dir) if trained else None}, judge=cfg):
        tracking.log_metrics({**metrics_of(stats), "seconds": stats.get("seconds")}, prefix="judge")
        tracking.log_artifacts(cfg.out_dir / "judge_train.json")
    return stats


def _fingerprint(model_dir: Path, stats: dict) -> str | None:
    """The built model's fingerprint (the evaluation tags each model's runs with the same value)."""
    if stats.get("fingerprint"):
        return str(stats["fingerprint"])
    from biocheck.llm.load import model_fingerprint

    return model_fingerprint(model_dir) if is_model_dir(model_dir) else None


def sft_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True, **overrides: Any) -> dict:
    """The SFT warm start both reward variants' training runs begin from (train.sft.out_dir)."""
    from biocheck.train.training import sft

    p = params_of(params)
    setup, track = train_setup(p, **overrides), tracked(p)
    with track:
        return sft(setup, progress=progress)


def train_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                variant: str | None = None, **overrides: Any) -> dict:
    from biocheck.train.training import train

    p = params_of(params)
    setup, track = train_setup(p, variant=variant, **overrides), tracked(p)
    with track:
        return train(setup, progress=progress)


def select_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, register: bool | None = None,
                 variant: str | None = None, **overrides: Any) -> dict:
    from biocheck.train.select import select

    p = params_of(params)
    cfg, track = select_config(p, variant=variant, **overrides), tracked(p)
    if register is not None:
        cfg.register = register
    with track:
        return select(cfg, variant=variant_suffix(p, variant)[0], serve=serve_config(p))


def refresh_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                  changes: list | None = None, **overrides: Any) -> dict:
    """Re-run the PubMed queries recorded in the evidence store live; write reports/evidence_refresh.json and
    metrics/evidence_refresh.json; log to MLflow. `changes` (QueryChanges from shards refreshed elsewhere, e.g.
    the Prefect flow's Dask tasks) skips the re-run and only writes and logs them."""
    from biocheck.evidence.refresh import refresh, write_report

    run = StageRun.of(params)
    cfg = refresh_config(run.p, progress=progress, **overrides)
    report = refresh(cfg) if changes is None else write_report(cfg, changes)
    with run.record("evidence-refresh", run_name="evidence refresh", search=cfg.search, limit=cfg.limit):
        tracking.log_metrics(report["summary"])
        tracking.log_artifacts(cfg.report_path)
    return report


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


def _check_model(system: str, spec: str) -> None:
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
        _check_model(maker[name], models[name])
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


def _model_alias(model: str, registered: str) -> str:
    """The name a --model value gives the model it runs (MLflow `model_alias`): one of aliases.EVAL_MODELS, or
    the alias of `models:/<registered>@<alias>`; else "none"."""
    from biocheck.llm.resolve import REGISTERED

    if model in aliases.EVAL_MODELS:
        return model
    kind, ref = split_spec(model)
    m = REGISTERED.fullmatch(ref) if kind == "transformers" else None
    return m["alias"] if m and m["name"] == registered and m["alias"] in aliases.REGISTRY else aliases.NONE


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
        ran["eg_grpo"] = _model_alias(model, registered)
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


def audit_config(params: dict[str, Any], **overrides: Any):
    from biocheck.evaluate.audit import AuditConfig

    return section(params, "audit", AuditConfig, **overrides)


def audit_setup(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, judge: str | None = None,
                **overrides: Any):
    """The reward audit's inputs: the start policy (the SFT warm start when train.sft is on, else the base
    model) as the agent, one system per episode of a group (train.num_generations, seeds audit.seed + k) at
    train.temperature; the audited training claims; the training reward and judge (`judge` replaces
    reward.judge: compare judges on the same cached episodes); the claims' gold evidence papers."""
    from biocheck.data.prepare import load_split
    from biocheck.evaluate.audit import AuditSetup, pick_claims
    from biocheck.evaluate.rationale import CorpusSentences
    from biocheck.evaluate.systems import make_system
    from biocheck.evidence.corpus import articles_from_corpus
    from biocheck.train.training import training_claims

    p = params_of(params)
    cfg = audit_config(p, **overrides)
    train_cfg, agent_cfg = train_config(p), agent_config(p)
    reward_cfg, judge_cfg = reward_config(p, judge=judge)
    sft_on = (train_cfg.sft or {}).get("enabled", True)
    start = sft_dir(p) if sft_on else Path(model_config(p).out_dir)
    if not is_model_dir(start):
        raise InputError(f"reward audit: no start model in {start}; run `{'dvc repro sft' if sft_on else 'dvc repro model'}` first.")
    kind = split_spec(agent_cfg.llm)[0]
    llm = f"{kind if kind in ('transformers', 'vllm') else 'transformers'}:{start}"
    search_cfg = search_config(p, backend=train_cfg.search_backend)
    samples = []
    for k in range(train_cfg.num_generations):
        sample_cfg = dataclasses.replace(agent_cfg, temperature=train_cfg.temperature, seed=cfg.seed + k)
        system = make_system("eg_grpo", llm=llm, agent_cfg=sample_cfg, search_cfg=search_cfg)
        system.name = f"sample{k}"  # its own trace folder: audit/traces/sample<k>/<fingerprint>/scifact
        samples.append(system)
    train = load_split("scifact", "train", prepared_dir(p))
    # the claims training learns from (train.curriculum): the audit asks about the groups training will see
    claims = pick_claims(training_claims(train_setup(p), train), cfg.claims, cfg.seed)
    wanted = {e.doc_id for c in train for e in c.evidence}
    corpus = prepared_dir(p) / "corpus.jsonl"
    papers = {a.pmid: a for a in articles_from_corpus(corpus) if a.pmid in wanted} if corpus.is_file() else {}
    sentences = ({d: s for d, (_, s) in CorpusSentences.from_jsonl(corpus).docs.items() if d in wanted}
                 if corpus.is_file() else {})
    about = {"start": llm, "judge": judge_cfg.spec, "group_size": train_cfg.num_generations,
             "temperature": train_cfg.temperature, "threshold": reward_cfg.threshold, "search": search_cfg.backend,
             "claims": cfg.claims, "seed": cfg.seed}
    return AuditSetup(cfg=cfg, samples=samples, claims=claims, reward=reward_cfg, judge=make_judge(judge_cfg),
                      papers=papers, about=about, gold_claims=train, sentences=sentences)


def audit_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, judge: str | None = None,
                out: Path | str | None = None, **overrides: Any) -> dict:
    """`biocheck reward audit`: reports/reward_audit.json and its headline metrics/reward_audit.json (and
    MLflow, experiment `train`, run `reward audit`). `out`: an ad-hoc run writes the summary there and no
    headline (DVC's metrics stay the pipeline's)."""
    from biocheck.evaluate.audit import audit

    if out is not None:  # before the judge loads and any episode runs
        claim_file(out, "--out")
    run = StageRun.of(params)
    setup = audit_setup(run.p, judge=judge, **overrides)
    if out is not None:
        setup.cfg.report_path, setup.cfg.metrics_path = Path(out), None
    result = audit(setup)
    with run.record("audit", run_name="reward audit", tags={"warnings": str(len(result["warnings"]))},
                    audit=setup.cfg, **setup.about):
        tracking.log_metrics({k: result[k] for k in ("groups_varying", "judge_credit", "evidence", "means")},
                             prefix="audit")
        tracking.log_artifacts(setup.cfg.report_path)
    return result


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


__all__ = ["DEFAULT_PARAMS", "EvalSetup", "audit_config", "audit_setup", "audit_stage",
           "eval_model", "eval_models", "eval_scorer", "evaluate_config", "evaluate_setup", "evaluate_shard",
           "evaluate_stage", "evidence_stage", "fetch_stage", "judge_stage", "model_stage", "orchestrate_config",
           "prepare_stage", "refresh_stage", "select_config", "select_stage", "serve_config", "sft_stage", "stage_inputs", "train_config",
           "train_setup", "train_stage", "validate_stage"]
