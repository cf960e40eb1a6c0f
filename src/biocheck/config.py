"""params.yaml -> the `Config` dataclass of each stage.

params.yaml is plain data (one section per stage); each stage's Config dataclass lives beside the
stage. This module only maps sections onto those dataclasses and reports bad keys clearly.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TypeVar

import yaml

from biocheck.io import InputError

DEFAULT_PARAMS = Path("params.yaml")
T = TypeVar("T")


def plain(cfg: Any) -> dict[str, Any]:
    """A config dataclass as plain data (paths as strings): for MLflow params, manifests and run keys."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}


def load_params(path: Path | str = DEFAULT_PARAMS) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such parameters file (run from the repo root, or pass --params).")
    try:
        params = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(params, dict):
        raise InputError(f"{path}: expected a mapping of sections at the top level.")
    return params


def section(params: dict[str, Any], name: str, cls: type[T], **overrides: Any) -> T:
    """Build `cls` from params[name]; unknown keys are an error that names the key and the choices."""
    values = dict(params.get(name) or {})
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - fields)
    if unknown:
        raise InputError(f"params.yaml: unknown key(s) {', '.join(f'{name}.{k}' for k in unknown)}; "
                         f"'{name}' accepts {sorted(fields)}.")
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**values)
    except (TypeError, ValueError) as e:
        raise InputError(f"params.yaml, section '{name}': {e}") from None


def fetch_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.fetch import FetchConfig

    # Files land where `prepare` reads them: one key (data.raw_dir), not two that could disagree.
    raw_dir = overrides.pop("raw_dir", None) or (params.get("data") or {}).get("raw_dir")
    cfg = section(params, "fetch", FetchConfig, raw_dir=raw_dir, **overrides)
    cfg.raw_dir = Path(cfg.raw_dir)
    return cfg


def prepare_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.prepare import PrepareConfig

    return section(params, "data", PrepareConfig, **overrides)


def validate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.data.validate import ValidateConfig

    # Validate what `prepare` wrote: its folder comes from data.out_dir, not a second key.
    prepared = overrides.pop("prepared_dir", None) or (params.get("data") or {}).get("out_dir")
    return section(params, "validate", ValidateConfig, prepared_dir=prepared, **overrides)


def evidence_config(params: dict[str, Any], **overrides: Any):
    from biocheck.pubmed.build import EvidenceConfig

    if "corpus" not in (params.get("evidence") or {}) and "corpus" not in overrides:
        out_dir = (params.get("data") or {}).get("out_dir")
        overrides["corpus"] = str(Path(out_dir) / "corpus.jsonl") if out_dir else None
    return section(params, "evidence", EvidenceConfig, **overrides)


def search_config(params: dict[str, Any], **overrides: Any):
    """The search tool's config; the index and store paths are the evidence stage's (one key each)."""
    from biocheck.pubmed.search import SearchConfig

    evidence = params.get("evidence") or {}
    for key in ("index_dir", "store"):
        if key in evidence:
            overrides.setdefault(key, evidence[key])
    return section(params, "search", SearchConfig, **overrides)


def agent_config(params: dict[str, Any], **overrides: Any):
    from biocheck.agent.episode import AgentConfig

    return section(params, "agent", AgentConfig, **overrides)


def model_config(params: dict[str, Any], **overrides: Any):
    from biocheck.models.stage import ModelConfig

    if "corpus" not in (params.get("model") or {}):
        out_dir = (params.get("data") or {}).get("out_dir")
        if out_dir:
            overrides.setdefault("corpus", str(Path(out_dir) / "corpus.jsonl"))
    return section(params, "model", ModelConfig, **overrides)


def train_config(params: dict[str, Any], **overrides: Any):
    from biocheck.train.grpo import TrainConfig

    return section(params, "train", TrainConfig, **overrides)


JUDGE_KEYS = ("judge", "judge_cache", "judge_batch_size")


def reward_config(params: dict[str, Any], **overrides: Any):
    """(RewardConfig, judge spec or None, judge cache path): `reward:` minus the judge keys is RewardConfig."""
    from biocheck.rewards.components import RewardConfig

    values = dict(params.get("reward") or {})
    judge = {k: values.pop(k, None) for k in JUDGE_KEYS}
    cfg = section({"reward": values}, "reward", RewardConfig, **overrides)
    return cfg, judge["judge"], judge["judge_cache"] or "data/evidence/judge_cache.sqlite"


def select_config(params: dict[str, Any], **overrides: Any):
    from biocheck.train.select import SelectConfig

    train = params.get("train") or {}
    if "checkpoints" not in (params.get("select") or {}) and train.get("out_dir"):
        overrides.setdefault("checkpoints", train["out_dir"])
    return section(params, "select", SelectConfig, **overrides)
