"""The reward audit stage (`biocheck reward audit`): its setup (the start policy's samples, the training claims,
reward and judge, the gold papers) and the stage."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.io import InputError
from biocheck.llm.load import is_model_dir
from biocheck.llm.spec import split_spec
from biocheck.outputs import claim_file
from biocheck.params import DEFAULT_PARAMS
from biocheck.pipeline.configs import audit_config, train_config, train_setup
from biocheck.pipeline.run import StageRun
from biocheck.wiring import (
    agent_config,
    make_judge,
    model_config,
    params_of,
    prepared_dir,
    reward_config,
    search_config,
    sft_dir,
)


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
