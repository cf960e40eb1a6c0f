"""`biocheck judge train`: train the evidence judge on SciFact train pairs, measure it on SciFact test pairs.

Two recipes, both a frozen backbone read by a small fit (one forward pass per training pair, no backward):
- `head` (head.py): the answer tokens' rows of the LM head fitted to the last position's state of the layer
  that cross-validates best; the judge is an ordinary checkpoint answering the prompt's label word.
- `align` (align.py, rewards/judge/align_judge.py): how well the claim's tokens are matched by the paper's
  tokens in a layer's states (15 numbers) and negation/direction cues of the claim and its best-matched
  sentences (15 more, rewards/judge/cues.py), a logistic regression over them; the judge is the cut checkpoint
  plus `judge_head.json`. On SmolLM2 it is the recipe that judges (docs/rewards.md).
Both pick the layer (and `align` its L2 weight) by cross-validation grouped by claim, then cut the model to
that layer. Why not fine-tuning: on 2 CPU cores full fine-tuning of SmolLM2 on the answer token ran ~15 s per
step of 8 pairs and stayed near the majority class after two epochs; measured numbers are in docs/rewards.md.

Output: an ordinary checkpoint folder (written atomically) that `transformers:<out_dir>` loads unchanged, with
`judge_train.json` (config, pair counts, chosen layer, metrics) inside, and the test metrics as a DVC metrics
file. The judge protocol, prompt and cache are those of every other judge.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.bounds import Count, NonNegative
from biocheck.io import write_json_atomic
from biocheck.labels import LABELS
from biocheck.outputs import claim_dir, output_dir
from biocheck.params import plain
from biocheck.rewards.judge.align_judge import batch_features, prompt_rows
from biocheck.rewards.judge.base import DEFAULT_MAX_ABSTRACT_CHARS, KEYS
from biocheck.rewards.judge_train import align, head
from biocheck.rewards.judge_train.evaluate import evaluate_judge, score_metrics
from biocheck.rewards.judge_train.pairs import (
    LEVELS,
    JudgeDataError,
    JudgePair,
    build_pairs,
    claim_folds,
    label_counts,
    read_claims,
    read_corpus,
)

log = logging.getLogger(__name__)
STATS_FILE = "judge_train.json"
# Who may replace judge_train.out_dir (biocheck.outputs), how the user names it, an unmarked older output.
OUTPUT = ("biocheck judge train", "--out-dir / judge.out_dir (judge.eqs.out_dir with --eqs)", (STATS_FILE,))
RECIPES = ("head", "align")
TEST_SEED = 0  # which test pairs a judge is measured on (a sample where eval_max_pairs or sentence level asks)


@dataclass
class JudgeTrainConfig:
    """params.yaml `judge:`; every field of a training run."""

    train: bool = True  # false: no training; measure `base` zero-shot (the paper's judge) and write only the stats
    base: Path = Path("models/base")  # the backbone (a local checkpoint folder or hub id)
    recipe: str = "head"  # head: LM-head rows on the last state | align: token alignment features + classifier
    prepared_dir: Path = Path("data/prepared")
    out_dir: Path = Path("models/judge")
    metrics_path: Path | None = Path("metrics/judge.json")
    level: str = "abstract"  # abstract | sentence: what a training (and test) pair shows the judge
    bm25_per_claim: NonNegative = 1  # BM25-retrieved, non-cited documents per claim as NEI pairs
    balance: bool = True  # each label as many pairs as the rarest has | false: as SciFact has them (2 S : 1 R)
    max_pairs_per_label: Count | None = None  # a cap per label after balancing; None = no cap
    train_max_abstract_chars: Count = 1500  # shorter training prompts: the forward passes are the cost
    eval_max_abstract_chars: Count = DEFAULT_MAX_ABSTRACT_CHARS  # as the judge reads papers in the reward
    eval_max_pairs: Count | None = None  # a seeded sample of the test pairs; None = all
    layer: Count | None = None  # the layer the head reads (1-based); None = the best by cross-validation
    folds: Count = 4
    weight_decay: float = 0.03  # L2 pull towards the original rows (best by cross-validation, SmolLM2)
    steps: Count = 100  # L-BFGS iterations of the head fit
    batch_size: Count = 4  # prompts per forward pass
    seed: int = 0
    threshold: float = 0.5  # the reward's: a pair counts when its top s exceeds it (reported, not trained)
    zero_shot: bool = False  # also measure the untrained base as judge on the test pairs (one more pass)
    # The second judge, which scores EQS at evaluation and never trains the policy (evaluate.eqs_judge): these
    # keys of this section changed (out_dir required, e.g. {out_dir: models/judge_eqs, seed: 1, balance: true}).
    eqs: dict[str, Any] | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        self.base, self.prepared_dir, self.out_dir = Path(self.base), Path(self.prepared_dir), Path(self.out_dir)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None
        if self.recipe not in RECIPES:
            raise ValueError(f"judge.recipe: {self.recipe!r} must be one of {list(RECIPES)}")
        if self.level not in LEVELS:
            raise ValueError(f"judge.level: {self.level!r} must be one of {list(LEVELS)}")


def _features(judge: Any, pairs: list[JudgePair], chars: int, cfg: JudgeTrainConfig):
    judge.max_abstract_chars = chars
    rows = [judge.prompt_ids(p.claim, p.article()) for p in pairs]
    x = head.last_states(judge.model, rows, judge.pad_id, cfg.batch_size, cfg.progress)
    return x, head.other_lse(judge.model, x, [judge.answer_ids[k] for k in KEYS])


def _targets(pairs: list[JudgePair]):
    import torch

    return torch.tensor([KEYS.index(p.label) for p in pairs], dtype=torch.long)


def _fit(x, lse, y, init, cfg: JudgeTrainConfig):
    return head.fit_head(x, lse, y, init, cfg.weight_decay, cfg.steps)


def choose_layer(x, lse, y, groups: list[str], init, cfg: JudgeTrainConfig) -> tuple[int, dict[int, float]]:
    """1-based layer with the best grouped k-fold accuracy (a claim's pairs stay in one fold), ties -> deeper."""
    import torch

    fold = torch.tensor(claim_folds(groups, cfg.folds, cfg.seed))
    accuracy = {}
    for layer in range(x.shape[1]):
        correct = 0
        for f in range(cfg.folds):
            tr, te = fold != f, fold == f
            if not te.any() or not tr.any():
                continue
            w, _ = _fit(x[tr, layer], lse[tr, layer], y[tr], init, cfg)
            correct += int((head.head_probs(x[te, layer], lse[te, layer], w).argmax(-1) == y[te]).sum())
        accuracy[layer + 1] = correct / len(groups)
    best = max(accuracy, key=lambda k: (round(accuracy[k], 6), k))
    return best, accuracy


def _write_checkpoint(judge: Any, w, layer: int, cfg: JudgeTrainConfig, stats: dict) -> None:
    head.install_head(judge.model, w, [judge.answer_ids[k] for k in KEYS], layer)
    with output_dir(cfg.out_dir, *OUTPUT) as tmp:
        judge.model.save_pretrained(tmp)
        judge.tokenizer.save_pretrained(tmp)
        write_json_atomic(tmp / STATS_FILE, stats)


def train_judge(cfg: JudgeTrainConfig) -> dict[str, Any]:
    """Build pairs, fit the head, write the judge, measure it on test pairs; returns the stats (also written)."""
    import torch

    from biocheck.rewards.judge import TransformersJudge, make_judge

    started = time.perf_counter()
    claim_dir(cfg.out_dir, *OUTPUT)  # before the pairs and the fit: a wrong judge.out_dir is refused now
    corpus = read_corpus(cfg.prepared_dir)
    train_claims = read_claims(cfg.prepared_dir, "train")
    test_claims = read_claims(cfg.prepared_dir, "test")
    if not train_claims or not test_claims:
        raise JudgeDataError(f"{cfg.prepared_dir}/full/scifact.jsonl has {len(train_claims)} train and "
                             f"{len(test_claims)} test claims; both are needed. Re-run `biocheck data prepare`.")
    train = build_pairs(train_claims, corpus, level=cfg.level, bm25_per_claim=cfg.bm25_per_claim,
                        balance=cfg.balance, max_per_label=cfg.max_pairs_per_label, seed=cfg.seed) if cfg.train else []
    # measured on what it will read: a sentence judge (reward.judge_reads: quote) on single sentences, whose NEI
    # sentences (~40 per rationale one) are down-sampled to the rarest label so that recall per label is read.
    # The test sample's seed is fixed, not the judge's: judges of other seeds are measured on the same pairs (the
    # NEI sample alone moved one judge's accuracy from 0.54 to 0.46).
    test = build_pairs(test_claims, corpus, level=cfg.level, bm25_per_claim=0, balance=cfg.level == "sentence",
                       seed=TEST_SEED, split="test")
    if cfg.eval_max_pairs and len(test) > cfg.eval_max_pairs:
        test = random.Random(TEST_SEED).sample(test, cfg.eval_max_pairs)
    log.info("judge pairs: train %s, test %s", label_counts(train), label_counts(test))

    torch.manual_seed(cfg.seed)
    judge = TransformersJudge(str(cfg.base), batch_size=cfg.batch_size, max_abstract_chars=cfg.eval_max_abstract_chars)
    stats: dict[str, Any] = {"config": plain(cfg), "pairs": {"train": label_counts(train), "test": label_counts(test)}}
    if not cfg.train:
        return _zero_shot_only(judge, test, stats, cfg, started)
    if cfg.zero_shot:
        stats["zero_shot"] = _strip(evaluate_judge(judge, test, cfg.threshold))

    n_layers = len(head.backbone(judge.model)[0])
    if cfg.layer is not None:  # a fixed layer: cut first, so the forward passes stop there
        head.cut_layers(judge.model, min(cfg.layer, n_layers))
    if cfg.recipe == "align":
        _train_align(judge, train, cfg, stats, n_layers)
    else:
        _train_head(judge, train, cfg, stats, n_layers)

    trained = make_judge(f"transformers:{cfg.out_dir}", batch_size=cfg.batch_size,
                         max_abstract_chars=cfg.eval_max_abstract_chars)
    stats["test"] = evaluate_judge(trained, test, cfg.threshold)
    stats["seconds"] = round(time.perf_counter() - started, 1)
    write_outputs(cfg, stats)
    log.info("judge: test accuracy %.3f macro-F1 %.3f (majority %.3f) in %.0fs", stats["test"]["accuracy"],
             stats["test"]["macro_f1"], stats["test"]["majority_accuracy"], stats["seconds"])
    return stats


def _train_head(judge: Any, train: list[JudgePair], cfg: JudgeTrainConfig, stats: dict[str, Any], n_layers: int) -> None:
    x, lse = _features(judge, train, cfg.train_max_abstract_chars, cfg)
    y = _targets(train)
    init = judge.model.get_output_embeddings().weight.detach()[[judge.answer_ids[k] for k in KEYS]].float()
    if cfg.layer is None:
        layer, cv = choose_layer(x, lse, y, [p.claim_id for p in train], init, cfg)
    else:
        layer, cv = x.shape[1], {}
    w, losses = _fit(x[:, layer - 1], lse[:, layer - 1], y, init, cfg)
    train_scores = _as_scores(head.head_probs(x[:, layer - 1], lse[:, layer - 1], w))
    stats.update({"layer": layer, "layers": n_layers, "cv_accuracy": cv,
                  "loss": {"first": losses[0], "last": losses[-1]},
                  "train": _strip(score_metrics([p.label for p in train], train_scores, cfg.threshold))})
    _write_checkpoint(judge, w, layer, cfg, stats)


def _train_align(judge: Any, train: list[JudgePair], cfg: JudgeTrainConfig, stats: dict[str, Any], n_layers: int) -> None:
    rows = [prompt_rows(judge.tokenizer, p.claim, p.article(), cfg.train_max_abstract_chars) for p in train]
    x = batch_features(judge.model, rows, judge.pad_id, cfg.batch_size, progress=cfg.progress)
    y = _targets(train)
    fixed = [x.shape[1]] if cfg.layer is not None else None
    layer, l2, cv = align.choose(x, y, claim_folds([p.claim_id for p in train], cfg.folds, cfg.seed), fixed)
    fitted = align.fit(x[:, layer - 1], y, l2, layer)
    train_scores = _as_scores(fitted.probs(x[:, layer - 1]))
    stats.update({"layer": layer, "layers": n_layers, "l2": l2, "cv_accuracy": cv,
                  "train": _strip(score_metrics([p.label for p in train], train_scores, cfg.threshold))})
    head.cut_layers(judge.model, layer)
    with output_dir(cfg.out_dir, *OUTPUT) as tmp:
        judge.model.save_pretrained(tmp)
        judge.tokenizer.save_pretrained(tmp)
        fitted.save(tmp)
        write_json_atomic(tmp / STATS_FILE, stats)


def _zero_shot_only(judge: Any, test: list[JudgePair], stats: dict[str, Any], cfg: JudgeTrainConfig,
                    started: float) -> dict[str, Any]:
    """judge.train false: the base model is the judge (as in the paper); measure it and record that, no weights."""
    stats["test"] = evaluate_judge(judge, test, cfg.threshold)
    stats["zero_shot"] = _strip(stats["test"])
    stats.update({"layer": None, "seconds": round(time.perf_counter() - started, 1)})
    with output_dir(cfg.out_dir, *OUTPUT) as tmp:  # a stats file only: reward.judge must name the base, not this folder
        write_outputs(cfg, stats, tmp)
    log.info("judge (zero-shot %s): test accuracy %.3f macro-F1 %.3f (majority %.3f)", cfg.base,
             stats["test"]["accuracy"], stats["test"]["macro_f1"], stats["test"]["majority_accuracy"])
    return stats


def _as_scores(probs) -> list[dict[str, float]]:
    return [dict(zip(KEYS, row, strict=True)) for row in probs.tolist()]


def write_outputs(cfg: JudgeTrainConfig, stats: dict[str, Any], folder: Path | None = None) -> None:
    """The stats beside the judge (in `folder`, default judge.out_dir) and the metrics file, without the run's
    seconds: both are DVC outputs, and the same inputs must give the same bytes on any machine (the time goes to
    the log and MLflow)."""
    kept = {k: v for k, v in stats.items() if k != "seconds"}
    write_json_atomic((folder or cfg.out_dir) / STATS_FILE, kept)
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, metrics_of(kept))


def _strip(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "confusion"}


def metrics_of(stats: dict[str, Any]) -> dict[str, Any]:
    """The DVC metrics file: flat numbers for `dvc metrics show/diff`."""
    t = stats["test"]
    out = {"accuracy": t["accuracy"], "macro_f1": t["macro_f1"], "ece": t["ece"], "majority_accuracy":
           t["majority_accuracy"], "above_threshold": t["above_threshold"], "answer_mass": t["answer_mass"],
           **{f"recall_{label}": t["recall"][label] for label in LABELS}, "n_test": t["n"],
           "n_train": sum(stats["pairs"]["train"].values()), "layer": stats["layer"] or 0,
           "trained": int(stats["config"].get("train", True))}
    if "zero_shot" in stats:
        out.update({"zero_shot_accuracy": stats["zero_shot"]["accuracy"],
                    "zero_shot_macro_f1": stats["zero_shot"]["macro_f1"]})
    return out
