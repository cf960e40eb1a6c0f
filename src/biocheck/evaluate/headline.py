"""What every evaluation output shows and says: the headline columns, and what the numbers can mean.

The gallery, the PR comment and the learning check read the evaluation's rows (`reports/eval_metrics.json`,
{system: {dataset: system_metrics + about}}) through this one list, so they show the same metrics, each with
the n it counts. DVC's metrics (`metrics/eval/<dataset>/<system>.json`) hold exactly these: `headline_row`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

# (key in a metrics row, column header, key of its n). Citing rate sits beside EHR: abstention is visible.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("accuracy", "accuracy", "n"),
    ("macro_f1", "macro-F1", "n"),
    ("parse_rate", "parse rate", "parse_rate_n"),
    ("citing_rate", "citing rate", "citing_rate_n"),
    ("grounded_rate", "grounded rate", "grounded_rate_n"),
    ("ehr", "EHR (citing reports)", "ehr_n"),
    ("ehr_micro", "micro-EHR (items)", "ehr_micro_n"),
    ("eqs", "EQS", "eqs_n"),
    ("eqs_supporting", "EQS supporting", "eqs_supporting_n"),
    ("eqs_refuting", "EQS refuting", "eqs_refuting_n"),
    ("rationale_f1", "rationale F1", "rationale_f1_n"),
)
# The paired tests' metrics, with the names a table shows (compare.PAIRED computes them).
PAIRED_NAMES = {"accuracy": "accuracy", "macro_f1": "macro-F1", "grounded_rate": "grounded rate",
                "citing_rate": "citing rate", "ehr": "EHR (citing reports)", "ehr_micro": "micro-EHR",
                "eqs": "EQS", "rationale_f1": "rationale F1"}
TRAINING_JUDGE = "EQS scored by the training judge"
# The keys of a headline file: `dvc metrics show` prints one column per key, so a file stays within this.
MAX_HEADLINE_KEYS = 40


def headline_row(m: Mapping[str, Any]) -> dict[str, Any]:
    """One (system, dataset) metrics row -> its headline numbers: n, the label set the scores use, then each
    COLUMNS metric beside its n (None where it does not apply: DVC leaves the cell empty). No intervals,
    confusion counts, per-label scores, timings or notes: those stay in the full row."""
    out: dict[str, Any] = {"n": m.get("n"), "label_set": m.get("label_set")}
    for key, _, n_key in COLUMNS:
        out[key] = m.get(key)
        out.setdefault(n_key, m.get(n_key))
    return out


# The columns of the terminal table (headline_table): the few numbers a reader compares first.
TABLE_COLUMNS = ("accuracy", "macro_f1", "citing_rate", "ehr", "eqs")


def headline_table(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """{system: {dataset: row}} -> a Markdown table narrow enough for a terminal (`cat`), one line per system
    and dataset: n and the TABLE_COLUMNS numbers ("-" where one does not apply). `dvc metrics show` prints
    every key of every metrics file side by side; the intervals and the rest stay in the JSON and the plots."""
    names = {key: label for key, label, _ in COLUMNS}
    header = ["system", "dataset", "n", *(names[k].split(" (")[0] for k in TABLE_COLUMNS)]
    rows = [[str(system), str(dataset), str(m.get("n", "-")),
             *("-" if (v := _num(m.get(k))) is None else f"{v:.3f}" for k in TABLE_COLUMNS)]
            for system, by_dataset in metrics.items() for dataset, m in by_dataset.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i >= 2 else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), rule, *map(line, rows)]) + "\n"


SIGNIFICANT = 0.05  # outputs mark a paired test's p below this


def p_text(x: object) -> tuple[str, bool] | None:
    """A p-value as every output prints it (\"<0.001\" or three decimals) and whether it is below
    SIGNIFICANT; None when there is none. The gallery, the PR comment and the summary lines all use it."""
    v = _num(x)
    if v is None or not math.isfinite(v):
        return None
    return ("<0.001" if v < 0.001 else f"{v:.3f}"), v < SIGNIFICANT


def dataset_notes(metrics: Mapping[str, Any]) -> dict[str, list[str]]:
    """{dataset: sentences} from the rows' `about`: the corpus searched, selection claims or held out, a
    corpus that lacks the dataset's sources, and which judge scored EQS (said plainly when it is the one
    the policy trained on). The first row of a dataset speaks for it (every system shares its setting)."""
    out: dict[str, list[str]] = {}
    for by_dataset in metrics.values():
        if not isinstance(by_dataset, Mapping):
            continue
        for dataset, row in by_dataset.items():
            about = row.get("about") if isinstance(row, Mapping) else None
            if dataset in out or not isinstance(about, Mapping) or not about:
                continue
            notes = []
            if about.get("evidence_corpus"):
                notes.append(f"searched in: {about['evidence_corpus']}")
            notes.append(f"claims: {about.get('role', 'held-out test')}")
            if about.get("caveat"):
                notes.append(str(about["caveat"]))
            if about.get("eqs_by_training_judge"):
                notes.append(f"{TRAINING_JUDGE} ({about.get('eqs_judge')}): a policy that learned to please it "
                             "is graded by it")
            elif about.get("eqs_judge"):
                notes.append(f"EQS scored by {about['eqs_judge']}, not the training judge {about.get('reward_judge')}")
            out[str(dataset)] = notes
    return out


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def _cell(m: Mapping[str, Any], key: str, n_key: str) -> str:
    v = _num(m.get(key))
    if v is None:
        return "n/a"
    ci = (m.get("ci") or {}).get(key) or {}
    lo, hi, n = _num(ci.get("lo")), _num(ci.get("hi")), _num(m.get(n_key))
    span = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    return f"{v:.3f}{span}" + (f" n={int(n)}" if n is not None else "")


def summary_lines(metrics: Mapping[str, Any], paired: Mapping[str, Any]) -> list[str]:
    """What `biocheck evaluate` prints: each dataset's notes, each system's headline numbers with interval
    and n, and each paired difference with its p and the minimum detectable difference at this n."""
    lines = [f"{d}: " + "; ".join(notes) for d, notes in dataset_notes(metrics).items()]
    shown = ("accuracy", "macro_f1", "citing_rate", "ehr", "eqs", "rationale_f1")
    for system, by_dataset in metrics.items():
        for dataset, m in by_dataset.items():
            cells = [f"{label} {_cell(m, k, n)}" for k, label, n in COLUMNS if k in shown
                     and (k in ("accuracy", "macro_f1") or m.get("writes_report"))]
            lines.append(f"{system} / {dataset} ({m.get('label_set', '?')}): " + ", ".join(cells))
    for dataset, by_system in paired.items():
        for system, t in by_system.items():
            parts = []
            for key in ("accuracy", "macro_f1", "ehr", "eqs", "rationale_f1"):
                stat = t.get(key) or {}
                d, p, mdd = _num(stat.get("diff")), p_text(stat.get("p")), _num(stat.get("mdd"))
                if d is None:
                    continue
                parts.append(f"Δ {PAIRED_NAMES[key]} {d:+.3f} (p {'n/a' if p is None else p[0]}, "
                             f"MDD {'n/a' if mdd is None else f'{mdd:.3f}'})")
            if parts:
                lines.append(f"{t.get('reference')} vs {system} / {dataset}, n={t.get('n')}: " + "; ".join(parts))
    return lines
