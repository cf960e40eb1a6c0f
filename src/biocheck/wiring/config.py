"""params.yaml -> typed configs, for the sections of the layers below `wiring` (data, evidence, search, agent,
model, reward and judge, tracking). One key per shared value (`_shared`): two stages that read the same path
read it from one key. The configs of the layers above (train, select, evaluate, orchestrate, audit) are
made in `biocheck.pipeline`, which owns those stages.

Sections and who reads them:
  fetch -> FetchConfig          data -> PrepareConfig         validate -> ValidateConfig
  evidence -> EvidenceConfig    search -> SearchConfig        model -> ModelConfig
  agent -> AgentConfig          reward -> RewardConfig + JudgeConfig
  judge -> JudgeTrainConfig (the judge stage: trains the judge reward.judge names)
  tracking -> tracking.TrackingConfig (MLflow experiment names; read by every stage, a param of none)
  (pipeline/configs.py) train -> TrainConfig, select -> SelectConfig, evaluate -> EvaluateConfig,
  audit -> AuditConfig, orchestrate -> OrchestrateConfig; profile: the profile's name
A section or key that nothing reads is an error, so a typo never silently does nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.io import InputError
from biocheck.llm.spec import split_spec
from biocheck.params import DEFAULT_PARAMS, check_types, load_params, raw_section, section, source

SECTIONS = ("profile", "fetch", "data", "validate", "evidence", "search", "model", "agent", "reward", "judge",
            "audit", "train", "select", "evaluate", "narratives", "study", "orchestrate", "tracking")


def params_of(params: Path | str | dict[str, Any] = DEFAULT_PARAMS) -> dict[str, Any]:
    """Loaded params (a path is read); unknown top-level sections are an error."""
    p = params if isinstance(params, dict) else load_params(params)
    unknown = sorted(str(k) for k in p if k not in SECTIONS)
    if unknown:
        raise InputError(f"{source(p)}: unknown section(s) {', '.join(unknown)}; known sections: {', '.join(SECTIONS)}.")
    return p


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


def with_default(params: dict[str, Any], name: str, key: str, value: Any) -> dict[str, Any]:
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
    from biocheck.evidence.build import EvidenceConfig

    values = with_default(params, "evidence", "corpus", str(prepared_dir(params) / "corpus.jsonl"))
    return section(params, "evidence", EvidenceConfig, values=values, **overrides)


def search_config(params: dict[str, Any], **overrides: Any):
    """The search tool's config; the index and store paths are the evidence stage's (one key each)."""
    from biocheck.evidence.search import SearchConfig

    values = raw_section(params, "search")
    for key in ("index_dir", "store"):
        values = _shared(params, "search", key, f"evidence.{key}", values)
    return section(params, "search", SearchConfig, values=values, **overrides)


def agent_config(params: dict[str, Any], **overrides: Any):
    from biocheck.agent.episode import AgentConfig

    return section(params, "agent", AgentConfig, **overrides)


def model_config(params: dict[str, Any], **overrides: Any):
    from biocheck.base_model.build import ModelConfig

    values = with_default(params, "model", "corpus", str(prepared_dir(params) / "corpus.jsonl"))
    return section(params, "model", ModelConfig, values=values, **overrides)


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
    unknown = sorted(map(str, set(values) - accepted))
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

    values = with_default(params, "judge", "base", raw_section(params, "model").get("out_dir"))
    values = _shared(params, "judge", "prepared_dir", "data.out_dir", values)
    if eqs:
        changes = values.get("eqs")
        if not isinstance(changes, dict) or not changes.get("out_dir"):
            raise InputError(f"{source(params)}: judge.eqs must give at least out_dir (the second judge's folder, "
                             "e.g. {out_dir: models/judge_eqs, seed: 1}) to train the EQS judge.")
        known = {f.name for f in dataclasses.fields(JudgeTrainConfig)} - {"eqs", "prepared_dir", "progress"}
        unknown = sorted(map(str, set(changes) - known))
        if unknown:
            raise InputError(f"{source(params)}: unknown key(s) {', '.join(f'judge.eqs.{k}' for k in unknown)}; "
                             f"judge.eqs accepts {sorted(known)}.")
        try:
            check_types(JudgeTrainConfig, changes, prefix="judge.eqs.")
        except ValueError as e:
            raise InputError(f"{source(params)}, section 'judge': {e}") from None
        if Path(changes["out_dir"]) == Path(values.get("out_dir") or JudgeTrainConfig.out_dir):
            raise InputError(f"{source(params)}: judge.eqs.out_dir is the training judge's folder; give the "
                             "EQS judge its own (e.g. models/judge_eqs).")
        values = {**values, "metrics_path": "metrics/judge_eqs.json", **changes, "eqs": None, "train": True}
    else:
        values = {**values, "eqs": None}  # the EQS judge's keys are its own stage's (judge_eqs), not this one's
    cfg = section(params, "judge", JudgeTrainConfig, values=values, **overrides)
    spec = raw_section(params, "reward").get("judge")
    if not eqs and not cfg.train and spec and _names_dir(spec, cfg.out_dir):
        raise InputError(f"{source(params)}: reward.judge is {spec} but judge.train is false, so {cfg.out_dir} holds "
                         f"no model; set reward.judge: transformers:{cfg.base} (the base as judge) or judge.train: true.")
    return cfg


def _names_dir(spec: str, folder: Path) -> bool:
    kind, where = split_spec(spec)
    return kind == "transformers" and Path(where) == Path(folder)


def primary_variant(params: dict[str, Any]) -> str:
    """The reward variant of the project's own model (reward.variant, EG-GRPO): it keeps the plain paths."""
    return reward_config(params)[0].variant


def variant_path(path: Path | str, suffix: str) -> Path:
    """models/checkpoints -> models/checkpoints_outcome_only; metrics/train.json -> metrics/train_outcome_only.json."""
    p = Path(path)
    return p.with_name(f"{p.stem}{suffix}{p.suffix}") if suffix else p


def variant_suffix(params: dict[str, Any], variant: str | None) -> tuple[str, str]:
    from biocheck.rewards.components import VARIANTS

    primary = primary_variant(params)
    variant = variant or primary
    if variant not in VARIANTS:
        raise InputError(f"--variant {variant}: expected one of {', '.join(VARIANTS)}.")
    return variant, "" if variant == primary else f"_{variant}"


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
    from biocheck.evidence.refresh import BACKEND, RefreshConfig

    search = search_config(params, backend=BACKEND)
    try:
        return RefreshConfig(search=search, **{k: v for k, v in overrides.items() if v is not None})
    except ValueError as e:
        raise InputError(str(e)) from None


def sft_dir(params: dict[str, Any]) -> Path:
    """The SFT warm start (train.sft.out_dir)."""
    return Path((raw_section(params, "train").get("sft") or {}).get("out_dir") or "models/sft")
