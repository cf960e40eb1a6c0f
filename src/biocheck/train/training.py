"""`biocheck sft` and `biocheck train`: the SFT warm start (optional, shared by every reward variant), then
EG-GRPO from it, resumable, tracked in MLflow."""

from __future__ import annotations

import contextlib
import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck import tracking
from biocheck.agent.prompts import Prompts
from biocheck.io import write_json_atomic
from biocheck.llm.load import is_model_dir

log = logging.getLogger(__name__)


@dataclass
class TrainSetup:
    """Everything a training run needs, from params (`biocheck.pipeline.train_setup` builds it)."""

    train: Any
    agent: Any
    search: Any
    reward: Any
    judge: Any  # biocheck.wiring.JudgeConfig
    model: Any
    prepared: Path


SFT_KEY = "sft_key.json"  # the inputs the warm start in a folder was trained from
SFT_STATS = "sft_stats.json"
# Who may replace train.sft.out_dir (biocheck.outputs), how the user names it, an unmarked older output.
SFT_OUTPUT = ("biocheck sft", "train.sft.out_dir", (SFT_STATS,))


# The `agent:` settings training reads: the budget in the prompts and the environment, the refusal rounds
# (tool iterations per episode), the excerpt length, the tokens one model turn may generate (a rollout's turn has
# the evaluated agent's limit: without it a looping first turn ran to max_completion_length). The rest of `agent:` (its model, decoding, seed,
# workers) drives `biocheck check` and evaluation only, so it is neither in the run key nor in dvc.yaml's
# `train` params: changing it never reruns, nor replaces, a training run.
TRAINING_AGENT_FIELDS = ("max_searches", "max_refusals", "abstract_chars", "max_new_tokens")


def run_key(c: TrainSetup, prompts: Prompts, base_fingerprint: str, train_ids: list[str], val_ids: list[str]) -> str:
    """The identity of a training run: everything that changes what is learned or how it is rewarded.

    Checkpoints are resumed only under the same key (`prepare_out_dir`), so a changed reward, judge, prompt,
    base model or data split starts afresh instead of continuing an experiment it does not belong to. The
    judge cache's location is left out: it changes no score; so are the `agent:` settings training never reads
    (`TRAINING_AGENT_FIELDS` names the ones it does).
    """
    from biocheck.rewards.judge.base import judge_prompt_hash
    from biocheck.train.grpo import fingerprint_inputs

    return fingerprint_inputs({
        **training_inputs(c), "judge_prompt": judge_prompt_hash(),
        "prompts": prompts.hash(), "base": base_fingerprint, "train_ids": list(train_ids), "val_ids": list(val_ids)})


def training_inputs(c: TrainSetup) -> dict[str, Any]:
    """The params a training run learns from, as plain data: `run_key` hashes them, and dvc.yaml's `train`
    params are exactly the keys that change them (tests/project/test_dvc_params.py). The judge's cache and batch
    size change no score, and only `TRAINING_AGENT_FIELDS` of `agent:` are read."""
    from biocheck.params import plain

    return {"train": plain(c.train), "agent": {f: getattr(c.agent, f) for f in TRAINING_AGENT_FIELDS},
            "search": plain(c.search), "reward": plain(c.reward), "judge": c.judge.spec}


def _quiet_transformers(progress: bool) -> None:
    """dvc repro / flows (no progress): no "Loading weights" bars in the log either."""
    if not progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def sft_key(c: TrainSetup, prompts: Prompts, base_fingerprint: str, train_ids: list[str]) -> str:
    """The identity of a warm start: what changes the demonstrations or how they are learned. Not the reward:
    EG-GRPO and outcome-only GRPO start from the same SFT model (trained once, `biocheck sft`)."""
    from biocheck.params import plain
    from biocheck.train.demos import DEMO_FORMAT
    from biocheck.train.grpo import fingerprint_inputs

    sft = {k: v for k, v in c.train.sft.items() if k != "out_dir"}  # where it is saved changes nothing
    return fingerprint_inputs({
        "sft": sft, "seed": c.train.seed, "max_searches": c.agent.max_searches,
        "abstract_chars": c.agent.abstract_chars, "search": plain(c.search), "prompts": prompts.hash(),
        "base": base_fingerprint, "train_ids": list(train_ids), "demos": DEMO_FORMAT})


def training_claims(c: TrainSetup, train_recs: list, tool=None, prompts: Prompts | None = None) -> list:
    """The training claims GRPO learns from: `train_recs`, or with train.curriculum "reachable" those on which a
    demonstration's search (train.sft.query) shows a gold rationale sentence (train/demos.reachable)."""
    if c.train.curriculum is None:
        return list(train_recs)
    from biocheck.data.prepare import load_corpus
    from biocheck.train.demos import reachable
    from biocheck.train.env import make_env
    from biocheck.train.sft import SFTConfig
    from biocheck.wiring import make_prompts, make_search_tool

    tool = tool or make_search_tool(c.search)
    prompts = prompts or make_prompts(c.agent, tool)
    env = make_env(tool, prompts, c.agent.max_searches, c.agent.abstract_chars)
    corpus = {d.id: d for d in load_corpus(c.prepared)}
    kept = reachable(list(train_recs), env, corpus, c.agent.max_searches, SFTConfig(**c.train.sft).query)
    if not kept:
        from biocheck.io import InputError

        raise InputError(f"train.curriculum reachable: none of the {len(train_recs)} training claims shows a gold "
                         "rationale to a demonstration's search; set train.curriculum: null or widen data.subset.train")
    log.info("train.curriculum reachable: %d of %d training claims", len(kept), len(train_recs))
    return kept


def demo_pool(c: TrainSetup, train_recs: list) -> list:
    """The claims demonstrations are built from: the profile's training split (sft.demos "first"), or every
    training claim of the release, NEI included (sft.demos "citing"; never a validation or test claim)."""
    from biocheck.data.prepare import load_full
    from biocheck.train.sft import SFTConfig

    if SFTConfig(**c.train.sft).demos == "first":
        return train_recs
    return [r for r in load_full("scifact", c.prepared) if r.split == "train"]


def warm_start(c: TrainSetup, prompts: Prompts, tool, base_fingerprint: str, train_recs: list,
               progress: bool = True) -> tuple[Any, dict[str, Any]]:
    """(the model GRPO starts from, the warm start's stats): models/base when train.sft.enabled is false,
    else the SFT model in train.sft.out_dir, trained there first unless it already holds one of the same
    inputs (`sft_key`). Under a multi-process launcher the first process trains it; the others wait."""
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biocheck.data.prepare import load_corpus
    from biocheck.outputs import claim_dir, output_dir
    from biocheck.train.demos import choose, cites, demonstration
    from biocheck.train.env import make_env
    from biocheck.train.grpo import recorded_key
    from biocheck.train.sft import SFTConfig, train_sft

    sft_cfg = SFTConfig(**c.train.sft)
    if not sft_cfg.enabled:
        return c.model.out_dir, {}
    pool = demo_pool(c, train_recs)
    out, key = sft_cfg.out_dir, sft_key(c, prompts, base_fingerprint, [r.id for r in pool])
    state = PartialState()

    def current() -> bool:  # a damaged sft_key.json is another warm start: trained again, no traceback
        return is_model_dir(out) and recorded_key(out / SFT_KEY) == key

    if state.is_main_process and not current():
        claim_dir(out, *SFT_OUTPUT)  # before hours of training: a wrong train.sft.out_dir is refused now
        if out.exists():
            log.info("%s holds a warm start of other inputs; training it again", out)
        base = c.model.out_dir
        tok = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base)
        env = make_env(tool, prompts, c.agent.max_searches, c.agent.abstract_chars)
        corpus = {d.id: d for d in load_corpus(c.prepared)}
        built = [(r, demonstration(r, env, corpus, c.agent.max_searches, sft_cfg.query)) for r in pool]
        chosen = choose(built, sft_cfg.demos, sft_cfg.max_examples, sft_cfg.nei_examples, seed=c.train.seed)
        convs = [prompts.messages(r.claim) + messages for r, messages in chosen]
        stats = train_sft(model, tok, convs, sft_cfg, tools=[prompts.tool_schema()], seed=c.train.seed,
                          progress=progress)
        stats["demonstrations"] = dict(Counter(r.label.value for r, _ in chosen))  # by gold label
        stats["citing"] = sum(cites(m) for _, m in chosen)  # demonstrations that quote evidence
        with output_dir(out, *SFT_OUTPUT) as tmp:  # a kill mid-save leaves the old folder (or none), never half of one
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            # same inputs, same bytes (a DVC output hashed on every machine): the time goes to the log only
            write_json_atomic(tmp / SFT_STATS, {k: v for k, v in stats.items() if k != "seconds"})
            write_json_atomic(tmp / SFT_KEY, {"key": key}, indent=None)
        log.info("SFT warm start: %s -> %s", stats, out)
    state.wait_for_everyone()
    stats_file = out / SFT_STATS
    return out, json.loads(stats_file.read_text()) if stats_file.is_file() else {}


def sft(c: TrainSetup, progress: bool = True) -> dict[str, Any]:
    """`biocheck sft`: the warm start every reward variant's GRPO begins from (train.sft.out_dir). With
    train.sft.enabled false the folder only records that (DVC needs the stage's output)."""
    from biocheck.data.prepare import load_split
    from biocheck.llm.load import check_model_dir, model_fingerprint
    from biocheck.outputs import output_dir
    from biocheck.train.sft import SFTConfig
    from biocheck.wiring import make_prompts, make_search_tool

    _quiet_transformers(progress)
    sft_cfg = SFTConfig(**c.train.sft)
    if not sft_cfg.enabled:
        with output_dir(sft_cfg.out_dir, *SFT_OUTPUT) as tmp:
            write_json_atomic(tmp / SFT_STATS, {"enabled": False}, indent=None)
        return {"enabled": False, "out_dir": str(sft_cfg.out_dir)}
    train_recs = load_split("scifact", "train", c.prepared)
    tool = make_search_tool(c.search)
    prompts = make_prompts(c.agent, tool)
    check_model_dir(c.model.out_dir)
    out, stats = warm_start(c, prompts, tool, model_fingerprint(c.model.out_dir), train_recs, progress=progress)
    return {"enabled": True, "out_dir": str(out), **stats}


def make_bank(c: TrainSetup, records: list | None = None):
    """The reward bank; `records` (the training and validation claims): their gold papers, for the funnel."""
    from biocheck.train.reward_funcs import RewardBank
    from biocheck.wiring import make_judge

    gold = {}
    wanted = {e.doc_id for r in records or () for e in r.evidence}
    if wanted:
        from biocheck.data.prepare import load_corpus
        from biocheck.rewards.funnel import gold_papers

        sentences = {d.id: d.abstract for d in load_corpus(c.prepared) if d.id in wanted}
        gold = {r.id: gold_papers(r.evidence, sentences.get, where=f"claim {r.key}") for r in records if r.evidence}
    # The judge also runs for outcome_only: its components are logged (weight 0) for the comparison.
    return RewardBank(c.reward, make_judge(c.judge), gold=gold)


@contextlib.contextmanager
def _no_run(*_args: Any, **_kwargs: Any) -> Iterator[None]:
    """No MLflow run: a process other than the first under a multi-process launcher."""
    yield None


def finished(ckpt: Path, max_steps: int) -> dict[str, Any] | None:
    """The run's stats when checkpoint `ckpt` already holds `max_steps` steps (a finished run that DVC or a
    rerun asks for again), else None. train_loss: the mean loss over the steps, from the logged losses
    weighted by the steps each covers (the Trainer's `training_loss`)."""
    from biocheck.train.select import log_history

    history = log_history(ckpt, "re-run `biocheck train`")
    steps = max((int(h.get("step", 0)) for h in history), default=0)
    if steps < max_steps:
        return None
    losses, last, total = [h for h in history if "loss" in h], 0, 0.0
    for h in losses:
        total += float(h["loss"]) * (int(h["step"]) - last)
        last = int(h["step"])
    evals = [h for h in history if "eval_reward" in h]
    return {"steps": steps, "train_loss": total / last if last else None,
            "eval_reward_start": evals[0]["eval_reward"] if evals else None,
            "eval_reward_last": evals[-1]["eval_reward"] if evals else None}


def train(c: TrainSetup, progress: bool = True) -> dict[str, Any]:
    """Run one training run as `c` describes it (built from params by `biocheck.pipeline.train_setup`)."""
    from accelerate import PartialState
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from biocheck.data.prepare import load_split
    from biocheck.llm.load import check_model_dir, model_fingerprint
    from biocheck.params import plain
    from biocheck.train.callbacks import SampleEpisodes
    from biocheck.train.dataset import to_dataset
    from biocheck.train.env import env_factory
    from biocheck.train.grpo import latest_checkpoint, make_trainer, prepare_out_dir
    from biocheck.wiring import make_prompts, make_search_tool

    _quiet_transformers(progress)
    cfg, agent_cfg = c.train, c.agent
    base = c.model.out_dir
    split = load_split("scifact", "train", c.prepared)
    val_recs = load_split("scifact", "val", c.prepared)
    tool = make_search_tool(c.search)
    prompts = make_prompts(agent_cfg, tool)
    train_recs = training_claims(c, split, tool, prompts)  # train.curriculum; the warm start's demos use `split`
    check_model_dir(base)  # weights cut short: one line naming the file, before any work
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
    if resume:  # a damaged checkpoint is one line naming its file here, not a traceback from the Trainer
        from biocheck.train.select import check_resume

        check_resume(resume)

    start, sft_stats = warm_start(c, prompts, tool, base_fingerprint, split, progress=progress)
    done = finished(resume, cfg.max_steps) if resume else None
    if done is not None:  # resuming a finished run would train steps past max_steps (the Trainer runs one more)
        log.info("%s already holds all %d steps of this run: nothing to train", resume, cfg.max_steps)
        stats = {**done, "resumed_from": str(resume), "sft": sft_stats}
        if cfg.metrics_path and main:
            write_json_atomic(cfg.metrics_path, {k: v for k, v in stats.items() if k not in ("sft", "resumed_from")})
        return stats

    check_model_dir(start)
    tokenizer = AutoTokenizer.from_pretrained(start)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(start)
    bank = make_bank(c, train_recs + val_recs)
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
                               progress=progress, turn_tokens=agent_cfg.max_new_tokens)
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
