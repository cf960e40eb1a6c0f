"""A study export (`biocheck study export`) as the Markdown tables of docs/results.md, from its files alone:
the analysis recomputed (`biocheck study recompute`), each unit on the claims, the evidence funnel per unit, and
what each training unit's steps gave the gradient (per-step reward components).

    python bench/study_tables.py bench/results/study_pilot
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

NAMES = {"accuracy": "accuracy", "ehr": "EHR (lower is better)", "eqs": "EQS", "citing_rate": "citing rate",
         "grounded_rate": "grounded rate"}
STEPS = ("retrieved", "cited", "verbatim", "rationale", "credited", "right_label")


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def differences(report: dict[str, Any], dataset: str) -> str:
    from biocheck.evaluate.headline import p_text

    r = report["datasets"][dataset]
    ref = report["reference"]
    metrics = r["metrics"]
    systems = list(next(iter(metrics.values()))["values"])
    others = list(next(iter(metrics.values()))["differences"])
    head = ["metric", *systems, *(f"{ref} - {o} [95%], p; MDD; seeds for 80% power" for o in others)]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for m, e in metrics.items():
        cells = [NAMES.get(m, m), *(_num(e["values"][s]) for s in systems)]
        for o in others:
            d = e["differences"].get(o)
            if d is None or d["diff"] is None:
                cells.append("-")
                continue
            if d["lo"] is None:
                cells.append(f"{d['diff']:+.3f} (no interval: {d['seeds']} seed(s) agree or one seed)")
                continue
            bold = d["lo"] > 0 or d["hi"] < 0
            est = f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}]"
            cell = f"{'**' + est + '**' if bold else est}, p = {p_text(d['p'])[0]}; MDD {_num(d['mdd'])}; " \
                   f"{d['seeds_needed'] if d['seeds_needed'] is not None else '> 200'}"
            if d.get("mcnemar"):
                cell += "; McNemar per seed " + ", ".join(f"{x['b']}/{x['c']} p = {p_text(x['p'])[0]}"
                                                          for x in d["mcnemar"])
            cells.append(cell)
        rows.append("| " + " | ".join(cells) + " |")
    maj = metrics.get("accuracy", {}).get("majority")
    if maj:
        rows.append(f"\nMajority class of these {maj['claims']} claims: always {maj['label']} scores {maj['rate']:.3f}.")
    return "\n".join(rows)


def units(dest: Path, report: dict[str, Any], dataset: str) -> str:
    from biocheck.evaluate.systems.base import Prediction

    head = ["unit", "selected", "accuracy", "citing", "grounded", "EHR", "EQS", "labels written (S / R / NEI / none)"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    per_seed = {m: e["per_seed"] for m, e in report["datasets"][dataset]["metrics"].items()}
    for name, sel in report["units"].items():
        preds = [Prediction.model_validate_json(x) for x in (dest / "units" / name / f"{dataset}.jsonl")
                 .read_text().splitlines() if x.strip()]
        system, k = (sel["variant"], sel["seed"]) if sel and sel.get("variant") else ("start", None)
        # per_seed rows follow the units' order in the report (study.seeds as listed), not sorted seeds
        idx = 0 if k is None else [u["seed"] for u in report["units"].values()
                                   if u and u.get("variant") == system].index(k)
        vals = [per_seed[m][system][idx] if per_seed.get(m, {}).get(system) else None
                for m in ("accuracy", "citing_rate", "grounded_rate", "ehr", "eqs")]
        labels = Counter(p.pred.value if p.pred else "none" for p in preds)
        chosen = "the start" if k is None else f"step {sel['step']} (val reward {_num(sel.get('eval_reward'), '.2f')})"
        rows.append(f"| {name} | {chosen} | " + " | ".join(_num(v) for v in vals) + " | " +
                    " / ".join(str(labels.get(x, 0)) for x in ("SUPPORTED", "REFUTED", "NOT ENOUGH INFORMATION", "none"))
                    + " |")
    return "\n".join(rows)


def funnel(report: dict[str, Any], dataset: str) -> str:
    f = report["datasets"][dataset]["funnel"]
    n = next(iter(f.values()))["n"]
    head = ["unit", *STEPS, "credited, any sentence", "non-gold credited", "invented quotes"]
    rows = [f"Of the {n} claims with gold evidence papers:\n", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, s in f.items():
        rows.append(f"| {name} | " + " | ".join(str(s["steps"][k]["count"]) for k in STEPS) + " | " +
                    " | ".join(str(s["beside"][k]) for k in ("credited_any_sentence", "nongold_credited", "invented"))
                    + " |")
    return "\n".join(rows)


def training(dest: Path) -> str:
    head = ["unit", "steps", "groups with R_evidence varying (mean over steps)", "mean R_evidence",
            "steps with R_evidence > 0", "groups with R_outcome varying", "validation reward by step"]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for folder in sorted((dest / "units").iterdir()):
        path = folder / "steps.jsonl"
        if not path.is_file():
            continue
        logs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        train = [r for r in logs if "reward" in r]
        evals = [r for r in logs if "eval_reward" in r]

        def mean(key: str, train: list[dict[str, Any]] = train) -> float | None:
            xs = [r[key] for r in train if r.get(key) is not None]
            return sum(xs) / len(xs) if xs else None

        pos = sum(1 for r in train if (r.get("rewards/evidence/mean") or 0) > 0)
        val = ", ".join(f"{r['step']}: {r['eval_reward']:.2f}" for r in evals)
        rows.append(f"| {folder.name} | {len(train)} | {_num(mean('groups/evidence/varying'), '.2f')} | "
                    f"{_num(mean('rewards/evidence/mean'))} | {pos} of {len(train)} | "
                    f"{_num(mean('groups/outcome/varying'), '.2f')} | {val} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export", type=Path, help="a folder written by `biocheck study export --to`")
    args = ap.parse_args()
    from biocheck.study.units import recompute

    out = recompute(args.export)
    report = out["report"]
    print(f"recomputed from the files alone; equals the exported analysis: {out['matches']}\n")
    for d in report["datasets"]:
        print(f"### {d}\n\n{differences(report, d)}\n\n{units(args.export, report, d)}\n\n{funnel(report, d)}\n")
    print(training(args.export))


if __name__ == "__main__":
    main()
