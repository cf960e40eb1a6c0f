"""What the pipeline shows in Prefect's UI, as plain data: the validation summary (markdown) and the metric
table (one row per system and dataset). Built here, without Prefect, so they are tested on their own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from biocheck.data.validate import ValidationResult

# each with its 95% interval and, where it counts something other than claims, its n (docs/evaluation.md)
TABLE_METRICS = ("accuracy", "macro_f1", "citing_rate", "ehr", "ehr_micro", "eqs", "rationale_f1")
DIGITS = 4


def validation_summary(report: Mapping[str, Any]) -> str:
    """The same summary `biocheck data validate` prints, from its JSON report (reports/validation.json)."""
    return ValidationResult(success=bool(report["success"]), checks=list(report["checks"])).summary()


def validation_markdown(report: Mapping[str, Any], path: str = "reports/validation.json") -> str:
    """A markdown page: verdict, counts, and the summary verbatim (a code block: ids and values are not
    markdown)."""
    verdict = "passed" if report["success"] else "FAILED"
    n_failed = sum(not c["success"] for c in report["checks"])
    return (f"# Data validation {verdict}\n\n"
            f"{n_failed} of {len(report['checks'])} checks failed (`{path}` lists every check).\n\n"
            f"```text\n{validation_summary(report)}\n```\n")


def _number(value: Any) -> float | None:
    return round(float(value), DIGITS) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def metric_rows(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The evaluation's full metrics (reports/eval_metrics.json, {system: {dataset: {...}}}: the intervals are
    there, not in DVC's headline files) -> one row per system and dataset: n, then accuracy, macro-F1, citing
    rate, EHR over citing reports, micro-EHR, EQS and rationale F1, each with `_lo`/`_hi` (its 95% interval)
    and `_n` where the metrics give one; None where a number does not apply (the report
    metrics of a system that writes no report)."""
    rows = []
    for system, by_dataset in metrics.items():
        for dataset, m in by_dataset.items():
            ci = m.get("ci") or {}
            row: dict[str, Any] = {"system": system, "dataset": dataset, "n": m.get("n")}
            for name in TABLE_METRICS:
                interval = ci.get(name) or {}
                row[name] = _number(m.get(name))
                row[f"{name}_lo"], row[f"{name}_hi"] = _number(interval.get("lo")), _number(interval.get("hi"))
                if f"{name}_n" in m:
                    row[f"{name}_n"] = m.get(f"{name}_n")
            rows.append(row)
    return rows
