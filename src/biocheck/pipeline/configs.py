"""The configs of the stages above the build layer (`wiring` builds those below it): train, select, serve,
evaluate, narratives, orchestrate, audit, and the training setup one run needs."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from biocheck.params import plain, raw_section, section
from biocheck.wiring import (
    agent_config,
    model_config,
    params_of,
    prepared_dir,
    reward_config,
    search_config,
    variant_path,
    variant_suffix,
    with_default,
)

if TYPE_CHECKING:  # the training layer is imported when a stage runs, not when the CLI starts
    from biocheck.train.training import TrainSetup


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


def narratives_config(params: dict[str, Any], **overrides: Any):
    from biocheck.evaluate.narratives import NarrativesConfig

    return section(params, "narratives", NarrativesConfig, **overrides)


def orchestrate_config(params: dict[str, Any], **overrides: Any):
    from biocheck.orchestration.config import OrchestrateConfig

    return section(params, "orchestrate", OrchestrateConfig, **overrides)


def audit_config(params: dict[str, Any], **overrides: Any):
    from biocheck.evaluate.audit import AuditConfig

    return section(params, "audit", AuditConfig, **overrides)


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
