"""`biocheck data validate`: Great Expectations 1.x suites over the prepared data.

The suites prove, before any GPU hour is spent, that the prepared claims are well formed
(required columns, non-empty claims of sane length, unique ids, known labels and splits), that
every gold/cited document exists in the corpus and every gold sentence in its abstract, that every
working split `prepare` writes exists, holds only its own split and the labels `prepare` kept, and
copies its records unchanged from the full data, and that the full datasets have exactly the
official row counts.

The JSON report lists every check; on failure the CLI prints a summary naming the dataset, column,
rule and a few offending ids/values and exits non-zero, so `dvc repro` stops here.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from biocheck.data.gold import EVIDENCE_DATASETS, label_problem, sentence_problem
from biocheck.data.prepare import REPREPARE, read_prepared
from biocheck.data.schema import DATASET_SPLITS
from biocheck.io import InputError, write_json_atomic
from biocheck.labels import LABELS

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("id", "dataset", "split", "claim", "label")
FILE_RULE = "expect_file_to_exist"  # not a GX expectation: a table that is not there has no suite
COUNT_RULE = "expect_row_count_to_match_manifest"  # nor this: the expected count is per file and split
MANIFEST = "manifest.json"


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


def _as_list(value: Any) -> list:
    """A JSON list as is; anything else as one (bad) entry, so the rules see it instead of skipping it."""
    return value if isinstance(value, list) else [] if value is None else [value]


def _doc_id(value: Any) -> str | None:
    return None if value is None else str(value)  # missing stays missing: the not-null rule names it


def _gold(rows: list[dict], file: str):
    """(row id, gold evidence entry) pairs; the id names the record and the file it is in."""
    for r in rows:
        for ev in _as_list(r.get("evidence")):
            yield f"{r.get('id')} (gold, {file})", ev if isinstance(ev, dict) else {}


def _references(files: list[tuple[str, list[dict]]]) -> pd.DataFrame:
    refs = []
    for file, rows in files:
        refs += [{"id": rid, "doc_id": _doc_id(ev.get("doc_id"))} for rid, ev in _gold(rows, file)]
        refs += [{"id": f"{r.get('id')} (cited, {file})", "doc_id": _doc_id(d)}
                 for r in rows for d in _as_list(r.get("cited_doc_ids"))]
    return pd.DataFrame(refs, columns=["id", "doc_id"], dtype=object)  # object: None stays None


def _evidence(files: list[tuple[str, list[dict]]], n_sentences: dict[str, int]) -> pd.DataFrame:
    rows = []
    for file, recs in files:
        for rid, ev in _gold(recs, file):
            doc = _doc_id(ev.get("doc_id"))  # an unknown doc is named by the references table
            rows.append({"id": rid, "label": ev.get("label"),
                         "bad_sentences": sentence_problem(ev.get("sentences"), doc, n_sentences.get(doc))})
    return pd.DataFrame(rows, columns=["id", "label", "bad_sentences"], dtype=object)


def _gold_labels(ds: str, files: list[tuple[str, list[dict]]]) -> pd.DataFrame:
    """One row per record: why its label and its rationales disagree (None: they agree)."""
    rows = [{"id": f"{r.get('id')} ({file})",
             "label_vs_evidence": label_problem(ds, r.get("label"),
                                                [ev.get("label") for _, ev in _gold([r], file)])}
            for file, recs in files for r in recs]
    return pd.DataFrame(rows, columns=["id", "label_vs_evidence"], dtype=object)


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)  # any JSON id (even a tampered list) can be looked up


def _differs_from_full(row: dict, full_by_id: dict[str, dict], full_file: str) -> str | None:
    """None if a working record is a copy of its full record; else the first field that differs."""
    if row.get("id") is None:
        return f"no id to find it by in {full_file}"
    full = full_by_id.get(_key(row["id"]))
    if full is None:
        return f"not in {full_file}"
    for field_name in [*full, *(k for k in row if k not in full)]:
        if row.get(field_name) != full.get(field_name):
            return f"{field_name} {row.get(field_name)!r}, {full_file} has {full.get(field_name)!r}"
    return None


def _manifest(prepared: Path) -> Any:
    """The manifest `prepare` wrote, as parsed JSON (None if it is missing or not JSON)."""
    try:
        return json.loads((prepared / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _kept_labels(prepared: Path) -> dict[str, list[str]]:
    """The labels `prepare` kept per split, from the config its manifest records ({} if none)."""
    try:
        keep = _manifest(prepared)["config"]["keep_labels"]
    except (KeyError, TypeError):
        return {}
    return {s: list(v) for s, v in keep.items() if isinstance(v, list)} if isinstance(keep, dict) else {}


def _full_rules(cfg: ValidateConfig, ds: str) -> list:
    import great_expectations.expectations as gxe

    return [gxe.ExpectColumnToExist(column=c) for c in REQUIRED_COLUMNS] + [
        *(gxe.ExpectColumnValuesToNotBeNull(column=c) for c in REQUIRED_COLUMNS),
        gxe.ExpectColumnValueLengthsToBeBetween(column="claim", min_value=cfg.claim_min_chars,
                                                max_value=cfg.claim_max_chars),
        gxe.ExpectColumnValuesToNotMatchRegex(column="claim", regex=r"^\s*$"),
        gxe.ExpectColumnValuesToBeInSet(column="label", value_set=list(LABELS)),
        gxe.ExpectColumnValuesToBeInSet(column="dataset", value_set=[ds]),
        gxe.ExpectColumnValuesToBeInSet(column="split", value_set=list(DATASET_SPLITS[ds])),
        # id unique over the whole dataset => every claim is in exactly one split (splits disjoint).
        gxe.ExpectColumnValuesToBeUnique(column="id"),
    ]


def _working_tables(ds: str, work: dict[str, list[dict]], full_rows: list[dict],
                    kept: dict[str, list[str]]) -> list[Table]:
    """Each working file: every record an unchanged copy of its full record (so the full-data rules
    hold for it too, and a flipped label or an edited claim is named here), of the file's own split,
    with only the labels prepare kept there; and ids unique across the files (disjoint splits)."""
    import great_expectations.expectations as gxe

    full_file = f"full/{ds}.jsonl"
    full_by_id = {_key(r.get("id")): r for r in reversed(full_rows)}  # the first of duplicates wins
    tables = []
    for split, rows in work.items():
        df = _claims_frame(rows)
        df["differs_from_full"] = pd.Series([_differs_from_full(r, full_by_id, full_file) for r in rows],
                                            index=df.index, dtype=object)
        tables.append(Table(f"{ds}/{split}.jsonl", ds, df, [
            gxe.ExpectColumnValuesToBeNull(column="differs_from_full"),
            gxe.ExpectColumnValuesToBeInSet(column="split", value_set=[split]),
            gxe.ExpectColumnValuesToBeInSet(column="label", value_set=kept.get(split) or list(LABELS)),
        ]))
    if work:
        ids = pd.Series([r.get("id") for rows in work.values() for r in rows], dtype=object)
        tables.append(Table(f"{ds}/working", ds, pd.DataFrame({"id": ids}),
                            [gxe.ExpectColumnValuesToBeUnique(column="id")]))
    return tables


def build_tables(cfg: ValidateConfig) -> list[Table]:
    import great_expectations.expectations as gxe

    d = cfg.prepared_dir
    if not d.is_dir():
        raise InputError(f"{d}: no prepared data. Run `biocheck data prepare` first.")
    corpus = read_prepared(d / "corpus.jsonl")
    # A missing id stays missing (not the string "None") so the not-null rule sees it.
    corpus_df = pd.DataFrame([{"id": _doc_id(c.get("id")), "title": c.get("title"),
                               "n_sentences": len(c.get("abstract") or [])} for c in corpus])
    corpus_ids = sorted(corpus_df["id"].dropna().unique().tolist())
    # doc id -> sentences in its abstract (reversed: the first of duplicate ids wins)
    n_sentences = dict(reversed(list(zip(corpus_df["id"], corpus_df["n_sentences"], strict=True))))
    tables = [Table("corpus", "scifact", corpus_df, [
        gxe.ExpectColumnValuesToNotBeNull(column="id"),
        gxe.ExpectColumnValuesToBeUnique(column="id"),
        gxe.ExpectColumnValuesToNotBeNull(column="title"),
        gxe.ExpectColumnValuesToBeBetween(column="n_sentences", min_value=1),
    ])]
    kept = _kept_labels(d)

    for ds, splits in DATASET_SPLITS.items():
        full_rows = read_prepared(d / "full" / f"{ds}.jsonl")
        full = _claims_frame(full_rows)
        tables.append(Table(f"{ds}/full", ds, full, _full_rules(cfg, ds)))
        # A missing working file is reported by `file_checks`; the ones present are checked here.
        work = {s: read_prepared(d / ds / f"{s}.jsonl") for s in splits if (d / ds / f"{s}.jsonl").is_file()}
        files = [(f"full/{ds}.jsonl", full_rows), *((f"{ds}/{s}.jsonl", rows) for s, rows in work.items())]
        tables.append(Table(f"{ds}/references", ds, _references(files), [
            gxe.ExpectColumnValuesToNotBeNull(column="doc_id"),
            gxe.ExpectColumnValuesToBeInSet(column="doc_id", value_set=corpus_ids),
        ]))
        tables.append(Table(f"{ds}/evidence", ds, _evidence(files, n_sentences), [
            gxe.ExpectColumnValuesToNotBeNull(column="label"),
            gxe.ExpectColumnValuesToBeInSet(column="label", value_set=list(LABELS)),
            gxe.ExpectColumnValuesToBeNull(column="bad_sentences"),
        ]))
        if ds in EVIDENCE_DATASETS:  # SUPPORTED/REFUTED exactly when there are rationales, all on that side
            tables.append(Table(f"{ds}/gold", ds, _gold_labels(ds, files),
                                [gxe.ExpectColumnValuesToBeNull(column="label_vs_evidence")]))
        for group, n in (cfg.expected_rows.get(ds) or {}).items():
            sub = full[full["split"].isin(group.split("+"))] if "split" in full.columns else full
            tables.append(Table(f"{ds}/full[{group}]", ds, sub, [gxe.ExpectTableRowCountToEqual(value=n)]))
        tables += _working_tables(ds, work, full_rows, kept)
    return tables


def _count_check(table: str, dataset: str, expected: Any, found: int, what: str) -> dict[str, Any]:
    check = {"table": table, "dataset": dataset, "column": None, "rule": COUNT_RULE,
             "args": f"value={expected}", "success": found == expected, "observed": found, "expected": expected}
    if found != expected:
        says = f"says {expected}" if isinstance(expected, int) else "records no count for it"
        check["detail"] = (f"{what} holds {found} record{'s' * (found != 1)}, {MANIFEST} {says} (records were "
                           f"deleted or added after prepare). {REPREPARE}")
    return check


def _recorded(stats: dict, *path: str) -> int | None:
    """One count from the manifest's stats (None when it records none)."""
    value: Any = stats
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if type(value) is int else None


def count_checks(cfg: ValidateConfig) -> list[dict[str, Any]]:
    """Every file `prepare` writes, split by split, holds exactly the records its manifest counted: a file
    with records cut away (or added) is otherwise still well formed, and every rule above would pass it."""
    d = cfg.prepared_dir
    manifest = _manifest(d)
    stats = manifest.get("stats") if isinstance(manifest, dict) else None
    if not isinstance(stats, dict):
        why = "missing" if not (d / MANIFEST).is_file() else "holds no record counts (stats)"
        return [{"table": MANIFEST, "dataset": None, "column": None, "rule": FILE_RULE, "args": "",
                 "success": False, "detail": f"{why}: the records cannot be counted against it. {REPREPARE}"}]
    checks = []
    for ds, splits in DATASET_SPLITS.items():
        full = d / "full" / f"{ds}.jsonl"
        if full.is_file():  # a missing full file fails when its table is read
            in_split = Counter(r.get("split") for r in read_prepared(full))
            checks += [_count_check(f"full/{ds}.jsonl [{s}]", ds, _recorded(stats, "full", ds, s, "total"),
                                    in_split[s], f"split '{s}'") for s in splits]
        for s in splits:
            path = d / ds / f"{s}.jsonl"
            if path.is_file():  # a missing one is named by `file_checks`
                checks.append(_count_check(f"{ds}/{s}.jsonl", ds, _recorded(stats, "working", ds, s, "total"),
                                           len(read_prepared(path)), f"split '{s}'"))
    if (d / "corpus.jsonl").is_file():
        checks.append(_count_check("corpus.jsonl", "scifact", _recorded(stats, "corpus", "docs"),
                                   len(read_prepared(d / "corpus.jsonl")), "the corpus"))
    return checks


def file_checks(cfg: ValidateConfig) -> list[dict[str, Any]]:
    """One check per working split `prepare` writes: the file must be there."""
    checks = []
    for ds, splits in DATASET_SPLITS.items():
        for split in splits:
            name = f"{ds}/{split}.jsonl"
            ok = (cfg.prepared_dir / name).is_file()
            checks.append({"table": name, "dataset": ds, "column": None, "rule": FILE_RULE, "args": "",
                           "success": ok, **({} if ok else {"detail": f"missing. {REPREPARE}"})})
    return checks


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
    checks = run_checks(build_tables(cfg), cfg).checks
    checks = file_checks(cfg) + count_checks(cfg) + checks
    result = ValidationResult(success=all(c["success"] for c in checks), checks=checks)
    write_json_atomic(cfg.report_path, {"success": result.success, "n_checks": len(result.checks),
                                        "n_failed": len(result.failures), "checks": result.checks})
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, {"success": result.success, "checks": len(result.checks),
                                             "failed": len(result.failures)})
    if not result.success:
        log.debug(result.summary())  # callers (CLI, flow) present the summary
    return result
