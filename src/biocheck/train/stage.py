"""`biocheck train`: SFT warm start (optional) then EG-GRPO, resumable, tracked in MLflow."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from biocheck import tracking
from biocheck.agent.prompts import Prompts
from biocheck.io import write_json_atomic
from biocheck.pipeline import TrainSetup

log = logging.getLogger(__name__)

SFT_DIR = "sft"


def run_key(c: TrainSetup, prompts: Prompts, base_fingerprint: str, train_ids: list[str], val_ids: list[str]) -> str:
    """The identity of a training run: everything that changes what is learned or how it is rewarded.

    Checkpoints are resumed only under the same key (`prepare_out_dir`), so a changed reward, judge, prompt,
    base model or data split starts afresh instead of continuing an experiment it does not belong to. The
    judge cache's location is left out: it changes no score.
    """
    from biocheck.params import plain
    from biocheck.rewards.judge.base import judge_prompt_hash
    from biocheck.train.grpo import fingerprint_inputs

    return fingerprint_inputs({
        "train": plain(c.train), "agent": plain(c.agent), "search": plain(c.search),
        "reward": plain(c.reward), "judge": c.judge.spec, "judge_prompt": judge_prompt_hash(),
        "prompts": prompts.hash(), "base": base_fingerprint, "train_ids": list(train_ids), "val_ids": list(val_ids)})


def make_bank(c: TrainSetup):
    from biocheck.pipeline import make_judge
    from biocheck.train.reward_funcs import RewardBank

    # The judge also runs for outcome_only: its components are logged (weight 0) for the comparison.
    return RewardBank(c.reward, make_judge(c.judge))


@contextlib.contextmanager
def _no_run(*_args: Any, **_kwargs: Any) -> Iterator[None]:
    """No MLflow run: a process other than the first under a multi-process launcher."""
    yield None


def train(c: TrainSetup, progress: bool = True) -> dict[str, Any]:
    """Run one training run as `c` describes it (built from params by `biocheck.pipeline.train_setup`)."""
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biocheck.agent.llm.transformers_backend import model_fingerprint
    from biocheck.data.prepare import load_corpus, load_split
    from biocheck.io import atomic_dir
    from biocheck.params import plain
    from biocheck.pipeline import make_prompts, make_search_tool
    from biocheck.train.callbacks import SampleEpisodes
    from biocheck.train.dataset import to_dataset
    from biocheck.train.demos import demonstration
    from biocheck.train.env import env_factory, make_env
    from biocheck.train.grpo import latest_checkpoint, make_trainer, prepare_out_dir
    from biocheck.train.sft import SFTConfig, train_sft

    if not progress:  # dvc repro / flows: no "Loading weights" bars in the log either
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    cfg, agent_cfg = c.train, c.agent
    base = c.model.out_dir
    train_recs = load_split("scifact", "train", c.prepared)
    val_recs = load_split("scifact", "val", c.prepared)
    tool = make_search_tool(c.search)
    prompts = make_prompts(agent_cfg, tool)
    base_fingerprint = model_fingerprint(base)
    key = run_key(c, prompts, base_fingerprint, [r.id for r in train_recs], [r.id for r in val_recs])
    # Under a multi-process launcher (accelerate, torchrun) the first process alone prepares the checkpoint
    # folder, trains the warm start and writes metrics and MLflow runs; the others wait for it, then train.
    state = PartialState()
    main = state.is_main_process
    resume = prepare_out_dir(cfg.out_dir, key) if main else None
    state.wait_for_everyone()
    if not main:
        resume = latest_checkpoint(cfg.out_dir)

    start = base
    sft_cfg = SFTConfig(**cfg.sft)
    sft_stats: dict[str, Any] = {}
    if sft_cfg.enabled:
        start = cfg.out_dir / SFT_DIR
        if main and not (start / "config.json").exists():
            tok = AutoTokenizer.from_pretrained(base)
            model = AutoModelForCausalLM.from_pretrained(base)
            env = make_env(tool, prompts, agent_cfg.max_searches, agent_cfg.abstract_chars)
            corpus = {d.id: d for d in load_corpus(c.prepared)}
            convs = [prompts.messages(r.claim) + demonstration(r, env, corpus, agent_cfg.max_searches)
                     for r in train_recs]
            sft_stats = train_sft(model, tok, convs, sft_cfg, tools=[prompts.tool_schema()], seed=cfg.seed,
                                  progress=progress)
            with atomic_dir(start) as tmp:
                model.save_pretrained(tmp)
                tok.save_pretrained(tmp)
                (tmp / "sft_stats.json").write_text(json.dumps(sft_stats, indent=2) + "\n")
            log.info("SFT warm start: %s", sft_stats)
        state.wait_for_everyone()
        if not sft_stats:
            sft_stats = json.loads((start / "sft_stats.json").read_text()) if (start / "sft_stats.json").exists() else {}

    tokenizer = AutoTokenizer.from_pretrained(start)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(start)
    bank = make_bank(c)
    variant = c.reward.variant
    with (tracking.run if main else _no_run)(
            f"train@{variant}", run_name=f"train {variant} seed={cfg.seed}",
            params={"train": plain(cfg), "agent": plain(agent_cfg), "reward": plain(c.reward), "judge": c.judge.spec,
                    "prompt_hash": prompts.hash(), "run_key": key, "start": str(start)},
            tags={"variant": variant, "model_fingerprint": base_fingerprint, "prompt_hash": prompts.hash()}) as active:
        # transformers' MLflowCallback logs into the active run; none (tracking off or failing): no MLflow at all
        report_to = ["mlflow"] if active is not None else []
        if active is not None:
            tracking.log_metrics({f"sft.{k}": v for k, v in sft_stats.items()})
            tracking.log_dataset(c.prepared / "scifact" / "train.jsonl", context="training")
            tracking.log_dataset(c.prepared / "scifact" / "val.jsonl", context="validation")
        trainer = make_trainer(model, tokenizer, cfg, to_dataset(train_recs, prompts), to_dataset(val_recs, prompts),
                               env_factory(tool, prompts, agent_cfg.max_searches, agent_cfg.abstract_chars), bank,
                               agent_cfg.max_searches + agent_cfg.max_refusals, report_to,
                               callbacks=[SampleEpisodes(bank, n=cfg.sample_episodes, every=cfg.logging_steps * 5)],
                               progress=progress)
        if resume:
            log.info("resuming from %s", resume)
        result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    history = trainer.state.log_history
    evals = [h for h in history if "eval_reward" in h]
    stats = {"steps": trainer.state.global_step, "train_loss": result.training_loss,
             "resumed_from": str(resume) if resume else None,
             "eval_reward_start": evals[0]["eval_reward"] if evals else None,
             "eval_reward_last": evals[-1]["eval_reward"] if evals else None, "sft": sft_stats}
    if cfg.metrics_path and main:
        write_json_atomic(cfg.metrics_path, {k: v for k, v in stats.items() if k not in ("sft", "resumed_from")})
    return stats
