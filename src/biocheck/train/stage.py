"""`biocheck train`: SFT warm start (optional) then EG-GRPO, resumable, tracked in MLflow."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.io import write_json_atomic

log = logging.getLogger(__name__)

SFT_DIR = "sft"


def build_components(params: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """Everything a training run needs, from params (shared by `train` and `select`)."""
    from biocheck.agent.prompts import Prompts
    from biocheck.config import agent_config, model_config, reward_config, search_config, train_config

    train_cfg = train_config(params, **overrides)
    agent_cfg = agent_config(params)
    search_cfg = search_config(params, backend=train_cfg.search_backend)
    reward_cfg, judge_spec, judge_cache = reward_config(params)
    model_cfg = model_config(params)
    prepared = Path((params.get("data") or {}).get("out_dir", "data/prepared"))
    prompts = Prompts(max_searches=agent_cfg.max_searches, papers_per_search=search_cfg.max_results)
    return {"train": train_cfg, "agent": agent_cfg, "search": search_cfg, "reward": reward_cfg,
            "judge_spec": judge_spec, "judge_cache": judge_cache, "model": model_cfg, "prepared": prepared,
            "prompts": prompts}


def run_key(c: dict[str, Any], base_fingerprint: str, train_ids: list[str], val_ids: list[str]) -> str:
    """The identity of a training run: everything that changes what is learned or how it is rewarded.

    Checkpoints are resumed only under the same key (`prepare_out_dir`), so a changed reward, judge, prompt,
    base model or data split starts afresh instead of continuing an experiment it does not belong to. The
    judge cache's location is left out: it changes no score.
    """
    from biocheck.agent.prompts import prompt_hash
    from biocheck.config import plain
    from biocheck.rewards.judge_base import prompt_hash as judge_prompt_hash
    from biocheck.train.grpo import fingerprint_inputs

    return fingerprint_inputs({
        "train": plain(c["train"]), "agent": plain(c["agent"]), "search": plain(c["search"]),
        "reward": plain(c["reward"]), "judge": c["judge_spec"], "judge_prompt": judge_prompt_hash(),
        "prompts": prompt_hash(), "base": base_fingerprint, "train_ids": list(train_ids), "val_ids": list(val_ids)})


def make_bank(c: dict[str, Any]):
    from biocheck.rewards.judge import make_judge
    from biocheck.train.rewards import RewardBank

    # The judge also runs for outcome_only: its components are logged (weight 0) for the comparison.
    return RewardBank(c["reward"], make_judge(c["judge_spec"], cache=c["judge_cache"]))


def train(params: dict[str, Any], progress: bool = True, **overrides: Any) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biocheck.agent.llm.transformers_backend import model_fingerprint
    from biocheck.agent.prompts import prompt_hash
    from biocheck.config import plain
    from biocheck.data.prepare import load_corpus, load_split
    from biocheck.io import atomic_dir
    from biocheck.pubmed.search import search_tool
    from biocheck.train.callbacks import SampleEpisodes
    from biocheck.train.data import prompt_messages, to_dataset
    from biocheck.train.demos import demonstration
    from biocheck.train.env import SearchEnv, env_factory
    from biocheck.train.grpo import make_trainer, prepare_out_dir
    from biocheck.train.sft import SFTConfig, train_sft

    c = build_components(params, **overrides)
    cfg, agent_cfg, prompts = c["train"], c["agent"], c["prompts"]
    base = c["model"].out_dir
    train_recs = load_split("scifact", "train", c["prepared"])
    val_recs = load_split("scifact", "val", c["prepared"])
    key = run_key(c, model_fingerprint(base), [r.id for r in train_recs], [r.id for r in val_recs])
    resume = prepare_out_dir(cfg.out_dir, key)
    tool = search_tool(c["search"])

    start = base
    sft_cfg = SFTConfig(**cfg.sft)
    sft_stats: dict[str, Any] = {}
    if sft_cfg.enabled:
        start = cfg.out_dir / SFT_DIR
        if not (start / "config.json").exists():
            tok = AutoTokenizer.from_pretrained(base)
            model = AutoModelForCausalLM.from_pretrained(base)
            env = SearchEnv(tool, prompts, agent_cfg.max_searches, agent_cfg.abstract_chars)
            corpus = {d.id: d for d in load_corpus(c["prepared"])}
            convs = [prompt_messages(prompts, r.claim) + demonstration(r, env, corpus, agent_cfg.max_searches)
                     for r in train_recs]
            sft_stats = train_sft(model, tok, convs, sft_cfg, seed=cfg.seed, progress=progress)
            with atomic_dir(start) as tmp:
                model.save_pretrained(tmp)
                tok.save_pretrained(tmp)
                (tmp / "sft_stats.json").write_text(json.dumps(sft_stats, indent=2) + "\n")
            log.info("SFT warm start: %s", sft_stats)
        else:
            sft_stats = json.loads((start / "sft_stats.json").read_text()) if (start / "sft_stats.json").exists() else {}

    tokenizer = AutoTokenizer.from_pretrained(start)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(start)
    bank = make_bank(c)
    report_to = ["mlflow"] if tracking.enabled() else []
    with tracking.run("train", params={"train": plain(cfg), "agent": plain(agent_cfg), "reward": plain(c["reward"]),
                                       "judge": c["judge_spec"], "prompt_hash": prompt_hash(), "run_key": key,
                                       "start": str(start)}) as active:
        if active is not None:  # transformers' MLflowCallback logs into the active run
            tracking.log_metrics({f"sft.{k}": v for k, v in sft_stats.items()})
        trainer = make_trainer(model, tokenizer, cfg, to_dataset(train_recs, prompts), to_dataset(val_recs, prompts),
                               env_factory(tool, prompts, agent_cfg.max_searches, agent_cfg.abstract_chars), bank,
                               agent_cfg.max_searches + agent_cfg.max_refusals, report_to,
                               callbacks=[SampleEpisodes(bank, n=cfg.sample_episodes, every=cfg.logging_steps * 5)])
        if resume:
            log.info("resuming from %s", resume)
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    history = trainer.state.log_history
    evals = [h for h in history if "eval_reward" in h]
    stats = {"steps": trainer.state.global_step, "train_loss": result.training_loss,
             "resumed_from": str(resume) if resume else None,
             "eval_reward_start": evals[0]["eval_reward"] if evals else None,
             "eval_reward_last": evals[-1]["eval_reward"] if evals else None, "sft": sft_stats}
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, {k: v for k, v in stats.items() if k not in ("sft", "resumed_from")})
    return stats
