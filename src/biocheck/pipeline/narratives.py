"""The passage benchmark's two stages (docs/narratives.md): `narrative_passages` composes the passages from
SciFact's held-out claims (narrative/bench.py); `narratives` checks them with one evaluated system's agent
(evaluate/narratives.py) and writes metrics/narratives.json, reports/narratives/ and an MLflow run tagged
`task=narrative` in the evaluation experiment. `narratives.passages: 0` turns the benchmark off: both stages
then write an empty, explained result and load no model."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.io import write_json_atomic
from biocheck.params import DEFAULT_PARAMS
from biocheck.pipeline.configs import evaluate_config, narratives_config
from biocheck.pipeline.policy import check_model, eval_models
from biocheck.pipeline.run import StageRun
from biocheck.wiring import agent_config, params_of, prepared_dir, search_config

OFF = "narratives.passages is 0 (the benchmark is off); set it above 0 and `dvc repro narratives`."


def narrative_passages_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, **overrides: Any) -> dict:
    """data/narratives/passages.jsonl from narratives.seed and narratives.passages (empty when that is 0)."""
    from biocheck.narrative.bench import build_passages, held_out_claims, write_passages

    p = params_of(params)
    cfg = narratives_config(p, **overrides)
    passages = build_passages(held_out_claims(prepared_dir(p)), cfg.seed, cfg.passages) if cfg.passages else []
    write_passages(cfg.passages_path, passages)
    return {"passages": len(passages), "gold_claims": sum(len(x.claims) for x in passages),
            "path": cfg.passages_path.as_posix()}


def narratives_stage(params: Path | str | dict[str, Any] = DEFAULT_PARAMS, progress: bool = True,
                     **overrides: Any) -> dict:
    """Check the benchmark's passages (every arm), write the metrics and the report folder, log to MLflow."""
    from biocheck.evaluate.narrative_page import write_report

    run = StageRun.of(params)
    p = run.p
    cfg = narratives_config(p, **overrides)
    if not cfg.passages:
        metrics = {"skipped": OFF, "about": {"profile": p.get("profile")}}
        write_json_atomic(cfg.metrics_path, metrics)
        write_report(cfg.report_dir, metrics)
        return metrics
    result, about = _evaluate(p, cfg, progress)
    metrics = {"about": about, **result.metrics}
    pages = _passage_pages(cfg, result)
    write_report(cfg.report_dir, metrics, result.claim_rows, result.extracted_rows, pages,
                 gallery=evaluate_config(p).report_dir / "index.html")
    write_json_atomic(cfg.metrics_path, metrics)
    with run.record("narratives", run_name="narratives", tags={"task": "narrative", "system": cfg.system,
                                                               "extractor": cfg.extractor},
                    narratives=cfg, model=about["model"]):
        tracking.log_metrics(_loggable(metrics))
        tracking.log_artifacts(cfg.report_dir, "narratives")
        tracking.log_artifacts(cfg.metrics_path)
    return metrics


def _evaluate(p: dict[str, Any], cfg: Any, progress: bool):
    """The passages checked by narratives.system's agent, scored as the evaluate stage scores (its judges)."""
    from biocheck.evaluate.narratives import run_narratives
    from biocheck.evaluate.systems import make_system
    from biocheck.narrative.bench import held_out_claims, read_passages
    from biocheck.narrative.prompts import prompt_hash
    from biocheck.pipeline.evaluation import eval_scorer

    passages = read_passages(cfg.passages_path)
    # evaluate's EQS judge and turn batching, this stage's claims in flight
    ecfg = dataclasses.replace(evaluate_config(p), datasets=["scifact"], workers=cfg.workers)
    model = eval_models(p)[cfg.system]
    check_model(cfg.system, model)
    system = make_system(cfg.system, llm=model, agent_cfg=agent_config(p), search_cfg=search_config(p), eval_cfg=ecfg)
    scorer, about = eval_scorer(p, ecfg)
    gold = {c.id: c for c in held_out_claims(prepared_dir(p))}
    try:
        result = run_narratives(cfg, passages, system, scorer, gold, progress=progress)
        described = dict(system.describe()) if hasattr(system, "describe") else {}
    finally:
        system.close()
    return result, {"profile": p.get("profile"), "system": cfg.system, "model": model,
                    "model_fingerprint": described.get("model_fingerprint"), "extractor": cfg.extractor,
                    "extraction_prompt": prompt_hash() if cfg.extractor == "model" else None,
                    "passages": len(passages), "gold_claims": sum(len(x.claims) for x in passages), "seed": cfg.seed,
                    **{k: v for k, v in about["scifact"].items() if k != "role"}}


def _passage_pages(cfg: Any, result: Any) -> dict[str, str]:
    """Each passage's narrative report (narrative/report.py) for the extracted arm, from its traces."""
    from biocheck.evaluate.narratives import text_id
    from biocheck.narrative.report import render_narrative_html
    from biocheck.narrative.run import CheckedClaim, NarrativeResult, claim_ids, overall_line

    pages = {}
    for pa in result.by_arm["extracted"]:
        extraction = result.extractions[pa.passage]
        ids = claim_ids(extraction.claims)
        claims = []
        for cid, c in zip(ids, pa.checked, strict=True):
            trace = result.traces.get(text_id(c.text))
            claims.append(CheckedClaim(cid, c.start, c.end, c.text, c.pred,
                                       cfg.out_dir / trace if trace and c.error is None else None, c.error))
        checked = NarrativeResult(extraction.passage, tuple(claims), extraction.skipped, extraction.method,
                                  extraction.note, overall_line(claims, extraction.skipped))
        pages[pa.passage] = render_narrative_html(checked)
    return pages


def _loggable(metrics: dict[str, Any]) -> dict[str, Any]:
    """The numbers MLflow gets: per arm each metric's value, interval and n (`extracted/claim_accuracy.value`)."""
    keep = ("value", "lo", "hi", "n", "den", "k")
    out: dict[str, Any] = {}
    for arm, m in metrics.get("arms", {}).items():
        for name, v in m.items():
            if isinstance(v, dict):
                out[f"{arm}/{name}"] = {k: v[k] for k in keep if v.get(k) is not None}
            else:
                out[f"{arm}/{name}"] = v
    for arm, v in metrics.get("extraction_cost", {}).items():
        out[f"{arm}/extraction_cost"] = {k: v[k] for k in keep if v.get(k) is not None}
    const = metrics.get("constant_answer") or {}
    out["constant_answer"] = {k: const[k] for k in keep if const.get(k) is not None}
    return out
