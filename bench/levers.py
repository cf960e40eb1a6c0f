"""The levers that make R_evidence's credit reachable, side by side in one run: each lever's warm start and the
reward audit of it (groups in which R_evidence varies, per label; the evidence funnel of the start's episodes).

    python bench/levers.py --project ../smol                       # every lever below, in order
    python bench/levers.py --project ../smol --levers today citing_or --claims 16

PROJECT is a checkout on the profile to measure (e.g. `biocheck profile use smol && dvc repro audit` done there:
its data, index and base model are used). Each lever states every setting the levers touch (TODAY below: the
smol profile before issue 48, and its changes to it) on top of PROJECT's params.yaml, so it measures the same
start on a later profile. Its warm start goes to SCRATCH/sft-<its sft settings> and its judge to
SCRATCH/judge-<its judge settings>, each shared by the levers with the same settings and trained only where
SCRATCH does not hold it yet. Every audit
reads and adds to PROJECT's audit/ cache: episodes are cached per start model and claim, so a lever whose start
and claims were sampled before only re-scores them. Each audit's summary goes to SCRATCH/<lever>/audit.json.
Before the levers, two measurements that need no model: how often a demonstration's search (sft.query) finds a
gold paper and shows a gold rationale over every SUPPORTED / REFUTED training claim of the release, and what a
constant answer (always SUPPORTED) scores on the validation claims with and without data.balanced.

Writes OUT (default bench/results/levers.json; each lever with its params, warm start, audit and seconds) and
prints a table. `--table` prints the Markdown tables of docs/results.md from OUT alone, running nothing (the
levers, and for those measured with it the judge's credit of the episodes' citations):

    python bench/levers.py --table
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

# Every setting a lever touches, as the smol profile had them before issue 48 ("today"): each lever states its
# settings in full on top of these, so that it measures the same thing on a later profile (the profile has since
# taken several levers: rerunning "today" on it still gives the start the levers were measured against).
TODAY = {"train.sft.demos": "first", "train.sft.query": "and", "train.sft.max_examples": 32,
         "train.sft.nei_examples": 0, "train.curriculum": None, "train.num_generations": 4,
         "judge.level": "abstract", "judge.layer": 11, "reward.judge_reads": "paper"}
CITING = {**TODAY, "train.sft.demos": "citing", "train.sft.nei_examples": 8}  # 32 citing (16 S, 16 R) + 8 NEI-gold
CITING64 = {**CITING, "train.sft.query": "or", "train.curriculum": "reachable", "train.num_generations": 8,
            "train.sft.max_examples": 64}
LEVERS: dict[str, dict[str, Any]] = {
    "today": TODAY,  # the warm start: the first 32 training claims, AND queries; the judge of abstracts
    "or": {**TODAY, "train.sft.query": "or"},  # searches that find gold papers
    "citing": CITING,  # citing demonstrations balanced between the labels, NEI only for NEI-gold claims
    "curriculum": {**TODAY, "train.curriculum": "reachable"},  # training claims on which credit is reachable
    "citing_or": {**CITING, "train.sft.query": "or"},
    "citing_or_curriculum": {**CITING, "train.sft.query": "or", "train.curriculum": "reachable"},
    "citing_or_curriculum_g8": {**CITING, "train.sft.query": "or", "train.curriculum": "reachable",
                                "train.num_generations": 8},  # a bigger group: more chances for a term to vary
    # twice the citing demonstrations (32 S + 32 R): more examples of filing refuting evidence as refuting
    "citing64_or_curriculum_g8": CITING64,
    # the same start, its citations judged by their quote, not the whole paper (reward.judge_reads): first by the
    # judge of abstracts (TODAY's), then by judges trained on single sentences (judge.level), at the layer that
    # cross-validated best on abstracts (11) and at the one that does on sentences (layer null: chosen by CV)
    "citing64_quote": {**CITING64, "reward.judge_reads": "quote"},
    "citing64_quote_sentence_judge11": {**CITING64, "reward.judge_reads": "quote", "judge.level": "sentence",
                                        "judge.layer": 11},
    "citing64_quote_sentence_judge": {**CITING64, "reward.judge_reads": "quote", "judge.level": "sentence",
                                      "judge.layer": None},
}


def _set(params: dict[str, Any], key: str, value: Any) -> None:
    node = params
    *path, last = key.split(".")
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value


def lever_params(base: dict[str, Any], changes: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """PROJECT's params with the lever's changes; a changed warm start in SCRATCH/sft-<its settings>."""
    p = copy.deepcopy(base)
    for key, value in changes.items():
        _set(p, key, value)
    sft = sorted((k.removeprefix("train.sft."), v) for k, v in changes.items() if k.startswith("train.sft."))
    if sft:
        _set(p, "train.sft.out_dir", str(scratch / ("sft-" + "-".join(f"{k}={v}" for k, v in sft))))
    judge = sorted((k.removeprefix("judge."), v) for k, v in changes.items() if k.startswith("judge."))
    if judge:  # a changed judge: trained into SCRATCH/judge-<its settings>, and the reward's judge
        folder = scratch / ("judge-" + "-".join(f"{k}={v}" for k, v in judge))
        _set(p, "judge.out_dir", str(folder))
        _set(p, "judge.metrics_path", str(folder.with_name(folder.name + ".json")))
        _set(p, "reward.judge", f"transformers:{folder}")
    return p


def stats_layer(p: dict[str, Any]) -> int | None:
    """The layer a trained judge reads (chosen by cross-validation where judge.layer is null)."""
    stats = Path(p["judge"]["out_dir"]) / "judge_train.json"
    return json.loads(stats.read_text()).get("layer") if stats.is_file() else None


def lever_judge(p: dict[str, Any], changes: dict[str, Any]) -> tuple[dict[str, Any] | None, float | None]:
    """Train the lever's judge unless its folder holds one trained with the same judge settings: (its test metrics,
    the seconds its training took where known) ((None, None): the lever keeps PROJECT's judge)."""
    if not any(k.startswith("judge.") for k in changes):
        return None, None
    from biocheck.pipeline import judge_stage

    folder = Path(p["judge"]["out_dir"])
    stats_file = folder / "judge_train.json"
    settings = {k: v for k, v in p["judge"].items() if k not in ("eqs", "metrics_path", "out_dir")}
    if stats_file.is_file():
        stats = json.loads(stats_file.read_text())
        if all(stats["config"].get(k) == (str(v) if isinstance(v, Path) else v) for k, v in settings.items()):
            return stats["test"], stats.get("seconds")  # judges trained before the seconds left their stats file
    stats = judge_stage(p, progress=False)
    return stats["test"], stats.get("seconds")


def searches(params: dict[str, Any]) -> dict[str, Any]:
    """Per query style: of every SUPPORTED / REFUTED training claim of the release, how many a demonstration's
    search finds a gold paper for and shows a gold rationale to (its demonstration cites)."""
    from biocheck.data.prepare import load_corpus, load_full
    from biocheck.pipeline import train_setup
    from biocheck.train.demos import QUERY_STYLES, cites, demonstration
    from biocheck.train.env import make_env
    from biocheck.wiring import make_prompts, make_search_tool

    c = train_setup(params)
    tool = make_search_tool(c.search)
    env = make_env(tool, make_prompts(c.agent, tool), c.agent.max_searches, c.agent.abstract_chars)
    corpus = {d.id: d for d in load_corpus(c.prepared)}
    claims = [r for r in load_full("scifact", c.prepared) if r.split == "train" and r.evidence]
    out = {}
    for style in QUERY_STYLES:
        found, shown = Counter(), Counter()
        for r in claims:
            messages = demonstration(r, env, corpus, c.agent.max_searches, style)
            found[r.label.value] += bool({e.doc_id for e in r.evidence} & set(env.budget.ledger))
            shown[r.label.value] += cites(messages)
        out[style] = {"claims": dict(Counter(r.label.value for r in claims)), "gold_retrieved": dict(found),
                      "rationale_shown": dict(shown)}
    return out


def constant_answer(params: dict[str, Any], size: int) -> dict[str, Any]:
    """Always-SUPPORTED's outcome reward on the validation claims the profile's split gives, and on a balanced
    split of `size` (data.balanced: [val])."""
    from biocheck.data.prepare import load_full
    from biocheck.data.split import stratified_subset
    from biocheck.wiring import prepare_config, prepared_dir

    cfg = prepare_config(params)
    keep = set(cfg.keep_labels.get("val", []))
    val = [r for r in load_full("scifact", prepared_dir(params)) if r.split == "val" and r.label.value in keep]
    out = {}
    for name, k, balanced in (("profile", cfg.subset.get("val"), "val" in cfg.balanced), ("balanced", size, True)):
        chosen = stratified_subset(val, k, cfg.seed, balanced=balanced)
        labels = Counter(r.label.value for r in chosen)
        out[name] = {"claims": len(chosen), "labels": dict(labels),
                     "always_supported": labels.get("SUPPORTED", 0) / len(chosen)}
    return out


def run_lever(name: str, base: dict[str, Any], scratch: Path) -> dict[str, Any]:
    from biocheck.evaluate.audit import evidence_signal
    from biocheck.pipeline import audit_stage, sft_stage

    p = lever_params(base, LEVERS[name], scratch)
    t0 = time.perf_counter()
    sft = sft_stage(p, progress=False)
    t1 = time.perf_counter()
    judge, judge_seconds = lever_judge(p, LEVERS[name])
    t1b = time.perf_counter()
    audit = audit_stage(p, out=scratch / name / "audit.json")
    t2 = time.perf_counter()
    return {"changes": LEVERS[name], "sft": {k: sft.get(k) for k in ("examples", "demonstrations", "citing")},
            "sft_seconds": round(t1 - t0, 1), "audit_seconds": round(t2 - t1b, 1), "judge": judge,
            "judge_train_seconds": judge_seconds,  # the judge's own training, not this run's (a judge is reused)
            "params": {"reads": p["reward"].get("judge_reads", "paper"), "level": p["judge"].get("level"),
                       "layer": stats_layer(p) if judge else p["judge"].get("layer")},
            "judge_credit": audit["judge_credit"],
            "evidence_signal": evidence_signal(audit), "groups_varying": audit["groups_varying"],
            "evidence": audit["evidence"], "funnel": audit["funnel"], "claims": audit["claims"],
            "episodes": audit["episodes"], "warnings": audit["warnings"]}


STEPS = ("retrieved", "cited", "verbatim", "rationale", "credited")


def table(result: dict[str, Any]) -> str:
    """docs/results.md's table: per lever, the groups in which R_evidence varies and the funnel's counts of the
    audit's episodes, per gold label (S / R)."""
    head = ("| lever | demonstrations S/R/NEI (citing) | R_evidence varies, S groups | R groups | funnel S (episodes): "
            f"{' / '.join(STEPS)} | funnel R | credit off a gold rationale S / R | SFT s | audit s |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for name, r in result["levers"].items():
        sig, f = r["evidence_signal"], r["funnel"]
        demos = r["sft"]["demonstrations"] or {}
        d = "/".join(str(demos.get(k, "-")) for k in ("SUPPORTED", "REFUTED", "NEI")) if demos else "today's 32"
        if r["sft"].get("citing") is not None:
            d += f" ({r['sft']['citing']})"
        varies = [f"{sig[lab]['varying']}/{sig[lab]['groups']}" for lab in ("SUPPORTED", "REFUTED")]
        funnel = [" / ".join(str(f[lab]["steps"][k]["count"]) for k in STEPS) + f" of {f[lab]['n']}"
                  for lab in ("SUPPORTED", "REFUTED")]
        # judge credit (s > threshold, right side) for a cited gold paper whose quote is not a gold rationale sentence
        off = " / ".join(str(f[lab]["beside"]["credited_any_sentence"] - f[lab]["steps"]["credited"]["count"])
                         for lab in ("SUPPORTED", "REFUTED"))
        rows.append(f"| {name} | {d} | {varies[0]} | {varies[1]} | {funnel[0]} | {funnel[1]} | {off} | "
                    f"{r['sft']['seconds']} | {r['audit_seconds']} |")
    return "\n".join(rows)


def _credited(c: dict[str, Any]) -> str:
    """'credited/n' of one kind of citation (the audit keeps the share)."""
    return f"{round((c['credited'] or 0) * c['n'])}/{c['n']}"


def judge_table(result: dict[str, Any]) -> str:
    """docs/results.md's judge table: per lever measured with the judge's credit, what the judge reads, its
    test metrics, and its credit for the episodes' citations of a gold paper filed on the right and wrong side."""
    head = ("| lever | judge reads | judge (level, layer) | judge test acc / macro-F1 / REFUTED recall (pairs) | "
            "gold cited S: right credited / wrong credited | R: right / wrong | R_evidence varies S / R |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for name, r in result["levers"].items():
        if "judge_credit" not in r:
            continue
        p = r.get("params") or {}
        cites = r["judge_credit"]["citations"]
        credit = lambda lab, kind, cites=cites: _credited(cites[lab][kind])  # noqa: E731
        j = r.get("judge")
        test = (f"{j['accuracy']:.3f} / {j['macro_f1']:.3f} / {j['recall']['REFUTED']:.2f} ({j['n']})" if j
                else "the profile's (docs/rewards.md)")
        sig = r["evidence_signal"]
        rows.append(f"| {name} | {p.get('reads', 'paper')} | {p.get('level', 'abstract')}, {p.get('layer', 11)} | "
                    f"{test} | {credit('SUPPORTED', 'gold_correct_side')} / {credit('SUPPORTED', 'gold_wrong_side')} | "
                    f"{credit('REFUTED', 'gold_correct_side')} / {credit('REFUTED', 'gold_wrong_side')} | "
                    f"{sig['SUPPORTED']['varying']}/{sig['SUPPORTED']['groups']} / "
                    f"{sig['REFUTED']['varying']}/{sig['REFUTED']['groups']} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", type=Path, required="--table" not in sys.argv)
    ap.add_argument("--levers", nargs="+", default=list(LEVERS), choices=list(LEVERS))
    ap.add_argument("--claims", type=int, help="audit.claims (default: the profile's)")
    ap.add_argument("--scratch", type=Path, help="default: PROJECT/levers")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "levers.json")
    ap.add_argument("--table", action="store_true", help="print the Markdown table from OUT and stop")
    args = ap.parse_args()
    if args.table:
        result = json.loads(args.out.read_text())
        print(table(result) + "\n\n" + judge_table(result))
        return
    os.chdir(args.project)
    os.environ.setdefault("BIOCHECK_TRACKING", "off")  # measurements, not pipeline runs
    from biocheck.wiring import params_of

    base = params_of("params.yaml")
    if args.claims:
        _set(base, "audit.claims", args.claims)
    scratch = (args.scratch or args.project / "levers").resolve()
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result.update(profile=base.get("profile"), audit_claims=base["audit"]["claims"],
                  searches=searches(base), validation=constant_answer(base, 16))
    print(json.dumps({"searches": result["searches"], "validation": result["validation"]}, indent=1), flush=True)
    result.setdefault("levers", {})
    for name in args.levers:
        r = run_lever(name, base, scratch)
        result["levers"][name] = r
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        sig = r["evidence_signal"]
        steps = {lab: {k: f["steps"][k]["count"] for k in ("retrieved", "cited", "verbatim", "rationale", "credited")}
                 for lab, f in r["funnel"].items()}
        print(f"{name}: R_evidence varies in S {sig['SUPPORTED']['varying']}/{sig['SUPPORTED']['groups']}, "
              f"R {sig['REFUTED']['varying']}/{sig['REFUTED']['groups']} groups; funnel {steps}; demos "
              f"{r['sft']['demonstrations']} ({r['sft']['citing']} citing); sft {r['sft_seconds']} s, audit "
              f"{r['audit_seconds']} s", flush=True)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
