"""Issue 48, a judge lever: a fine-tuned cross-encoder against the align judge (plan: results/judge_finetune_plan.md).

The align judge is a logistic regression over 30 hand-made numbers; this one trains every weight of the backbone
with a 3-way classification head on the last token (transformers' *ForSequenceClassification), on the same
training pairs and the same judge prompt. The plan's rule, in order:

1. fit on folds 1-3 of the training pairs for EPOCHS epochs, accuracy on fold 0 after each; the align judge (the
   profile's layer and L2) fitted on the same folds, on fold 0; E = the best epoch;
2. a candidate only if its fold-0 accuracy beats the align judge's by MARGIN;
3. a candidate is refitted on every training pair for E epochs, then measured on the test pairs and re-scores
   the cached audits (nothing regenerated: bench/judge_ensemble.py's episodes);
4. it passes only if R_evidence varies in >= 0.5 of the groups for both labels on every audit.

    .venv/bin/python bench/judge_finetune.py --project ../smol --claims 16 32   # ~40 min on 2 idle cores
    .venv/bin/python bench/judge_finetune.py --table

Writes bench/results/judge_finetune.json (per-epoch accuracies, test metrics, per-group R_evidence) and keeps the
refitted judge in SCRATCH/judge_ft (a checkpoint with its head, loadable as AutoModelForSequenceClassification).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

EPOCHS, LR, WEIGHT_DECAY, BATCH, WARMUP, SEED = 4, 5e-5, 0.01, 8, 0.1, 0
MARGIN = 0.05
HELD_OUT = 0  # the fold the rule reads
LABELS = ("SUPPORTED", "REFUTED")


def texts(tokenizer: Any, pairs: list[tuple[str, Any]], chars: int) -> list[str]:
    """The judge prompt every judge reads (rewards/judge/judge_prompt.md through the chat template)."""
    from biocheck.rewards.judge.base import prompt_spans
    from biocheck.rewards.judge.transformers_judge import _chat

    return [_chat(tokenizer, prompt_spans(c, a, chars)[0], tokenize=False) for c, a in pairs]


def load(base: str) -> tuple[Any, Any]:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=3)
    model.config.pad_token_id = tok.pad_token_id
    return tok, model


@dataclasses.dataclass
class Classifier:
    tok: Any
    model: Any

    def probs(self, batch_texts: list[str], batch: int = 16) -> Any:
        import torch

        self.model.eval()
        out = []
        with torch.no_grad():
            order = sorted(range(len(batch_texts)), key=lambda i: len(batch_texts[i]))
            for i in range(0, len(order), batch):
                idx = order[i:i + batch]
                enc = self.tok([batch_texts[j] for j in idx], return_tensors="pt", padding=True,
                               add_special_tokens=False)
                out += list(zip(idx, self.model(**enc).logits.softmax(-1), strict=True))
        return torch.stack([p for _, p in sorted(out, key=lambda t: t[0])])


def train(base: str, x: list[str], y: Any, epochs: int, evals: dict[str, tuple[list[str], Any]]
          ) -> tuple[Classifier, list[dict[str, float]]]:
    """Fine-tune for `epochs`, the accuracy on each eval set after every epoch."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    torch.manual_seed(SEED)
    tok, model = load(base)
    clf = Classifier(tok, model)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    steps = epochs * math.ceil(len(x) / BATCH)
    sched = get_linear_schedule_with_warmup(opt, int(WARMUP * steps), steps)
    rng, history = random.Random(SEED), []
    for epoch in range(1, epochs + 1):
        model.train()
        order = list(range(len(x)))
        rng.shuffle(order)
        t0, losses = time.perf_counter(), []
        for i in range(0, len(order), BATCH):
            idx = order[i:i + BATCH]
            enc = tok([x[j] for j in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            loss = model(**enc, labels=y[idx]).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            losses.append(float(loss))
        row = {"epoch": epoch, "loss": sum(losses) / len(losses), "seconds": round(time.perf_counter() - t0, 1)}
        for name, (ex, ey) in evals.items():
            row[name] = float((clf.probs(ex).argmax(-1) == ey).float().mean())
        print(row, flush=True)
        history.append(row)
    return clf, history


def run(project: Path, claims: list[int], scratch: Path) -> dict[str, Any]:
    import judge_ensemble as je
    import levers
    import torch

    from biocheck.rewards.components import score_many
    from biocheck.rewards.judge import KEYS, clean_scores
    from biocheck.rewards.judge_train import align
    from biocheck.rewards.judge_train.pairs import build_pairs, claim_folds, read_claims, read_corpus
    from biocheck.rewards.judge_train.train import TEST_SEED, _targets
    from biocheck.wiring import judge_config, params_of

    base_params = params_of("params.yaml")
    p = levers.lever_params(base_params, levers.LEVERS[je.LEVER], scratch)
    cfg = judge_config(p)
    corpus = read_corpus(cfg.prepared_dir)
    train_pairs = build_pairs(read_claims(cfg.prepared_dir, "train"), corpus, level=cfg.level,
                              bm25_per_claim=cfg.bm25_per_claim, balance=cfg.balance,
                              max_per_label=cfg.max_pairs_per_label, seed=cfg.seed)
    test_pairs = build_pairs(read_claims(cfg.prepared_dir, "test"), corpus, level=cfg.level, bm25_per_claim=0,
                             balance=cfg.level == "sentence", seed=TEST_SEED, split="test")
    y, y_test = _targets(train_pairs), _targets(test_pairs)
    folds = torch.tensor(claim_folds([q.claim_id for q in train_pairs], cfg.folds, cfg.seed))
    tok, _ = load(str(cfg.base))
    x = texts(tok, [(q.claim, q.article()) for q in train_pairs], cfg.train_max_abstract_chars)
    x_test = texts(tok, [(q.claim, q.article()) for q in test_pairs], cfg.eval_max_abstract_chars)
    tr, te = folds != HELD_OUT, folds == HELD_OUT
    tr_i, te_i = tr.nonzero().flatten().tolist(), te.nonzero().flatten().tolist()

    # the comparison: the align judge (the profile's layer and L2, bench/judge_ensemble.json) on the same folds
    ens = json.loads((REPO / "bench" / "results" / "judge_ensemble.json").read_text())
    layer = ens["layers"]["single"][0]
    feats = torch.load(scratch / "judge_ensemble_features.pt")
    head = align.fit(feats["train"][tr, layer - 1], y[tr], ens["l2"][str(layer)], layer)
    align_acc = float((head.probs(feats["train"][te, layer - 1]).argmax(-1) == y[te]).float().mean())
    result: dict[str, Any] = {"plan": "bench/results/judge_finetune_plan.md", "lever": je.LEVER,
                              "config": {"epochs": EPOCHS, "lr": LR, "weight_decay": WEIGHT_DECAY, "batch": BATCH,
                                         "warmup": WARMUP, "seed": SEED, "margin": MARGIN, "base": str(cfg.base)},
                              "pairs": {"train": len(x), "held_out": len(te_i), "test": len(x_test)},
                              "align_held_out_accuracy": align_acc, "align_layer": layer}
    print(result, flush=True)
    t0 = time.perf_counter()
    _, history = train(str(cfg.base), [x[i] for i in tr_i], y[tr], EPOCHS,
                       {"held_out": ([x[i] for i in te_i], y[te])})
    result["folds_1_3"] = {"history": history, "seconds": round(time.perf_counter() - t0, 1)}
    best = max(history, key=lambda r: (round(r["held_out"], 6), -r["epoch"]))
    result["epochs"], result["held_out_accuracy"] = best["epoch"], best["held_out"]
    result["candidate"] = best["held_out"] >= align_acc + MARGIN
    print("rule step 2:", best, "align", align_acc, "candidate", result["candidate"], flush=True)
    if not result["candidate"]:
        return result
    t0 = time.perf_counter()
    clf, full = train(str(cfg.base), x, y, best["epoch"], {})
    result["refit"] = {"history": full, "seconds": round(time.perf_counter() - t0, 1)}
    out = scratch / "judge_ft"
    clf.model.save_pretrained(out)
    tok.save_pretrained(out)
    pt = clf.probs(x_test)
    result["test"] = je.test_metrics(pt, y_test)
    print("test", result["test"], flush=True)

    result["audits"] = {}
    for n in claims:
        q = levers.lever_params(base_params, levers.LEVERS[je.LEVER], scratch)
        levers._set(q, "audit.claims", n)
        setup, by_id, flat = je.audit_groups(q)
        reward = dataclasses.replace(setup.reward, variant="eg_grpo")
        views = [v for _, v in flat]
        recorder = je._Lookup()
        score_many(views, reward, recorder)
        probs = clf.probs(texts(tok, recorder.asked, cfg.eval_max_abstract_chars)) if recorder.asked else []
        table = {(c, a.pmid, a.title, a.abstract): clean_scores(dict(zip(KEYS, row.tolist(), strict=True)))
                 for (c, a), row in zip(recorder.asked, probs, strict=True)}
        key = f"{n} claims, seed {q['audit']['seed']}"
        result["audits"][key] = {"pairs": len(recorder.asked), **je.shares(flat, by_id, reward, table)}
        print(key, result["audits"][key]["varies"], flush=True)
    result["passes"] = all(2 * v[0] >= v[1] for a in result["audits"].values() for v in a["varies"].values())
    return result


def table(r: dict[str, Any]) -> str:
    lines = ["| judge | held-out fold acc. (n) | epochs | test acc. / S recall / R recall (pairs) | "
             + " | ".join(f"R_evidence varies S / R ({k})" for k in r.get("audits", {})) + " |"]
    lines.append("|" + "---|" * (4 + len(r.get("audits", {}))))
    lines.append(f"| align (layer {r['align_layer']}) | {r['align_held_out_accuracy']:.3f} ({r['pairs']['held_out']}) "
                 "| - | see judge_ensemble.json | " + " | ".join("-" for _ in r.get("audits", {})) + " |")
    t = r.get("test")
    test = (f"{t['accuracy']:.3f} / {t['recall']['SUPPORTED']:.2f} / {t['recall']['REFUTED']:.2f} ({t['n']})"
            if t else "not read (not a candidate)")
    lines.append(f"| ft | {r['held_out_accuracy']:.3f} ({r['pairs']['held_out']}) | {r['epochs']} | {test} | "
                 + " | ".join(" / ".join("{}/{}".format(*a["varies"][lab]) for lab in LABELS)
                              for a in r.get("audits", {}).values()) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="example: bench/judge_finetune.py --project ../smol --claims 16 32")
    ap.add_argument("--project", type=Path, required="--table" not in sys.argv,
                    help="a checkout on the smol profile that ran bench/judge_ensemble.py (its cached features)")
    ap.add_argument("--claims", type=int, nargs="+", default=[16, 32], help="cached audits to re-score")
    ap.add_argument("--scratch", type=Path, help="default: PROJECT/levers")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "judge_finetune.json")
    ap.add_argument("--table", action="store_true", help="print the Markdown table from OUT and stop")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    import torch

    torch.set_num_threads(2)
    os.chdir(args.project)
    os.environ.setdefault("BIOCHECK_TRACKING", "off")
    result = run(args.project, args.claims, (args.scratch or args.project / "levers").resolve())
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
