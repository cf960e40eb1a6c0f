"""The one wiring module: params -> typed configs -> components, and one function per pipeline stage.

`cli.py` (and through it DVC), the Prefect flows in `flows/` and the benchmarks in `bench/` call only
these functions; no other module reads params.yaml or assembles an agent, a search tool or a judge.
Each stage function takes the params (a file path or an already loaded dict) plus command-line
overrides, runs the stage and records it in MLflow.

Sections and who reads them:
  fetch -> FetchConfig          data -> PrepareConfig         validate -> ValidateConfig
  evidence -> EvidenceConfig    search -> SearchConfig        model -> ModelConfig
  agent -> AgentConfig          reward -> RewardConfig + JudgeConfig
  judge -> JudgeTrainConfig (the judge stage: trains the judge reward.judge names)
  audit -> AuditConfig (the reward-signal audit, before training)
  train -> TrainConfig          select -> SelectConfig        profile: the profile's name
  tracking -> tracking.TrackingConfig (MLflow experiment names; read by every stage, a param of none)
A section or key that nothing reads is an error, so a typo never silently does nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.io import InputError
from biocheck.params import DEFAULT_PARAMS, Params, load_params, plain, raw_section, section, source

log = logging.getLogger(__name__)

SECTIONS = ("profile", "fetch", "data", "validate", "evidence", "search", "model", "agent", "reward", "judge",
            "audit", "train", "select", "evaluate", "orchestrate", "tracking")


def params_of(params: Path | str | dict[str, Any] = DEFAULT_PARAMS) -> dict[str, Any]:
    """Loaded params (a path is read); unknown top-level sections are an error."""
    p = params if isinstance(params, dict) else load_params(params)
    unknown = sorted(k for k in p if k not in SECTIONS)
    if unknown:
        raise InputError(f"{source(p)}: unknown section(s) {', '.join(unknown)}; known sections: {', '.join(SECTIONS)}.")
    return p


# --- params -> configs -------------------------------------------------------------------------------

def _shared(params: dict[str, Any], name: str, key: str, owner: str,
            values: dict[str, Any] | None = None) -> dict[str, Any]:
    """Section `name` (or `values` read from it) with `key` taken from `owner` ("section.key"): one key for a
    path two stages share, so they cannot disagree. Setting it in `name` too is an error, not an override."""
    values = raw_section(params, name) if values is None else values
    if key in values:
        raise InputError(f"{source(params)}: {name}.{key} is not a key of its own: it is {owner} (one key, so the "
                         f"stages agree); remove {name}.{key} and set {owner}.")
    owner_section, owner_key = owner.split(".")
    value = raw_section(params, owner_section).get(owner_key)
    if value is not None:
        values[key] = value
    return values


def _default(params: dict[str, Any], name: str, key: str, value: Any) -> dict[str, Any]:
    """Section `name` with `key` defaulting to `value` (derived from another section) when the file omits it."""
    values = raw_section(params, name)
    if key not in values and value is not None:
        values[key] = value
    return values


def fetch_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.fetch import FetchConfig

    # Files land where `prepare` reads them: one key (data.raw_dir), not two that could disagree.
    cfg = section(params, "fetch", FetchConfig, values=_shared(params, "fetch", "raw_dir", "data.raw_dir"), **overrides)
    cfg.raw_dir = Path(cfg.raw_dir)
    return cfg


def prepare_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.prepare import PrepareConfig

    return section(params, "data", PrepareConfig, **overrides)


def validate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.validate import ValidateConfig

    # Validate what `prepare` wrote: its folder comes from data.out_dir, not a second key.
    values = _shared(params, "validate", "prepared_dir", "data.out_dir")
    return section(params, "validate", ValidateConfig, values=values, **overrides)


def prepared_dir(params: dict[str, Any]) -> Path:
    return Path(raw_section(params, "data").get("out_dir") or "data/prepared")


def evidence_config(params: dict[str, Any], **overrides: Any):
    from biocheck.pubmed.build import EvidenceConfig

    values = _default(params, "evidence", "corpus", str(prepared_dir(params) / "corpus.jsonl"))
    return section(params, "evidence", EvidenceConfig, values=values, **overrides)


def search_config(params: dict[str, Any], **overrides: Any):
    """The search tool's config; the index and store paths are the evidence stage's (one key each)."""
    from biocheck.pubmed.search import SearchConfig

    values = raw_section(params, "search")
    for key in ("index_dir", "store"):
        values = _shared(params, "search", key, f"evidence.{key}", values)
    return section(params, "search", SearchConfig, values=values, **overrides)


def agent_config(params: dict[str, Any], **overrides: Any):
    from biocheck.agent.episode import AgentConfig

    return section(params, "agent", AgentConfig, **overrides)


def model_config(params: dict[str, Any], **overrides: Any):
    from biocheck.models.stage import ModelConfig

    values = _default(params, "model", "corpus", str(prepared_dir(params) / "corpus.jsonl"))
    return section(params, "model", ModelConfig, values=values, **overrides)


def train_config(params: dict[str, Any], **overrides: Any):
    from biocheck.train.grpo import TrainConfig

    return section(params, "train", TrainConfig, **overrides)


@dataclass
class JudgeConfig:
    """The evidence judge: `reward.judge`, `reward.judge_cache`, `reward.judge_batch_size`."""

    spec: str | None = None  # transformers:<path|id> | openai:<model> | null (no judge: R_evidence = 0)
    cache: Path | None = Path("data/evidence/judge_cache.sqlite")
    batch_size: int = 8  # pairs per forward pass (transformers) / requests in flight (openai)

    def __post_init__(self) -> None:
        self.cache = Path(self.cache) if self.cache else None
        if self.batch_size < 1:
            raise ValueError(f"judge_batch_size: {self.batch_size} must be >= 1")


JUDGE_KEYS = {"judge": "spec", "judge_cache": "cache", "judge_batch_size": "batch_size"}


def reward_config(params: dict[str, Any], judge: str | None = None, **overrides: Any):
    """(RewardConfig, JudgeConfig): the `reward:` section split in two; every key lands in one of them."""
    from dataclasses import fields

    from biocheck.rewards.components import RewardConfig

    values = raw_section(params, "reward")
    accepted = {f.name for f in fields(RewardConfig)} | set(JUDGE_KEYS)
    unknown = sorted(set(values) - accepted)
    if unknown:
        raise InputError(f"{source(params)}: unknown key(s) {', '.join(f'reward.{k}' for k in unknown)}; "
                         f"'reward' accepts {sorted(accepted)}.")
    judge_values = {field: values.pop(key) for key, field in JUDGE_KEYS.items() if key in values}
    cfg = section(params, "reward", RewardConfig, values=values, **overrides)
    judge_cfg = section(params, "reward", JudgeConfig, values=judge_values, spec=judge)
    return cfg, judge_cfg


def judge_config(params: dict[str, Any], eqs: bool = False, **overrides: Any):
    """The judge stage's config: its backbone defaults to model.out_dir, its data is data.out_dir (one key).
    `eqs`: the second judge (judge.eqs: the keys it changes), trained the same way into its own folder; it
    scores EQS at evaluation (evaluate.eqs_judge) and never trains the policy."""
    from biocheck.rewards.judge_train.train import JudgeTrainConfig

    values = _default(params, "judge", "base", raw_section(params, "model").get("out_dir"))
    values = _shared(params, "judge", "prepared_dir", "data.out_dir", values)
    if eqs:
        changes = values.get("eqs")
        if not isinstance(changes, dict) or not changes.get("out_dir"):
            raise InputError(f"{source(params)}: judge.eqs must give at least out_dir (the second judge's folder, "
                             "e.g. {out_dir: models/judge_eqs, seed: 1}) to train the EQS judge.")
        known = {f.name for f in dataclasses.fields(JudgeTrainConfig)} - {"eqs", "prepared_dir", "progress"}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise InputError(f"{source(params)}: unknown key(s) {', '.join(f'judge.eqs.{k}' for k in unknown)}; "
                             f"judge.eqs accepts {sorted(known)}.")
        if Path(changes["out_dir"]) == Path(values.get("out_dir") or "models/judge"):
            raise InputError(f"{source(params)}: judge.eqs.out_dir is the training judge's folder; give the "
                             "EQS judge its own (e.g. models/judge_eqs).")
        values = {**values, "metrics_path": "metrics/judge_eqs.json", **changes, "eqs": None, "train": True}
    cfg = section(params, "judge", JudgeTrainConfig, values=values, **overrides)
    spec = raw_section(params, "reward").get("judge")
    if not eqs and not cfg.train and spec and _names_dir(spec, cfg.out_dir):
        raise InputError(f"{source(params)}: reward.judge is {spec} but judge.train is false, so {cfg.out_dir} holds "
                         f"no model; set reward.judge: transformers:{cfg.base} (the base as judge) or judge.train: true.")
    return cfg


def _names_dir(spec: str, folder: Path) -> bool:
    kind, _, where = str(spec).partition(":")
    return kind == "transformers" and Path(where) == Path(folder)


def primary_variant(params: dict[str, Any]) -> str:
    """The reward variant of the project's own model (reward.variant, EG-GRPO): it keeps the plain paths."""
    return reward_config(params)[0].variant


def variant_path(path: Path | str, suffix: str) -> Path:
    """models/checkpoints -> models/checkpoints_outcome_only; metrics/train.json -> metrics/train_outcome_only.json."""
    p = Path(path)
    return p.with_name(f"{p.stem}{suffix}{p.suffix}") if suffix else p


def _variant_suffix(params: dict[str, Any], variant: str | None) -> tuple[str, str]:
    from biocheck.rewards.components import VARIANTS

    primary = primary_variant(params)
    variant = variant or primary
    if variant not in VARIANTS:
        raise InputError(f"--variant {variant}: expected one of {', '.join(VARIANTS)}.")
    return variant, "" if variant == primary else f"_{variant}"


def select_config(params: dict[str, Any], variant: str | None = None, **overrides: Any):
    """SelectConfig for a reward variant: the primary one (reward.variant) selects into select.out_dir and
    moves the `champion` alias; another one (the outcome-only comparison) uses `_<variant>` paths and
    `challenger`."""
    from biocheck.train.select import SelectConfig

    variant, suffix = _variant_suffix(params, variant)
    values = _default(params, "select", "checkpoints", raw_section(params, "train").get("out_dir"))
    cfg = section(params, "select", SelectConfig, values=values, **overrides)
    if suffix:
        for key in ("checkpoints", "out_dir", "metrics_path", "curve_path"):
            setattr(cfg, key, variant_path(getattr(cfg, key), suffix))
        cfg.alias = "challenger"
    return cfg


def evaluate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.evaluate.config import EvaluateConfig

    return section(params, "evaluate", EvaluateConfig, options={"systems": "--systems", "datasets": "--datasets"},
                   **overrides)


def orchestrate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.orchestration.config import OrchestrateConfig

    return section(params, "orchestrate", OrchestrateConfig, **overrides)


def tracking_config(params: dict[str, Any], **overrides: Any) -> tracking.TrackingConfig:
    return section(params, "tracking", tracking.TrackingConfig, **overrides)


def tracked(params: dict[str, Any], **values: Any):
    """The MLflow context of a stage's runs: experiment names (tracking:), profile, prepared data."""
    return tracking.context(config=tracking_config(params), profile=params.get("profile"),
                            prepared_dir=prepared_dir(params), **values)


def refresh_config(params: dict[str, Any], **overrides: Any):
    """`biocheck evidence refresh`: no section of its own; PubMed is reached as `search:` says (timeout,
    attempts, papers per search) with evidence.store, whatever search.backend is. `overrides`: limit,
    progress, report_path, metrics_path."""
    from biocheck.pubmed.refresh import BACKEND, RefreshConfig

    search = search_config(params, backend=BACKEND)
    try:
        return RefreshConfig(search=search, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as e:
        raise InputError(str(e)) from None


# --- components --------------------------------------------------------------------------------------

def make_search_tool(search_cfg):
    from biocheck.pubmed.search import search_tool

    return search_tool(search_cfg)


def make_prompts(agent_cfg, tool):
    """The one place the agent's prompts are built: budget from `agent:`, papers per search from the tool."""
    from biocheck.agent.prompts import Prompts

    return Prompts.for_tool(agent_cfg.max_searches, tool)


def make_agent(agent_cfg, search_cfg):
    from biocheck.agent.episode import Agent
    from biocheck.agent.llm import GenerationConfig, make_llm

    gen = GenerationConfig(max_new_tokens=agent_cfg.max_new_tokens, temperature=agent_cfg.temperature,
                           top_p=agent_cfg.top_p, seed=agent_cfg.seed)
    tool = make_search_tool(search_cfg)
    return Agent(make_llm(agent_cfg.llm, gen), tool, agent_cfg, search_backend=search_cfg.backend,
                 prompts=make_prompts(agent_cfg, tool))


def make_judge(judge_cfg: JudgeConfig):
    from biocheck.rewards.judge import make_judge as _make

    return _make(judge_cfg.spec, batch_size=judge_cfg.batch_size, cache=judge_cfg.cache)


def agent(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, search: dict[str, Any] | None = None,
          **overrides: Any):
    """(Agent, AgentConfig, SearchConfig) for `biocheck check` and evaluation."""
    p = params_of(params)
    agent_cfg = agent_config(p, **overrides)
    search_cfg = search_config(p, options={"backend": "--search"}, **(search or {}))
    return make_agent(agent_cfg, search_cfg), agent_cfg, search_cfg


@dataclass
class TrainSetup:
    """Everything a training run needs, from params."""

    train: Any
    agent: Any
    search: Any
    reward: Any
    judge: JudgeConfig
    model: Any
    prepared: Path


def train_setup(params: dict[str, Any], variant: str | None = None, **overrides: Any) -> TrainSetup:
    """Everything one training run needs. `variant` trains another reward variant than reward.variant with
    everything else identical (the outcome-only comparison) into `_<variant>` paths."""
    p = params_of(params)
    train_cfg = train_config(p, **overrides)
    reward_cfg, judge_cfg = reward_config(p)
    variant, suffix = _variant_suffix(p, variant)
    if suffix:
        reward_cfg = dataclasses.replace(reward_cfg, variant=variant)
        train_cfg.out_dir = variant_path(train_cfg.out_dir, suffix)
        train_cfg.metrics_path = variant_path(train_cfg.metrics_path, suffix) if train_cfg.metrics_path else None
    return TrainSetup(train=train_cfg, agent=agent_config(p), search=search_config(p, backend=train_cfg.search_backend),
                      reward=reward_cfg, judge=judge_cfg, model=model_config(p), prepared=prepared_dir(p))


# --- stages (DVC runs them through the CLI; Prefect tasks call them directly) ---------------------------

def fetch_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.data.fetch import fetch

    return fetch(fetch_config(params_of(params), **overrides))


def prepare_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.data.prepare import prepare

    p = params_of(params)
    cfg, track = prepare_config(p, **overrides), tracked(p)
    stats = prepare(cfg)
    with track, tracking.run("prepare", params={"profile": p.get("profile"), "data": plain(cfg)}):
        tracking.log_metrics(stats)
    return stats


def validate_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any):
    from biocheck.data.validate import validate

    p = params_of(params)
    cfg, track = validate_config(p, **overrides), tracked(p)
    result = validate(cfg)
    with track, tracking.run("validate", params={"profile": p.get("profile"), "validate": plain(cfg)},
                             tags={"success": str(result.success)}):
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
    from biocheck.pubmed.build import build_evidence

    p = params_of(params)
    cfg, track = evidence_config(p, **overrides), tracked(p)
    stats = build_evidence(cfg)
    with track, tracking.run("evidence", params={"profile": p.get("profile"), "evidence": plain(cfg)}):
        tracking.log_metrics(stats)
    return stats


def model_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    from biocheck.models.stage import init_model

    p = params_of(params)
    cfg, track = model_config(p, **overrides), tracked(p)
    stats = init_model(cfg)
    with track, tracking.run("model", run_name="model init", params={"profile": p.get("profile"), "model": plain(cfg)},
                             tags={"model_fingerprint": _fingerprint(cfg.out_dir, stats)}):
        tracking.log_metrics(stats)
    return stats


def judge_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, eqs: bool = False, **overrides: Any) -> dict:
    """Train the evidence judge (or measure the base zero-shot, judge.train false); metrics/judge.json, MLflow.
    `eqs`: the second judge instead (judge.eqs), which scores EQS; metrics/judge_eqs.json."""
    from biocheck.rewards.judge.align_judge import judge_fingerprint
    from biocheck.rewards.judge_train.train import metrics_of, train_judge

    p = params_of(params)
    cfg, track = judge_config(p, eqs=eqs, **overrides), tracked(p)
    stats = train_judge(cfg)
    trained = cfg.train and (cfg.out_dir / "config.json").is_file()
    name = "judge train" if cfg.train else "judge zero-shot"
    with track, tracking.run("judge", run_name=f"{name} (EQS judge)" if eqs else name,
                             params={"profile": p.get("profile"), "judge": plain(cfg)},
                             tags={"model_fingerprint": judge_fingerprint(cfg.out_dir) if trained else None}):
        tracking.log_metrics(metrics_of(stats), prefix="judge")
        tracking.log_artifacts(cfg.out_dir / "judge_train.json")
    return stats


def _fingerprint(model_dir: Path, stats: dict) -> str | None:
    """The built model's fingerprint (the evaluation tags each model's runs with the same value)."""
    if stats.get("fingerprint"):
        return str(stats["fingerprint"])
    from biocheck.agent.llm.transformers_backend import model_fingerprint

    return model_fingerprint(model_dir) if (model_dir / "config.json").is_file() else None


def sft_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True, **overrides: Any) -> dict:
    """The SFT warm start both reward variants' training runs begin from (train.sft.out_dir)."""
    from biocheck.train.stage import sft

    p = params_of(params)
    setup, track = train_setup(p, **overrides), tracked(p)
    with track:
        return sft(setup, progress=progress)


def train_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                variant: str | None = None, **overrides: Any) -> dict:
    from biocheck.train.stage import train

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
        return select(cfg, variant=_variant_suffix(p, variant)[0])


def refresh_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                  changes: list | None = None, **overrides: Any) -> dict:
    """Re-run the PubMed queries recorded in the evidence store live; write reports/evidence_refresh.json and
    metrics/evidence_refresh.json; log to MLflow. `changes` (QueryChanges from shards refreshed elsewhere, e.g.
    the Prefect flow's Dask tasks) skips the re-run and only writes and logs them."""
    from biocheck.pubmed.refresh import refresh, write_report

    p = params_of(params)
    cfg, track = refresh_config(p, progress=progress, **overrides), tracked(p)
    report = refresh(cfg) if changes is None else write_report(cfg, changes)
    with track, tracking.run("evidence-refresh", run_name="evidence refresh",
                             params={"profile": p.get("profile"), "search": plain(cfg.search), "limit": cfg.limit}):
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
    kind, _, ref = llm.partition(":")
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


def sft_dir(params: dict[str, Any]) -> Path:
    """The SFT warm start (train.sft.out_dir)."""
    return Path((raw_section(params, "train").get("sft") or {}).get("out_dir") or "models/sft")


MAKE_MODEL = {"base": "dvc repro model", "eg_grpo": "dvc repro select@eg_grpo",
              "outcome_only": "dvc repro train@outcome_only select@outcome_only", "sft": "dvc repro sft"}


def _check_model(system: str, spec: str) -> None:
    """A local model folder must exist before a long evaluation starts, with the command that makes it."""
    kind, _, ref = spec.partition(":")
    if kind in ("transformers", "vllm") and system in MAKE_MODEL and not (Path(ref) / "config.json").is_file():
        raise InputError(f"{system}: no model in {ref}; run `{MAKE_MODEL[system]}` first.")


MODEL_ALIASES = {"champion": "eg_grpo", "challenger": "outcome_only", "base": "base"}  # alias -> whose model


def eval_model(params: dict[str, Any], model: str) -> str:
    """The model spec `model` names for the eg_grpo system (the `evaluate` deployment's model): an alias, the
    model a system runs by default (champion: the selected EG-GRPO checkpoint, challenger: the outcome-only
    selection, base; as select registers them in MLflow, read from their local folders), a model folder, or
    a spec (KIND:REF, as agent.llm)."""
    from biocheck.agent.llm import KINDS

    if model in MODEL_ALIASES:
        return eval_models(params)[MODEL_ALIASES[model]]
    kind, sep, ref = model.partition(":")
    if sep and ref and kind in KINDS:
        return model
    if (Path(model) / "config.json").is_file():
        # A folder runs where the checkpoints run (in-process, or a server that loads by path); else in-process.
        checkpoint = eval_models(params)["eg_grpo"]
        return f"{checkpoint.partition(':')[0] if checkpoint != agent_config(params).llm else 'transformers'}:{model}"
    what = "no model folder (config.json) at" if Path(model).exists() or "/" in model else "unknown model"
    raise InputError(f"--model {model}: {what} {model!r}; give an alias ({', '.join(MODEL_ALIASES)}), a model "
                     f"folder, or a spec KIND:REF with KIND one of {', '.join(KINDS)}.")


@dataclass
class EvalSetup:
    """What an evaluation runs on, checked before any work: its config, its systems (built lazily, no model
    loaded yet) and its claims per dataset (evaluate.limit applied)."""

    cfg: Any
    systems: dict[str, Any]
    claims: dict[str, list]


def evaluate_setup(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, out: Path | str | None = None,
                   model: str | None = None, **overrides: Any) -> EvalSetup:
    """evaluate_stage's inputs; `model` (eval_model) replaces the eg_grpo system's model (None: the champion)."""
    from biocheck.data.prepare import load_split
    from biocheck.evaluate.config import BASELINES, DATASETS
    from biocheck.evaluate.systems import make_system

    p = params_of(params)
    cfg = evaluate_config(p, **overrides)
    if out is not None:
        out = Path(out)
        cfg.out_dir, cfg.report_dir, cfg.plots_dir = out, out / "gallery", out / "plots"
        cfg.metrics_path, cfg.paired_path = out / "eval.json", out / "eval_paired.json"
    agent_cfg, search_cfg = agent_config(p), search_config(p)
    models = eval_models(p)
    maker = {name: name for name in cfg.systems}  # whose `dvc repro` command makes the model a system runs
    maker.update({name: "sft" for name in maker if name in BASELINES and cfg.model_of(name) == "sft"})
    if model is not None:
        models["eg_grpo"] = eval_model(p, model)
        maker["eg_grpo"] = MODEL_ALIASES.get(model, "")  # a folder or spec the user named: nothing to suggest
    for name in cfg.systems:
        _check_model(maker[name], models[name])
    systems = {name: make_system(name, llm=models[name], agent_cfg=agent_cfg, search_cfg=search_cfg, eval_cfg=cfg)
               for name in cfg.systems}
    claims = {}
    for d in cfg.datasets:
        dataset, split = DATASETS[d].split("/")
        claims[d] = load_split(dataset, split, prepared_dir(p))[: cfg.limit]
        if not claims[d]:
            raise InputError(f"{prepared_dir(p) / DATASETS[d]}.jsonl: no claims to evaluate; check data.subset "
                             "and data.keep_labels, then `dvc repro prepare`.")
    return EvalSetup(cfg, systems, claims)


def evaluate_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                   out: Path | str | None = None, model: str | None = None, **overrides: Any) -> dict:
    """Every system in evaluate.systems on every dataset in evaluate.datasets; `out` puts every output of an
    ad-hoc run (outside DVC) under one folder instead of eval/, metrics/ and reports/; `model` (eval_model)
    is the model the eg_grpo system runs (None: the champion)."""
    from biocheck.evaluate.stage import evaluate

    p = params_of(params)
    aliases = {system: alias for alias, system in MODEL_ALIASES.items() if alias != "base"}
    track = tracked(p, registered_model=select_config(p).registered_model, aliases=aliases)
    setup = evaluate_setup(p, out=out, model=model, **overrides)
    scorer, about = eval_scorer(p, setup.cfg)
    # MLflow (evaluate/compare.log_mlflow): a run `evaluate` with one child per (system, dataset) in the eval
    # experiment; the metrics go onto the registered versions the champion/challenger systems ran.
    with track:
        return evaluate(setup.cfg, setup.systems, setup.claims, scorer, progress=progress, profile=p.get("profile"),
                        about=about)


def eval_scorer(params: dict[str, Any], cfg: Any):
    """(scorer, about): the evaluation's report scorer (EQS by evaluate.eqs_judge, else reward.judge, and by
    the training judge too when they differ; SciFact rationales from the prepared corpus) and, per dataset,
    what its numbers can mean (held out or selection claims, the corpus searched, which judge scored EQS)."""
    from biocheck.evaluate.config import dataset_about
    from biocheck.evaluate.harness import make_scorer
    from biocheck.evaluate.rationale import CorpusSentences

    reward_cfg, judge_cfg = reward_config(params)
    eqs_spec = cfg.eqs_judge or judge_cfg.spec
    same = eqs_spec == judge_cfg.spec
    judge_section = raw_section(params, "judge")
    _check_judge(judge_cfg.spec, judge_section.get("out_dir") or "models/judge", "reward.judge", "judge")
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


def _check_judge(spec: str | None, stage_dir: str | None, key: str, stage: str, alternative: str = "") -> None:
    """A judge that a DVC stage trains into `stage_dir` must be there before a long evaluation starts."""
    kind, _, ref = str(spec or "").partition(":")
    if kind == "transformers" and stage_dir and Path(ref) == Path(stage_dir) and not Path(ref).is_dir():
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
    from biocheck.evaluate.systems import make_system
    from biocheck.pubmed.corpus import articles_from_corpus

    p = params_of(params)
    cfg = audit_config(p, **overrides)
    train_cfg, agent_cfg = train_config(p), agent_config(p)
    reward_cfg, judge_cfg = reward_config(p, judge=judge)
    sft_on = (train_cfg.sft or {}).get("enabled", True)
    start = sft_dir(p) if sft_on else Path(model_config(p).out_dir)
    if not (start / "config.json").is_file():
        raise InputError(f"reward audit: no start model in {start}; run `{'dvc repro sft' if sft_on else 'dvc repro model'}` first.")
    kind = agent_cfg.llm.partition(":")[0]
    llm = f"{kind if kind in ('transformers', 'vllm') else 'transformers'}:{start}"
    search_cfg = search_config(p, backend=train_cfg.search_backend)
    samples = []
    for k in range(train_cfg.num_generations):
        sample_cfg = dataclasses.replace(agent_cfg, temperature=train_cfg.temperature, seed=cfg.seed + k)
        system = make_system("eg_grpo", llm=llm, agent_cfg=sample_cfg, search_cfg=search_cfg)
        system.name = f"sample{k}"  # its own trace folder: audit/traces/sample<k>/<fingerprint>/scifact
        samples.append(system)
    train = load_split("scifact", "train", prepared_dir(p))
    claims = pick_claims(train, cfg.claims, cfg.seed)
    wanted = {e.doc_id for c in train for e in c.evidence}
    corpus = prepared_dir(p) / "corpus.jsonl"
    papers = {a.pmid: a for a in articles_from_corpus(corpus) if a.pmid in wanted} if corpus.is_file() else {}
    about = {"start": llm, "judge": judge_cfg.spec, "group_size": train_cfg.num_generations,
             "temperature": train_cfg.temperature, "threshold": reward_cfg.threshold, "search": search_cfg.backend,
             "claims": cfg.claims, "seed": cfg.seed}
    return AuditSetup(cfg=cfg, samples=samples, claims=claims, reward=reward_cfg, judge=make_judge(judge_cfg),
                      papers=papers, about=about, gold_claims=train)


def audit_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, judge: str | None = None, **overrides: Any) -> dict:
    """`biocheck reward audit`: metrics/reward_audit.json (and MLflow, experiment `train`, run `reward audit`)."""
    from biocheck.evaluate.audit import audit

    p = params_of(params)
    setup, track = audit_setup(p, judge=judge, **overrides), tracked(p)
    result = audit(setup)
    with track, tracking.run("audit", run_name="reward audit",
                             params={"profile": p.get("profile"), "audit": plain(setup.cfg), **setup.about},
                             tags={"warnings": str(len(result["warnings"]))}):
        tracking.log_metrics({k: result[k] for k in ("groups_varying", "judge_credit", "evidence", "means")},
                             prefix="audit")
        tracking.log_artifacts(setup.cfg.metrics_path)
    return result


def evaluate_shard(params: Path | str | dict[str, Any], shard: Any, out: Path | str | None = None,
                   model: str | None = None, **overrides: Any) -> dict:
    """One shard (evaluate/shards.Shard) of a sharded evaluation, on a Dask worker (flows/evaluate.py): its
    episodes, cached as traces where evaluate_stage with the same arguments finds them; no predictions,
    no metrics (that pass writes them)."""
    from biocheck.evaluate.shards import run_shard

    setup = evaluate_setup(params, out=out, model=model,
                           **{**overrides, "systems": [shard.system], "datasets": [shard.dataset]})
    by_id = {c.id: c for c in setup.claims[shard.dataset]}
    missing = [i for i in shard.claim_ids if i not in by_id]
    if missing:
        raise InputError(f"{shard.name}: claim(s) {', '.join(missing[:5])} are no longer in the {shard.dataset} "
                         "split (it changed during the run); run the evaluation again.")
    system = setup.systems[shard.system]
    try:
        return run_shard(system, [by_id[i] for i in shard.claim_ids], shard.dataset, setup.cfg.out_dir,
                         workers=setup.cfg.workers)
    finally:
        system.close()


__all__ = ["DEFAULT_PARAMS", "JudgeConfig", "Params", "SECTIONS", "TrainSetup", "agent", "agent_config",
           "EvalSetup", "MODEL_ALIASES", "audit_config", "audit_setup", "audit_stage", "eval_model", "eval_models", "evaluate_config", "evaluate_setup", "evaluate_shard", "evaluate_stage", "evidence_config", "evidence_stage", "fetch_config", "fetch_stage", "load_params", "make_agent",
           "make_judge", "make_prompts", "make_search_tool", "model_config", "model_stage", "orchestrate_config", "params_of",
           "prepare_config", "prepare_stage", "prepared_dir", "refresh_config", "refresh_stage", "reward_config", "search_config", "select_config",
           "select_stage", "tracked", "tracking_config", "train_config", "train_setup", "train_stage", "validate_config",
           "validate_stage"]
