"""`biocheck data validate`: Great Expectations 1.x suites over the prepared data.

The suites prove, before any GPU hour is spent, that the prepared claims are well formed
(required columns, non-empty claims of sane length, unique ids, known labels and splits), that
every gold/cited document exists in the corpus, that the working splits are disjoint subsets of the
full data, and that the full datasets have exactly the official row counts.

The JSON report lists every check; on failure the CLI prints a summary naming the dataset, column,
rule and a few offending ids/values and exits non-zero, so `dvc repro` stops here.
"""

from __future__ import annotations

import copy
import logging
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from biocheck.data.schema import DATASETS, SPLITS
from biocheck.io import InputError, read_jsonl, write_json_atomic
from biocheck.labels import LABELS

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("id", "dataset", "split", "claim", "label")
DATASET_SPLITS = {"scifact": ["train", "val", "test"], "healthfc": ["test"]}


def _default_rows() -> dict[str, dict[str, int]]:
    # Official release sizes; SciFact train is split into train/val by `prepare`.
    return {"scifact": {"train+val": 809, "test": 300}, "healthfc": {"test": 750}}


@dataclass
class ValidateConfig:
    prepared_dir: Path = Path("data/prepared")
    report_path: Path = Path("reports/validation.json")
    metrics_path: Path | None = Path("metrics/validation.json")
    claim_min_chars: int = 10
    claim_max_chars: int = 1000
    expected_rows: dict[str, dict[str, int]] = field(default_factory=_default_rows)  # {} to skip
    max_examples: int = 5

    def __post_init__(self) -> None:
        self.prepared_dir, self.report_path = Path(self.prepared_dir), Path(self.report_path)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None


@dataclass
class Table:
    """One dataframe and the expectations to run on it."""

    name: str  # e.g. "scifact/full"
    dataset: str
    df: pd.DataFrame
    expectations: list = field(default_factory=list)


@dataclass
class ValidationResult:
    success: bool
    checks: list[dict[str, Any]]

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["success"]]

    def summary(self) -> str:
        if self.success:
            return f"All {len(self.checks)} data checks passed."
        lines = [f"{len(self.failures)} of {len(self.checks)} data checks FAILED:"]
        for c in self.failures:
            where = f"{c['table']}" + (f", column '{c['column']}'" if c.get("column") else "")
            rule = c["rule"] + (f" ({c['args']})" if c.get("args") else "")
            what = c.get("detail") or ""
            if c.get("unexpected_count") is not None:
                what = f"{c['unexpected_count']} of {c['element_count']} rows"
                if c.get("examples"):
                    what += ", e.g. " + "; ".join(_fmt_example(e) for e in c["examples"])
            lines.append(f"  - {where}: {rule}: {what}")
        return "\n".join(lines)


def _fmt_example(e: dict) -> str:
    value = e.get("value")
    if isinstance(value, str) and len(value) > 60:
        value = value[:57] + "..."
    return f"id {e.get('id')!s} -> {value!r}" if "id" in e else repr(value)


def _plain_value(value: Any) -> Any:
    """A dataframe cell as plain JSON data: NaN (pandas' missing value) -> None, numpy scalar -> Python."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


# --- building the tables ---------------------------------------------------------------------------

def _claims_frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in REQUIRED_COLUMNS:  # a missing column is reported by its own expectation
        if col in df.columns:
            df[col] = df[col].astype(object)
    return df


def _references(rows: list[dict], dataset: str) -> pd.DataFrame:
    refs = []
    for r in rows:
        for ev in r.get("evidence") or []:
            refs.append({"id": f"{r.get('id')} (gold)", "doc_id": str(ev.get("doc_id"))})
        for d in r.get("cited_doc_ids") or []:
            refs.append({"id": f"{r.get('id')} (cited)", "doc_id": str(d)})
    return pd.DataFrame(refs, columns=["id", "doc_id"])


def build_tables(cfg: ValidateConfig) -> list[Table]:
    import great_expectations.expectations as gxe

    d = cfg.prepared_dir
    if not d.is_dir():
        raise InputError(f"{d}: no prepared data. Run `biocheck data prepare` first.")
    corpus = read_jsonl(d / "corpus.jsonl")
    # A missing id stays missing (not the string "None") so the not-null rule sees it.
    corpus_df = pd.DataFrame([{"id": None if c.get("id") is None else str(c["id"]), "title": c.get("title"),
                               "n_sentences": len(c.get("abstract") or [])} for c in corpus])
    corpus_ids = sorted(corpus_df["id"].dropna().unique().tolist())
    tables = [Table("corpus", "scifact", corpus_df, [
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        gxe.ExpectColumnValuesToNotBeNull(column="title"),
        gxe.ExpectColumnValuesToBeBetween(column="n_sentences", min_value=1),
    ])]

    for ds in DATASETS:
        full_rows = read_jsonl(d / "full" / f"{ds}.jsonl")
        full = _claims_frame(full_rows)
        claim_rules = [gxe.ExpectColumnToExist(column=c) for c in REQUIRED_COLUMNS] + [
            *(gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED_COLUMNS),
            gxe.ExpectColumnValueLengthsToBeBetween(column="claim", min_value=cfg.claim_min_chars,
                                                    max_value=cfg.claim_max_chars),
            gxe.ExpectColumnValuesToNotMatchRegex(column="claim", regex=r"^\s*$"),
            gxe.ExpectColumnValuesToBeInSet(column="label", value_set=list(LABELS)),
            gxe.ExpectColumnValuesToBeInSet(column="dataset", value_set=[ds]),
            gxe.ExpectColumnValuesToBeInSet(column="split", value_set=DATASET_SPLITS[ds]),
        ]
        # id unique over the whole dataset => every claim is in exactly one split (splits disjoint).
        tables.append(Table(f"{ds}/full", ds, full,
                            claim_rules + [gxe.ExpectColumnValuesToBeUnique(column="id")]))
        tables.append(Table(f"{ds}/references", ds, _references(full_rows, ds), [
            gxe.ExpectColumnValuesToBeInSet(column="doc_id", value_set=corpus_ids),
        ]))
        for group, n in (cfg.expected_rows.get(ds) or {}).items():
            splits = group.split("+")
            sub = full[full["split"].isin(splits)] if "split" in full.columns else full
            tables.append(Table(f"{ds}/full[{group}]", ds, sub, [gxe.ExpectTableRowCountToEqual(value=n)]))

        # Working splits: the union must have unique ids (disjoint splits) and come from the full data.
        work_rows = []
        for split in SPLITS:
            path = d / ds / f"{split}.jsonl"
            if path.exists():
                for r in read_jsonl(path):
                    work_rows.append({**r, "file_split": split})
        work = _claims_frame(work_rows)
        if len(work):
            if "id" in work.columns:  # else the id rules report it, and split_id is missing too
                work["split_id"] = work["file_split"].astype(str) + ":" + work["id"].astype(str)
            # dropna: a row without id/split is reported by the not-null rules, not a TypeError here.
            full_keys = sorted((full["split"].astype(str) + ":" + full["id"].astype(str)).dropna().tolist()) \
                if {"id", "split"} <= set(full.columns) else []
            tables.append(Table(f"{ds}/working", ds, work, claim_rules + [
                gxe.ExpectColumnValuesToBeUnique(column="id"),
                gxe.ExpectColumnValuesToBeInSet(column="split_id", value_set=full_keys),
            ]))
    return tables


# --- running them ----------------------------------------------------------------------------------

def _check_from_result(table: Table, r, cfg: ValidateConfig) -> dict[str, Any]:
    conf = r.expectation_config
    kwargs = {k: v for k, v in conf.kwargs.items() if k not in ("batch_id", "column", "value_set")}
    if "value_set" in conf.kwargs:
        vs = conf.kwargs["value_set"]
        kwargs["value_set"] = vs if len(vs) <= 10 else f"<{len(vs)} values>"
    check: dict[str, Any] = {
        "table": table.name, "dataset": table.dataset, "column": conf.kwargs.get("column"),
        "rule": conf.type, "args": ", ".join(f"{k}={v}" for k, v in kwargs.items()),
        "success": bool(r.success),
    }
    res = r.result or {}
    if r.exception_info and r.exception_info.get("raised_exception"):
        check["success"] = False
        check["detail"] = (f"could not be evaluated (is column '{check['column']}' missing?): "
                           f"{r.exception_info.get('exception_message', '')[:200]}")
    elif "unexpected_count" in res:
        check["element_count"] = res.get("element_count")
        check["unexpected_count"] = res.get("unexpected_count")
        if not r.success:
            col = check["column"]
            seen = []
            for item in res.get("unexpected_index_list") or []:
                if not isinstance(item, dict):  # a bare row number: the table has no id column
                    continue
                e = {"id": _plain_value(item.get("id")), "value": _plain_value(item.get(col))}
                if e not in seen:
                    seen.append(e)
            if not seen:
                seen = [{"value": _plain_value(v)} for v in (res.get("partial_unexpected_list") or [])]
            check["examples"] = seen[: cfg.max_examples]
    elif "observed_value" in res:
        check["observed"] = res["observed_value"]
        if not r.success:
            check["detail"] = f"observed {res['observed_value']!r}"
    elif not r.success and table.df.empty:
        check["detail"] = "the table is empty"
    elif not r.success:
        check["detail"] = "the column does not exist"
    return check


def run_checks(tables: list[Table], cfg: ValidateConfig) -> ValidationResult:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)  # our own output stays readable
    source = ctx.data_sources.add_pandas("prepared")
    checks: list[dict[str, Any]] = []
    for i, table in enumerate(tables):
        batch = source.add_dataframe_asset(f"t{i}").add_batch_definition_whole_dataframe("all")
        # A GX expectation belongs to one suite: tables share rule lists, so each suite gets copies.
        suite = ctx.suites.add(gx.ExpectationSuite(name=f"s{i}", expectations=[copy.copy(e) for e in table.expectations]))
        vd = ctx.validation_definitions.add(gx.ValidationDefinition(name=f"v{i}", data=batch, suite=suite))
        index_cols = ["id"] if "id" in table.df.columns else []
        result = vd.run(batch_parameters={"dataframe": table.df},
                        result_format={"result_format": "COMPLETE", "unexpected_index_column_names": index_cols})
        checks.extend(_check_from_result(table, r, cfg) for r in result.results)
    return ValidationResult(success=all(c["success"] for c in checks), checks=checks)


def validate(cfg: ValidateConfig | None = None) -> ValidationResult:
    """Run every suite, write the JSON report (also on failure) and return the result."""
    cfg = cfg or ValidateConfig()
    result = run_checks(build_tables(cfg), cfg)
    write_json_atomic(cfg.report_path, {"success": result.success, "n_checks": len(result.checks),
                                        "n_failed": len(result.failures), "checks": result.checks})
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, {"success": result.success, "checks": len(result.checks),
                                             "failed": len(result.failures)})
    if not result.success:
        log.debug(result.summary())  # callers (CLI, flow) present the summary
    return result
