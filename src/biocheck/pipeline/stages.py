"""The stages of dvc.yaml up to selection, one function each (DVC runs them through the CLI; Prefect tasks call
them directly), and the evidence refresh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.llm.load import is_model_dir
from biocheck.params import DEFAULT_PARAMS
from biocheck.pipeline.configs import select_config, serve_config, train_setup
from biocheck.pipeline.run import StageRun
from biocheck.wiring import (
    evidence_config,
    fetch_config,
    judge_config,
    model_config,
    params_of,
    prepare_config,
    refresh_config,
    tracked,
    validate_config,
    variant_suffix,
)


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
