"""Where a GRPO step's time goes: N steps of the pipeline's own training, timed by phase.

    python bench/grpo_profile.py --torch-profile             # the params.yaml profile, 3 steps + 1 profiled
    python bench/grpo_profile.py --params profiles/smol.yaml --steps 2 --label smol
    python bench/grpo_profile.py --compare baseline fast    # two speed settings side by side, A B A B

It runs `biocheck.pipeline.train_stage` (the SFT warm start, the trainer, the rollouts, the rewards, validation
and checkpoints exactly as `dvc repro` runs them) into a scratch folder, with timers around the methods each
phase is made of (nothing in the package is changed; the timers wrap them from outside):

  generation/turn<k>   the k-th model turn of every rollout in the batch (turn 0: the first answer)
  tool                 search_pubmed calls (the search index, the excerpt, the budget)
  reward               the reward functions, of which `judge` is the judge's scoring
  logprobs             the no-grad forward passes GRPO makes over the rollouts (old / reference log-probs)
  forward, backward    the loss's forward pass (with gradients) and its backward pass
  optimizer            the optimizer step
  validation           a whole validation pass (its own generation and rewards are counted there, not above)
  checkpoint           saving a checkpoint

Per step it also records the tokens generated and the process's peak RSS (getrusage); with --torch-profile, one
extra step (not in the timings) runs under torch's profiler: the top operators by self CPU time, and with --trace
a Chrome trace (the quickstart only: on SmolLM2 a whole step's events outgrew 24 GB).
Needs the profile's data, index, base model, judge and warm start (`dvc repro sft judge`; the quickstart's take a
minute). Writes OUT (default bench/results/grpo_profile.json, one entry per --label, others kept).

--compare runs each named speed setting (SETTINGS below) in its own process, in the order A B A B ... (--rounds),
so drift on a noisy machine hits every setting alike; the ratio is of per-step medians, and `totals` adds the
ratio of all steps' seconds, paired by step (step k trains on the same claim in every setting), with a bootstrap
interval over those steps. --seed sets train.seed for every run: the same claims, other sampled episodes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/grpo_profile.json"

# Speed settings --compare can name: params overrides by dotted key, and environment variables for the run's
# process, and `rev`: the params file as git holds it at that commit. "baseline" is the params file as it is.
# "old" is the start of issue 32: its params file, and the old code path where a setting selects it (a model
# turn could run to max_completion_length: agent.max_new_tokens set to it gives TRL's own per-turn limit).
OLD_REV = "604ed67"
SETTINGS: dict[str, dict[str, Any]] = {
    "baseline": {},
    "old": {"rev": OLD_REV, "params": {"agent.max_new_tokens": "train.max_completion_length",
                                       "train.share_prompt": False, "train.prompt_cache": False,
                                       "train.loss_tokens_only": False, "train.cdf_sampling": False}},
    "threads1": {"env": {"OMP_NUM_THREADS": "1"}},
    # bf16 autocast (train.bf16): fp32 master weights, matmuls in bf16 (3x fp32's rate on an avx512_bf16 CPU)
    "bf16": {"params": {"train.bf16": True}},
    # the loss's forward/backward one episode at a time (the same 4 episodes generated as one batch): no padding
    # to the longest episode, a quarter of the activations; optimizer steps unchanged
    "bf16_accum": {"params": {"train.bf16": True, "train.per_device_train_batch_size": 1,
                              "train.gradient_accumulation_steps": "train.num_generations"}},
    # ... and no activation checkpointing (the backward pass no longer recomputes the forward)
    "bf16_accum_nockpt": {"params": {"train.bf16": True, "train.per_device_train_batch_size": 1,
                                     "train.gradient_accumulation_steps": "train.num_generations",
                                     "train.gradient_checkpointing": False}},
    # rollouts from a bfloat16 copy of the policy (synced after each optimizer step) with a preallocated KV
    # cache: no weight casts under autocast and no cache concatenation at every token
    "gencopy": {"params": {"train.generation_dtype": "bfloat16"}},
    "static": {"params": {"train.cache_implementation": "static"}},
    "gencopy_static": {"params": {"train.generation_dtype": "bfloat16", "train.cache_implementation": "static"}},
    # ... and the same as the profile's own setting, to compare with an older one
    "no_gencopy": {"params": {"train.generation_dtype": None, "train.cache_implementation": None}},
    # the loss runs every episode whole (TRL's own forward), not the group's shared prompt once a step
    "no_share": {"params": {"train.share_prompt": False}},
    # rollouts generate every turn from scratch (TRL's own), not from the rows' shared prompt's cache
    "no_prompt_cache": {"params": {"train.prompt_cache": False}},
    # the shared prompt's loss with TRL's head over every completion position, the search results included
    "no_loss_only": {"params": {"train.loss_tokens_only": False}},
    # rollouts sample with torch.multinomial (transformers' own), not one uniform a row
    "no_cdf_sampling": {"params": {"train.cdf_sampling": False}},
    # neither: the profile as it was before both
    "no_prefix": {"params": {"train.share_prompt": False, "train.prompt_cache": False}},
}


def apply(params: dict, overrides: dict[str, Any]) -> dict:
    """A copy of `params` with each dotted key set; a value naming another dotted key takes that key's value."""
    import copy

    out = copy.deepcopy(params)

    def get(key: str) -> Any:
        node: Any = out
        for part in key.split("."):
            node = node[part]
        return node

    for key, value in overrides.items():
        if isinstance(value, str) and "." in value and value.split(".")[0] in out:
            value = get(value)
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


class Phases:
    """Inclusive wall time per phase name, per step; phases inside validation are counted as validation."""

    def __init__(self) -> None:
        self.step: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.tokens = 0
        self.depth: dict[str, int] = defaultdict(int)
        self.in_validation = False
        self.turn = 0

    @contextlib.contextmanager
    def timed(self, name: str):
        if self.in_validation and name != "validation":
            yield
            return
        self.depth[name] += 1  # a phase re-entered (a wrapper calling its parent) is counted once
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.depth[name] -= 1
            if not self.depth[name]:
                self.step[name] += time.perf_counter() - t0
                self.counts[name] += 1

    def take(self) -> tuple[dict[str, float], dict[str, int], int]:
        out = dict(self.step), dict(self.counts), self.tokens
        self.step, self.counts, self.tokens = defaultdict(float), defaultdict(int), 0
        return out


def wrap(owner: Any, attr: str, phase_of) -> None:
    """Time `owner.attr` under the phase `phase_of(self, *args)` names (a string or None: not timed)."""
    fn = getattr(owner, attr)

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        name = phase_of(*args, **kwargs)
        if name is None:
            return fn(*args, **kwargs)
        with PHASES.timed(name):
            return fn(*args, **kwargs)

    setattr(owner, attr, timed)


PHASES = Phases()
BEFORE: dict[str, float] = {}  # what ran before the first step (the start's validation)


def rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 / 1024  # Linux: KiB


def install(steps: list[dict], torch_profile_step: int | None, trace: Path | None, top_ops: list) -> None:
    """Wrap the methods each phase is made of, and add a callback that closes each step."""
    import accelerate
    import torch
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    import biocheck.train.grpo as grpo
    from biocheck.rewards.judge.base import Judge  # noqa: F401  (the protocol; judges are wrapped per instance)
    from biocheck.train.env import SearchEnv
    from biocheck.train.prefix import SharedPrefixMixin
    from biocheck.train.reward_funcs import RewardBank

    def turn_phase(self, *args, **kwargs):
        name = f"generation/turn{PHASES.turn}"
        PHASES.turn += 1
        return name

    orig_single = GRPOTrainer._generate_single_turn

    def single_turn(self, prompt_ids, *args, **kwargs):
        out = orig_single(self, prompt_ids, *args, **kwargs)
        if not PHASES.in_validation:
            PHASES.tokens += sum(len(c) for c in out[0])
        return out

    GRPOTrainer._generate_single_turn = single_turn
    wrap(GRPOTrainer, "_generate_single_turn", turn_phase)

    orig_generate = GRPOTrainer._generate

    def generate(self, prompts):
        PHASES.turn = 0
        return orig_generate(self, prompts)

    GRPOTrainer._generate = generate
    wrap(SearchEnv, "search_pubmed", lambda *a, **k: "tool")
    wrap(GRPOTrainer, "_get_per_token_logps_and_entropies",
         lambda self, *a, **k: None if torch.is_grad_enabled() else "logprobs")
    wrap(GRPOTrainer, "compute_loss", lambda *a, **k: "forward")
    wrap(accelerate.Accelerator, "backward", lambda *a, **k: "backward")
    wrap(SharedPrefixMixin, "flush_prefixes", lambda *a, **k: "backward")  # the shared prompt's backward pass
    wrap(GRPOTrainer, "_save_checkpoint", lambda *a, **k: "checkpoint")

    orig_breakdowns = RewardBank._breakdowns

    def breakdowns(self, *args, **kwargs):
        judge = self.judge
        if judge is not None and not getattr(judge, "_profiled", False):
            wrap(judge, "score", lambda *a, **k: "judge")  # the instance's bound method
            judge._profiled = True
        return orig_breakdowns(self, *args, **kwargs)

    RewardBank._breakdowns = breakdowns
    orig_component = RewardBank._component

    def component(self, name):
        fn = orig_component(self, name)

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            with PHASES.timed("reward"):
                return fn(*args, **kwargs)

        return timed

    RewardBank._component = component

    orig_evaluate = GRPOTrainer.evaluate

    def evaluate(self, *args, **kwargs):
        with PHASES.timed("validation"):
            PHASES.in_validation = True
            try:
                return orig_evaluate(self, *args, **kwargs)
            finally:
                PHASES.in_validation = False

    GRPOTrainer.evaluate = evaluate

    def pre_opt(*_a, **_k):
        PHASES._opt0 = time.perf_counter()

    def post_opt(*_a, **_k):
        if not PHASES.in_validation:
            PHASES.step["optimizer"] += time.perf_counter() - PHASES._opt0
            PHASES.counts["optimizer"] += 1

    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    register_optimizer_step_pre_hook(pre_opt)
    register_optimizer_step_post_hook(post_opt)

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = 0.0
            self.prof = None

        def on_step_begin(self, args, state, control, **kw):
            # validation and checkpoints of the previous step land between its end and this begin
            between, _, _ = PHASES.take()
            if between:  # before the first step: the start's validation
                (steps[-1].setdefault("after", {}) if steps else BEFORE).update(between)
            if torch_profile_step is not None and state.global_step == torch_profile_step:
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                self.prof.__enter__()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            total = time.perf_counter() - self.t0
            phases, counts, tokens = PHASES.take()
            if self.prof is not None:
                self.prof.__exit__(None, None, None)
                table = self.prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
                top_ops.append(table)
                if trace is not None:
                    trace.parent.mkdir(parents=True, exist_ok=True)
                    self.prof.export_chrome_trace(str(trace))
                self.prof = None
                return  # the profiled step is slower: not a timing sample
            steps.append({"step": state.global_step, "seconds": round(total, 3), "tokens": tokens,
                          "phases": {k: round(v, 3) for k, v in sorted(phases.items())},
                          "calls": dict(sorted(counts.items())), "peak_rss_gb": round(rss_gb(), 2)})
            print(json.dumps({"step": state.global_step, "seconds": round(total, 1), "tokens": tokens,
                              "peak_rss_gb": round(rss_gb(), 2)}), file=sys.stderr, flush=True)

    orig_make = grpo.make_trainer

    def make_trainer(*args, **kwargs):
        kwargs["callbacks"] = [*(kwargs.get("callbacks") or []), StepClock()]
        return orig_make(*args, **kwargs)

    grpo.make_trainer = make_trainer


def summarise(steps: list[dict], after: dict[str, list[float]]) -> dict:
    """Medians over the timed steps (the first step pays one-off costs: reported apart)."""
    timed = steps[1:] if len(steps) > 1 else steps
    names = sorted({k for s in timed for k in s["phases"]})
    med = {k: round(statistics.median(s["phases"].get(k, 0.0) for s in timed), 3) for k in names}
    step = statistics.median(s["seconds"] for s in timed)
    top = {k: v for k, v in med.items() if "/" not in k or k.startswith("generation/")}
    generation = sum(v for k, v in med.items() if k.startswith("generation/"))
    # reward holds judge; forward holds the loss's log-prob pass; the rest of the step is TRL's bookkeeping
    accounted = generation + sum(med.get(k, 0.0) for k in ("tool", "reward", "logprobs", "forward", "backward",
                                                          "optimizer"))
    return {"steps_timed": len(timed), "step_s": round(step, 3), "first_step_s": steps[0]["seconds"],
            "generation_s": round(generation, 3), "phases_s": top, "other_s": round(step - accounted, 3),
            "tokens": statistics.median(s["tokens"] for s in timed),
            "tokens_per_s_generation": round(statistics.median(s["tokens"] for s in timed) / generation, 1)
            if generation else None,
            "validation_s": [round(v, 3) for v in after.get("validation", [])],
            "checkpoint_s": [round(v, 3) for v in after.get("checkpoint", [])],
            "peak_rss_gb": max(s["peak_rss_gb"] for s in steps)}


def paired_totals(base: list[dict], other: list[dict]) -> dict:
    """All steps of `base`'s runs against `other`'s, paired by round and step (step k trains on the same claim in
    every setting): the seconds and tokens of all of them, the ratio of the totals (base / other: a speed-up above
    1), each step's ratio, and a 95% bootstrap interval of the ratio of totals over the paired steps."""
    from scipy import stats

    pairs = [(x, y) for rb, ro in zip(base, other, strict=False) if "steps" in rb and "steps" in ro
             for x, y in zip(rb["steps"], ro["steps"], strict=False)]
    b = [x["seconds"] for x, _ in pairs]
    o = [y["seconds"] for _, y in pairs]
    out = {"steps": len(pairs), "seconds": [round(sum(b), 1), round(sum(o), 1)],
           "tokens": [sum(x["tokens"] for x, _ in pairs), sum(y["tokens"] for _, y in pairs)],
           "ratio": round(sum(b) / sum(o), 3), "step_ratios": [round(x / y, 2) for x, y in zip(b, o, strict=True)]}
    if len(pairs) >= 3:  # a steps' resampling says how much the total rests on which claims came up
        ci = stats.bootstrap((b, o), lambda x, y: sum(x) / sum(y), paired=True, vectorized=False,
                             n_resamples=2000, random_state=0, method="percentile").confidence_interval
        out["ratio_95ci"] = [round(float(ci.low), 3), round(float(ci.high), 3)]
    return out


def run_one(params_path: Path, steps_n: int, setting: str, trace: Path | None, torch_profile: bool,
            validate_start: bool, seed: int | None = None) -> dict:
    """One training run of `steps_n` steps (plus one profiled step) in a scratch folder; its timings."""
    os.environ.setdefault("BIOCHECK_TRACKING", "off")
    from biocheck.params import load_params
    from biocheck.pipeline import train_stage

    overrides = dict(SETTINGS[setting].get("params", {}))
    steps: list[dict] = []
    top_ops: list[str] = []
    extra = 1 if torch_profile else 0
    install(steps, steps_n if torch_profile else None, trace, top_ops)
    with tempfile.TemporaryDirectory(prefix="grpo_profile_") as tmp:
        n = steps_n + extra
        # one validation and one checkpoint, after the last step (and with `validate_start`, the start's
        # validation, as the pipeline runs it); the SFT warm start is the pipeline's own: nothing trained twice
        if SETTINGS[setting].get("rev"):  # the params file as it was at that commit
            rel = params_path.resolve().relative_to(ROOT)
            old = Path(tmp) / rel.name
            old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{SETTINGS[setting]['rev']}:{rel}"],
                                          check=True, stdout=subprocess.PIPE, text=True).stdout)
            params_path = old
        params = apply(load_params(params_path), {
            **overrides, **({"train.seed": seed} if seed is not None else {}), "train.out_dir": str(Path(tmp) / "ckpt"), "train.metrics_path": None, "train.max_steps": n,
            "train.eval_steps": n, "train.save_steps": n, "train.eval_on_start": validate_start})
        t0 = time.perf_counter()
        train_stage(params, progress=False)
        wall = time.perf_counter() - t0
    last, _, _ = PHASES.take()
    after: dict[str, list[float]] = defaultdict(list)
    for bucket in [BEFORE, *(s.pop("after", {}) for s in steps), last]:
        for k, v in bucket.items():
            if k in ("validation", "checkpoint"):
                after[k].append(v)
    return {"setting": setting, "overrides": overrides, "env": SETTINGS[setting].get("env", {}), "wall_s": round(wall, 1), "steps": steps,
            "summary": summarise(steps, after), "torch_top_ops": top_ops[0] if top_ops else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    ap.add_argument("--steps", type=int, default=3, help="timed steps per run (the first is reported apart)")
    ap.add_argument("--label", default=None, help="the entry's name in OUT (default: the params' profile)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--trace", type=Path, default=None, help="write the profiled step's Chrome trace here")
    ap.add_argument("--torch-profile", action="store_true",
                    help="one extra step under torch's profiler (the quickstart: a whole smol step's events filled "
                         "24 GB and the process was killed)")
    ap.add_argument("--compare", nargs="+", choices=sorted(SETTINGS), default=None,
                    help="speed settings to run side by side (each in its own process, A B A B ...)")
    ap.add_argument("--rounds", type=int, default=2, help="with --compare: runs of each setting")
    ap.add_argument("--seed", type=int, default=None,
                    help="train.seed for every run (default: the params'): other seeds sample other episodes")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a --compare child: one run, JSON on stdout
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be >= 1")

    if a.one:
        print(json.dumps(run_one(a.params, a.steps, a.one, None, torch_profile=False, validate_start=False,
                                 seed=a.seed)))
        return 0

    from biocheck.params import load_params

    label = a.label or load_params(a.params).get("profile", "params")
    if a.compare:
        runs: dict[str, list[dict]] = defaultdict(list)
        for r in range(a.rounds):
            for setting in a.compare:
                print(f"round {r + 1}/{a.rounds}: {setting}", file=sys.stderr, flush=True)
                cmd = [sys.executable, __file__, "--params", str(a.params), "--steps", str(a.steps), "--one", setting]
                cmd += ["--seed", str(a.seed)] if a.seed is not None else []
                env = {**os.environ, **SETTINGS[setting].get("env", {})}
                proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
                if proc.returncode:  # e.g. killed for memory: recorded, the other settings still run
                    print(f"{setting}: exited {proc.returncode}", file=sys.stderr, flush=True)
                    runs[setting].append({"setting": setting, "failed": proc.returncode})
                    continue
                runs[setting].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        base = a.compare[0]

        ok = [s for s in a.compare if any("summary" in x for x in runs[s])]

        def med(setting: str, key: str) -> float:
            return statistics.median(x["summary"][key] for x in runs[setting] if "summary" in x)

        entry = {"compare": a.compare, "rounds": a.rounds, "steps": a.steps, "runs": runs,
                 "step_s": {s: med(s, "step_s") for s in ok},
                 "speedup_vs_" + base: {s: round(med(base, "step_s") / med(s, "step_s"), 2) for s in ok}
                 if base in ok else {},
                 "peak_rss_gb": {s: max(x["summary"]["peak_rss_gb"] for x in runs[s] if "summary" in x) for s in ok},
                 "failed": {s: [x["failed"] for x in runs[s] if "failed" in x] for s in a.compare
                            if s not in ok},
                 "totals": {s: paired_totals(runs[base], runs[s]) for s in ok if s != base} if base in ok else {},
                 "seed": a.seed}
        label = f"{label}:compare:{'-vs-'.join(a.compare)}" + (f":seed{a.seed}" if a.seed is not None else "")
    else:
        entry = run_one(a.params, a.steps, "baseline", a.trace, torch_profile=a.torch_profile,
                        validate_start=False)
    entry.update({"params": str(a.params), "cpus": os.cpu_count(), "torch_threads": _threads(),
                  "date": time.strftime("%Y-%m-%d %H:%M:%S")})
    results = json.loads(a.out.read_text()) if a.out.is_file() else {}
    results[label] = entry
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in entry.items() if k not in ("runs", "steps", "torch_top_ops")}, indent=1))
    if entry.get("torch_top_ops"):
        print(entry["torch_top_ops"])
    return 0


def _threads() -> dict[str, int]:
    import torch

    return {"intra": torch.get_num_threads(), "interop": torch.get_num_interop_threads()}


if __name__ == "__main__":
    sys.exit(main())
