"""Issue 48, a judge lever: does averaging the alignment judge over its layers reach the gate?

The grouped cross-validation accuracy of the `align` recipe's per-layer heads is flat over SmolLM2's 30 layers
(0.575-0.587 for the best ten on sentence pairs), so the layer the recipe picks is close to a coin toss. This
measures three judges fitted on the same training pairs, side by side:

- `single`: today's rule, the one layer (and L2) with the best grouped CV accuracy (the smol profile's judge);
- `all`: the mean of the 30 per-layer heads' probabilities (each with its own CV-best L2), no selection step;
- `top5`: the mean over the five layers with the best CV accuracy.

For each: grouped CV accuracy (the rule, decided before the rest was read: the best CV variant is the lever), the
test-pair metrics (balanced SciFact test sentence pairs, the judge stage's fixed sample), and the reward audit of
the levers' start re-scored (cached episodes of bench/levers.py, nothing regenerated): in how many groups a label
R_evidence varies. Per-group flags and per-episode R_evidence are kept in the output, so every share recomputes.

    .venv/bin/python bench/judge_ensemble.py --project ../smol --claims 16 32   # after bench/levers.py's judge levers
    .venv/bin/python bench/judge_ensemble.py --table                            # the Markdown table from the JSON

The first run spends its time on one forward pass per training and test pair (every layer's features, cached in
SCRATCH/judge_ensemble_features.pt): about 20 min on 2 shared cores; re-scoring an audit takes a few minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "bench"))

VARIANTS = ("single", "all", "top5")
LEVER = "citing64_quote_sentence_judge"  # bench/levers.py: the start and judge settings of the smol profile
LABELS = ("SUPPORTED", "REFUTED")
# a bound, not a judge: every citation that a judge of quotes is shown is credited when filed on the claim's gold
# side; where R_evidence does not vary even then, no judge can make it vary (the policy is the bottleneck)
ORACLE = "gold_side_bound"


def fit_variants(x_train: Any, y: Any, folds: Any) -> tuple[dict[str, list[int]], dict[int, Any], dict[str, Any]]:
    """Per-layer heads (each layer's L2 by grouped CV), the three variants' layers, and the CV table."""
    import torch

    from biocheck.rewards.judge_train import align

    n_layers = x_train.shape[1]
    oof: dict[tuple[int, float], Any] = {}
    for layer in range(1, n_layers + 1):
        for l2 in align.L2_GRID:
            pr = torch.zeros(len(y), 3)
            for f in sorted(set(folds.tolist())):
                tr, te = folds != f, folds == f
                pr[te] = align.fit(x_train[tr, layer - 1], y[tr], l2, layer).probs(x_train[te, layer - 1])
            oof[(layer, l2)] = pr
    acc = {k: float((v.argmax(-1) == y).float().mean()) for k, v in oof.items()}
    best_l2 = {layer: max(align.L2_GRID, key=lambda l2: (round(acc[(layer, l2)], 6), l2))
               for layer in range(1, n_layers + 1)}
    layer_acc = {layer: acc[(layer, best_l2[layer])] for layer in best_l2}
    single = max(layer_acc, key=lambda k: (round(layer_acc[k], 6), k))  # ties: the deeper layer, as align.choose
    variants = {"single": [single], "all": list(range(1, n_layers + 1)),
                "top5": sorted(layer_acc, key=lambda k: (-round(layer_acc[k], 6), -k))[:5]}
    # the ensembles' CV reuses the per-layer L2 (and top5 its layers) chosen on the same folds: a little optimistic
    cv = {n: float((torch.stack([oof[(la, best_l2[la])] for la in ls]).mean(0).argmax(-1) == y).float().mean())
          for n, ls in variants.items()}
    heads = {la: align.fit(x_train[:, la - 1], y, best_l2[la], la) for la in best_l2}
    return variants, heads, {"cv_accuracy": cv, "layer_cv_accuracy": layer_acc, "l2": best_l2}


def probs(heads: dict[int, Any], x: Any, layers: list[int]) -> Any:
    import torch

    return torch.stack([heads[la].probs(x[:, la - 1]) for la in layers]).mean(0)


def test_metrics(p: Any, y: Any) -> dict[str, Any]:
    from biocheck.rewards.judge import KEYS

    pred = p.argmax(-1)
    return {"accuracy": float((pred == y).float().mean()), "n": len(y),
            "recall": {KEYS[i]: float((pred[y == i] == i).float().mean()) for i in range(3)},
            "above_threshold": float((p.max(-1).values > 0.5).float().mean())}


class _Lookup:
    """A judge over precomputed scores (the Judge protocol); `record` collects the pairs it is asked for."""

    spec, prompt_hash = "judge_ensemble", "-"

    def __init__(self, scores: dict | None = None) -> None:
        self.scores, self.asked = scores, []

    def fingerprint(self) -> str:
        return "judge_ensemble"

    def score(self, pairs):
        from biocheck.rewards.judge import KEYS

        if self.scores is None:
            self.asked += list(pairs)
            return [dict.fromkeys(KEYS, 0.0) for _ in pairs]
        return [self.scores[(c, a.pmid, a.title, a.abstract)] for c, a in pairs]


def audit_groups(p: dict[str, Any]):
    """The audit's cached episodes of the start, grouped by claim (nothing is generated when the cache holds them)."""
    from biocheck.evaluate.audit import DATASET
    from biocheck.evaluate.harness import load_episode, run_system
    from biocheck.pipeline import audit_setup
    from biocheck.rewards.components import EpisodeView

    setup = audit_setup(p)
    groups: dict[str, list] = {c.id: [] for c in setup.claims}
    for system in setup.samples:
        try:
            preds = run_system(system, setup.claims, DATASET, setup.cfg.out_dir, workers=1, progress=False)
        finally:
            system.close()
        for pr in preds:
            ep = load_episode(setup.cfg.out_dir, pr)
            if ep is not None:
                groups[pr.id].append(ep)
    by_id = {c.id: c for c in setup.claims}
    flat = [(cid, EpisodeView.from_episode(ep, by_id[cid].label)) for cid, eps in groups.items() for ep in eps]
    return setup, by_id, flat


def rescore(p: dict[str, Any], judge_model: Any, heads: dict, variants: dict[str, list[int]]) -> dict[str, Any]:
    from biocheck.rewards.components import score_many
    from biocheck.rewards.judge import KEYS, clean_scores
    from biocheck.rewards.judge.align_judge import batch_features, prompt_rows

    setup, by_id, flat = audit_groups(p)
    reward = dataclasses.replace(setup.reward, variant="eg_grpo")
    views = [v for _, v in flat]
    recorder = _Lookup()
    score_many(views, reward, recorder)
    rows = [prompt_rows(judge_model.tokenizer, c, a, judge_model.max_abstract_chars) for c, a in recorder.asked]
    x = batch_features(judge_model.model, rows, judge_model.pad_id, 4) if rows else None
    out: dict[str, Any] = {"claims": {cid: c.label.value for cid, c in by_id.items()}, "pairs": len(rows),
                           "variants": {}}
    gold = {c.claim: c.label.value for c in by_id.values()}
    for name, layers in {**variants, ORACLE: []}.items():
        table = {}
        if x is not None and name == ORACLE:  # s = 1 for the claim's gold label, whatever the citation shows
            table = {(c, a.pmid, a.title, a.abstract): {**dict.fromkeys(KEYS, 0.0), gold[c]: 1.0}
                     for c, a in recorder.asked}
        elif x is not None:
            for (c, a), row in zip(recorder.asked, probs(heads, x, layers).tolist(), strict=True):
                table[(c, a.pmid, a.title, a.abstract)] = clean_scores(dict(zip(KEYS, row, strict=True)))
        out["variants"][name] = shares(flat, by_id, reward, table)
    return out


def shares(flat: list, by_id: dict, reward: Any, table: dict) -> dict[str, Any]:
    """The audit's episodes scored by a judge of precomputed scores (`table`, keyed as _Lookup reads it): per label
    [groups in which R_evidence varies, groups], and each group's flag and per-episode R_evidence."""
    from biocheck.rewards.components import score_many

    scored = score_many([v for _, v in flat], reward, _Lookup(table))
    evidence: dict[str, list[float]] = {cid: [] for cid in by_id}
    for (cid, _), b in zip(flat, scored, strict=True):
        evidence[cid].append(round(b.evidence, 6))
    varies = {cid: (max(v) - min(v) > 1e-9) if len(v) >= 2 else None for cid, v in evidence.items()}
    return {"varies": {lab: [sum(1 for c, f in varies.items() if f and by_id[c].label.value == lab),
                             sum(1 for c, f in varies.items() if f is not None and by_id[c].label.value == lab)]
                       for lab in LABELS},
            "per_group": {cid: {"label": by_id[cid].label.value, "varies": varies[cid], "evidence": evidence[cid]}
                          for cid in by_id}}


def run(project: Path, claims: list[int], seed: int | None, scratch: Path, backbone: Path | None = None,
        changes: dict[str, Any] | None = None) -> dict[str, Any]:
    import levers
    import torch

    from biocheck.rewards.judge import TransformersJudge
    from biocheck.rewards.judge.align_judge import batch_features, prompt_rows
    from biocheck.rewards.judge_train.pairs import build_pairs, claim_folds, read_claims, read_corpus
    from biocheck.rewards.judge_train.train import TEST_SEED, _targets
    from biocheck.wiring import judge_config, params_of

    base = params_of("params.yaml")
    p = levers.lever_params(base, levers.LEVERS[LEVER], scratch)
    if backbone is not None:  # another model's layers under the same recipe and pairs
        levers._set(p, "judge.base", str(backbone))
    for key, value in (changes or {}).items():  # other judge settings (the training pairs' mix, ...)
        levers._set(p, key, value)
    cfg = judge_config(p)
    corpus = read_corpus(cfg.prepared_dir)
    train = build_pairs(read_claims(cfg.prepared_dir, "train"), corpus, level=cfg.level,
                        bm25_per_claim=cfg.bm25_per_claim, balance=cfg.balance, max_per_label=cfg.max_pairs_per_label,
                        seed=cfg.seed)
    test = build_pairs(read_claims(cfg.prepared_dir, "test"), corpus, level=cfg.level, bm25_per_claim=0,
                       balance=cfg.level == "sentence", seed=TEST_SEED, split="test")
    judge = TransformersJudge(str(cfg.base), batch_size=4, max_abstract_chars=cfg.eval_max_abstract_chars)
    tag = "".join([f"-{backbone.name}" if backbone is not None else ""]
                  + [f"-{k.split('.')[-1]}={v}" for k, v in sorted((changes or {}).items())])
    cache = scratch / f"judge_ensemble_features{tag}.pt"
    t0 = time.perf_counter()
    if cache.is_file():
        feats = torch.load(cache)
    else:
        feats = {}
        for name, pairs, chars in (("train", train, cfg.train_max_abstract_chars),
                                   ("test", test, cfg.eval_max_abstract_chars)):
            rows = [prompt_rows(judge.tokenizer, q.claim, q.article(), chars) for q in pairs]
            feats[name] = batch_features(judge.model, rows, judge.pad_id, 4, progress=True)
        torch.save(feats, cache)
    y_train, y_test = _targets(train), _targets(test)
    folds = torch.tensor(claim_folds([q.claim_id for q in train], cfg.folds, cfg.seed))
    variants, heads, cv = fit_variants(feats["train"], y_train, folds)
    result: dict[str, Any] = {
        "lever": LEVER, "backbone": str(cfg.base), "changes": changes or {},
        "judge": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()
                  if k in ("level", "recipe", "seed", "balance", "max_pairs_per_label", "folds")},
        "pairs": {"train": len(train), "test": len(test)}, "layers": variants, **cv,
        "test": {n: test_metrics(probs(heads, feats["test"], ls), y_test) for n, ls in variants.items()},
        "features_seconds": round(time.perf_counter() - t0, 1), "audits": {}}
    print(json.dumps({"cv": result["cv_accuracy"], "test": result["test"]}, indent=1), flush=True)
    for n in claims:
        q = levers.lever_params(base, levers.LEVERS[LEVER], scratch)
        levers._set(q, "audit.claims", n)
        if seed is not None:
            levers._set(q, "audit.seed", seed)
        key = f"{n} claims, seed {q['audit']['seed']}"
        result["audits"][key] = rescore(q, judge, heads, variants)
        print(key, {v: r["varies"] for v, r in result["audits"][key]["variants"].items()}, flush=True)
    return result


def _shares(result: dict[str, Any], name: str) -> list[str]:
    """'S varying/groups / R varying/groups' of variant `name`, one cell per audit."""
    return [" / ".join("{}/{}".format(*a["variants"][name]["varies"][lab]) for lab in LABELS)
            for a in result["audits"].values()]


def table(result: dict[str, Any]) -> str:
    head = ("| judge | layers | grouped CV acc. (train pairs) | test acc. / S recall / R recall (pairs) | "
            + " | ".join(f"R_evidence varies S / R ({k})" for k in result["audits"]) + " |")
    lines = [head, "|" + "---|" * (4 + len(result["audits"]))]
    for name in VARIANTS:
        t, layers = result["test"][name], result["layers"][name]
        shown = f"all {len(layers)}" if name == "all" else ", ".join(map(str, layers))
        lines.append(f"| {name} | {shown} | {result['cv_accuracy'][name]:.3f} | {t['accuracy']:.3f} / "
                     f"{t['recall']['SUPPORTED']:.2f} / {t['recall']['REFUTED']:.2f} ({t['n']}) | "
                     + " | ".join(_shares(result, name)) + " |")
    lines.append(f"| {ORACLE} (every right-side citation credited) | - | - | - | "
                 + " | ".join(_shares(result, ORACLE)) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="example: bench/judge_ensemble.py --project ../smol --claims 16 32")
    ap.add_argument("--project", type=Path, required="--table" not in sys.argv,
                    help="a checkout on the smol profile that ran bench/levers.py's judge levers")
    ap.add_argument("--claims", type=int, nargs="+", default=[16], help="audit sizes to re-score (cached episodes)")
    ap.add_argument("--audit-seed", type=int, help="audit.seed (default: the profile's); a new seed samples anew")
    ap.add_argument("--scratch", type=Path, help="default: PROJECT/levers")
    ap.add_argument("--base", type=Path, help="another backbone for the align recipe (default: the profile's)")
    ap.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                    help="judge settings to change, YAML values (e.g. judge.balance=false)")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "judge_ensemble.json")
    ap.add_argument("--table", action="store_true", help="print the Markdown table from OUT and stop")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return
    os.chdir(args.project)
    os.environ.setdefault("BIOCHECK_TRACKING", "off")  # a measurement, not a pipeline run
    scratch = (args.scratch or args.project / "levers").resolve()
    import yaml

    changes = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    result = run(args.project, args.claims, args.audit_seed, scratch, args.base, changes)
    if args.out.is_file() and args.audit_seed is not None:  # another sample of the same judges: add its audits
        old = json.loads(args.out.read_text())
        old["audits"].update(result["audits"])
        result = old
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
