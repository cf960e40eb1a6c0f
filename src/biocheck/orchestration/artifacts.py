"""What the pipeline shows in Prefect's UI, as plain data: the validation summary (markdown), the metric
table (one row per system and dataset) and each flow run's summary (its headline and links to its MLflow
runs). Built here, without Prefect, so they are tested on their own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from biocheck import tracking
from biocheck.data.validate import ValidationResult

# each with its 95% interval and, where it counts something other than claims, its n (docs/evaluation.md)
TABLE_METRICS = ("accuracy", "macro_f1", "citing_rate", "ehr", "ehr_micro", "eqs", "rationale_f1")
DIGITS = 4
METRICS_KEY = "eval-metrics"  # Prefect artifact keys: lowercase letters, digits, dashes
METRICS_DESCRIPTION = "Accuracy, macro-F1, EQS and EHR with 95% bootstrap intervals"


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


def scores_lines(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """A markdown table of the evaluation's headline: accuracy and macro-F1 (n claims) per system and dataset."""
    lines = ["| system | dataset | n | accuracy | macro-F1 |", "| --- | --- | --- | --- | --- |"]
    for system, by_dataset in metrics.items():
        for dataset, m in by_dataset.items():
            acc, f1 = _number(m.get("accuracy")), _number(m.get("macro_f1"))
            lines.append(f"| {system} | {dataset} | {m.get('n')} | {'n/a' if acc is None else f'{acc:.3f}'} | "
                         f"{'n/a' if f1 is None else f'{f1:.3f}'} |")
    return lines


def stage_lines(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per DVC stage a flow ran: ran (and its seconds) or up to date (skipped)."""
    return [f"- `{stage}`: " + (f"ran, {float(r.get('seconds') or 0):.0f} s" if r.get("ran") else "up to date")
            for stage, r in results.items() if isinstance(r, Mapping)]


def summary_markdown(title: str, headline: list[str], links: list[Mapping[str, str]]) -> str:
    """A flow run's page: its title, its headline lines (markdown) and its MLflow runs, each a link to the run
    in the MLflow UI and its `runs:/<id>` (MLflow's own APIs), or a line saying there is none."""
    out = [f"# {title}", "", *headline, "", "## MLflow"]
    if links:
        out += [f"- [{link['name']}]({link['url']}) in `{link['experiment']}`: `{link['run_uri']}`" for link in links]
    else:
        out.append("No MLflow run (tracking off, or the store could not be read: see the flow's log).")
    return "\n".join(out) + "\n"


def publish_summary(key: str, title: str, headline: list[str]) -> str:
    """This flow run's summary as a Prefect markdown artifact (`key`): `headline` and links to the MLflow runs
    the flow run logged (the runs tagged with it, tracking.in_flow_run). Returns the markdown. Call it inside
    a flow run."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.runtime import flow_run

    links = tracking.flow_run_links(str(flow_run.id)) if flow_run.id else []
    markdown = summary_markdown(title, headline, links)
    create_markdown_artifact(markdown=markdown, key=key, description=title)
    return markdown
