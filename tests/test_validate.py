from __future__ import annotations

import json
from pathlib import Path

import pytest

from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import ValidateConfig, validate
from tests.builders import official_sizes, scifact_dev, scifact_train, write_raw, write_release

ALL = ["SUPPORTED", "REFUTED", "NEI"]


def _prepared(raw: Path, tmp_path: Path) -> Path:
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw, out_dir=out, metrics_path=None,
                          keep_labels={"train": ALL, "val": ALL, "test": ALL}))
    return out


def _validate(prepared: Path, tmp_path: Path, **kw):
    cfg = ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "report.json",
                         metrics_path=tmp_path / "metrics.json", expected_rows=kw.pop("expected_rows", {}), **kw)
    return validate(cfg), cfg


def _rewrite(path: Path, mutate) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    mutate(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _failed(result) -> list[tuple[str, str | None, str]]:
    return [(c["table"], c["column"], c["rule"]) for c in result.failures]


@pytest.fixture
def prepared(raw_dir, tmp_path) -> Path:
    return _prepared(raw_dir, tmp_path)


def test_clean_data_passes_and_report_is_written(prepared, tmp_path):
    result, cfg = _validate(prepared, tmp_path, expected_rows={"scifact": {"train+val": 23, "test": 4},
                                                               "healthfc": {"test": 7}})
    assert result.success, result.summary()
    report = json.loads(cfg.report_path.read_text())
    assert report["success"] is True and report["n_failed"] == 0 and report["n_checks"] == len(result.checks) > 40
    assert json.loads(cfg.metrics_path.read_text()) == {"success": True, "checks": len(result.checks), "failed": 0}


def test_row_counts_must_match_the_release(prepared, tmp_path):
    result, _ = _validate(prepared, tmp_path, expected_rows={"scifact": {"train+val": 809, "test": 4}})
    assert _failed(result) == [("scifact/full[train+val]", None, "expect_table_row_count_to_equal")]
    assert "observed 23" in result.summary()


def test_empty_claim_is_named_with_its_id(tmp_path):
    train = scifact_train()
    train[4]["claim"] = "   "
    result, cfg = _validate(_prepared(write_raw(tmp_path / "raw", train=train), tmp_path), tmp_path)
    assert not result.success
    assert ("scifact/full", "claim", "expect_column_values_to_not_match_regex") in _failed(result)
    summary = result.summary()
    assert "scifact/full, column 'claim'" in summary and "id 4 -> '   '" in summary
    assert json.loads(cfg.report_path.read_text())["success"] is False  # written on failure too


def test_gold_doc_missing_from_corpus_is_named(tmp_path):
    dev = scifact_dev()
    dev[1]["evidence"] = {"999": [{"sentences": [0], "label": "CONTRADICT"}]}
    result, _ = _validate(_prepared(write_raw(tmp_path / "raw", dev=dev), tmp_path), tmp_path)
    assert _failed(result) == [("scifact/references", "doc_id", "expect_column_values_to_be_in_set")]
    assert "id 101 (gold) -> '999'" in result.summary()


def test_tampered_prepared_data_is_caught(prepared, tmp_path):
    def mutate(rows):
        rows[1]["id"] = rows[0]["id"]  # duplicate id (also: a claim in two splits)
        rows[2]["label"] = "MAYBE"
        rows[3]["claim"] = "short"
        del rows[5]["claim"]
    _rewrite(prepared / "full" / "scifact.jsonl", mutate)
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("scifact/full", "id", "expect_column_values_to_be_unique") in failed
    assert ("scifact/full", "label", "expect_column_values_to_be_in_set") in failed
    assert ("scifact/full", "claim", "expect_column_value_lengths_to_be_between") in failed
    assert ("scifact/full", "claim", "expect_column_values_to_not_be_null") in failed
    summary = result.summary()
    assert "'MAYBE'" in summary and "'short'" in summary and "id 5 -> None" in summary


def test_working_split_overlap_and_foreign_rows_are_caught(prepared, tmp_path):
    train = [json.loads(x) for x in (prepared / "scifact" / "train.jsonl").read_text().splitlines()]
    _rewrite(prepared / "scifact" / "val.jsonl", lambda rows: rows.append(train[0]))  # same claim in val
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("scifact/working", "id", "expect_column_values_to_be_unique") in failed
    assert ("scifact/working", "split_id", "expect_column_values_to_be_in_set") in failed
    cid = train[0]["id"]
    assert f"id {cid} -> {cid!r}" in result.summary() and f"id {cid} -> 'val:{cid}'" in result.summary()


def test_missing_required_column_is_reported(prepared, tmp_path):
    _rewrite(prepared / "full" / "healthfc.jsonl", lambda rows: [r.pop("label") for r in rows])
    result, _ = _validate(prepared, tmp_path)
    assert ("healthfc/full", "label", "expect_column_to_exist") in _failed(result)
    assert "healthfc/full, column 'label'" in result.summary()


def _summary_line(result, table: str) -> str:
    lines = [line for line in result.summary().splitlines() if line.startswith(f"  - {table}")]
    assert len(lines) == 1, result.summary()
    return lines[0]


# --- corpus ----------------------------------------------------------------------------------------

def test_duplicate_corpus_id_is_named(prepared, tmp_path):
    _rewrite(prepared / "corpus.jsonl", lambda rows: rows.append({**rows[0], "title": "Another doc, same id"}))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("corpus", "id", "expect_column_values_to_be_unique")]
    line = _summary_line(result, "corpus")
    assert "corpus, column 'id': expect_column_values_to_be_unique" in line and "id 101 -> '101'" in line


@pytest.mark.parametrize("field, value, column, rule, named", [
    ("title", None, "title", "expect_column_values_to_not_be_null", "id 103 -> None"),
    ("abstract", [], "n_sentences", "expect_column_values_to_be_between", "id 103 -> 0"),
])
def test_bad_corpus_record_is_named(prepared, tmp_path, field, value, column, rule, named):
    _rewrite(prepared / "corpus.jsonl", lambda rows: rows[2].update({field: value}))  # doc 103
    result, cfg = _validate(prepared, tmp_path)
    assert _failed(result) == [("corpus", column, rule)]
    assert named in _summary_line(result, "corpus")
    assert json.loads(cfg.report_path.read_text())["n_failed"] == 1  # the report is plain JSON


def test_corpus_record_without_id_fails(prepared, tmp_path):
    _rewrite(prepared / "corpus.jsonl", lambda rows: rows[4].pop("id"))  # doc 105, cited by claims
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("corpus", "id", "expect_column_values_to_not_be_null") in failed
    assert ("scifact/references", "doc_id", "expect_column_values_to_be_in_set") in failed
    assert "'105'" in _summary_line(result, "scifact/references")


def test_cited_doc_missing_from_corpus_is_named(tmp_path):
    dev = scifact_dev()
    dev[0]["cited_doc_ids"] = [104, 888]
    result, _ = _validate(_prepared(write_raw(tmp_path / "raw", dev=dev), tmp_path), tmp_path)
    assert _failed(result) == [("scifact/references", "doc_id", "expect_column_values_to_be_in_set")]
    assert "id 100 (cited) -> '888'" in result.summary()


# --- claim tables ----------------------------------------------------------------------------------

@pytest.mark.parametrize("column", ["id", "dataset", "split", "claim", "label"])
def test_null_required_value_is_caught(prepared, tmp_path, column):
    _rewrite(prepared / "full" / "healthfc.jsonl", lambda rows: rows[3].update({column: None}))
    result, _ = _validate(prepared, tmp_path)
    assert ("healthfc/full", column, "expect_column_values_to_not_be_null") in _failed(result)
    named = "id None -> None" if column == "id" else "id 3 -> None"
    assert named in result.summary()


@pytest.mark.parametrize("extra, ok", [(-1, False), (0, True)])
def test_claim_length_bounds_are_inclusive(prepared, tmp_path, extra, ok):
    cfg = ValidateConfig()
    short, long = "s" * (cfg.claim_min_chars + extra), "x" * (cfg.claim_max_chars - extra)
    _rewrite(prepared / "full" / "healthfc.jsonl", lambda rows: [rows[1].update(claim=short),
                                                                 rows[2].update(claim=long)])
    result, _ = _validate(prepared, tmp_path, claim_min_chars=cfg.claim_min_chars,
                          claim_max_chars=cfg.claim_max_chars)
    if ok:
        assert result.success, result.summary()
        return
    assert _failed(result) == [("healthfc/full", "claim", "expect_column_value_lengths_to_be_between")]
    line = _summary_line(result, "healthfc/full")
    assert f"min_value={cfg.claim_min_chars}, max_value={cfg.claim_max_chars}" in line
    assert f"2 of 7 rows, e.g. id 1 -> {short!r}; id 2 -> 'xxxx" in line


@pytest.mark.parametrize("dataset, column, value", [
    ("scifact", "dataset", "healthfc"),   # a record filed under the wrong dataset
    ("healthfc", "split", "train"),       # a real split, but HealthFC has only `test`
    ("healthfc", "label", "supported"),   # labels are upper case
])
def test_value_outside_its_set_is_named(prepared, tmp_path, dataset, column, value):
    _rewrite(prepared / "full" / f"{dataset}.jsonl", lambda rows: rows[0].update({column: value}))
    result, _ = _validate(prepared, tmp_path)
    assert (f"{dataset}/full", column, "expect_column_values_to_be_in_set") in _failed(result)
    assert f"id 0 -> {value!r}" in _summary_line(result, f"{dataset}/full, column '{column}'")


# --- working splits --------------------------------------------------------------------------------

def test_working_row_not_in_full_data_is_named(prepared, tmp_path):
    invented = {"id": "9999", "dataset": "healthfc", "split": "test", "claim": "Does an invented claim pass?",
                "label": "NEI"}
    _rewrite(prepared / "healthfc" / "test.jsonl", lambda rows: rows.append(invented))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("healthfc/working", "split_id", "expect_column_values_to_be_in_set")]
    assert "id 9999 -> 'test:9999'" in result.summary()


def test_working_split_in_wrong_file_is_caught(prepared, tmp_path):
    # A val claim copied (only) into test.jsonl: ids stay unique, but (test, id) is not in the full data.
    val = [json.loads(x) for x in (prepared / "scifact" / "val.jsonl").read_text().splitlines()]
    _rewrite(prepared / "scifact" / "val.jsonl", lambda rows: rows.pop(0))
    _rewrite(prepared / "scifact" / "test.jsonl", lambda rows: rows.append(val[0]))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/working", "split_id", "expect_column_values_to_be_in_set")]
    assert f"id {val[0]['id']} -> 'test:{val[0]['id']}'" in result.summary()


def test_working_rows_get_the_claim_rules_too(prepared, tmp_path):
    _rewrite(prepared / "scifact" / "train.jsonl", lambda rows: rows[0].update(label="MAYBE"))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/working", "label", "expect_column_values_to_be_in_set")]
    assert "'MAYBE'" in result.summary()


# --- the official release sizes, on a synthetic release of exactly that size ----------------------

OFFICIAL = official_sizes()
ROW_TABLES = {"scifact_train": ("scifact/full[train+val]", "scifact_train"),
              "scifact_dev": ("scifact/full[test]", "scifact_dev"),
              "healthfc": ("healthfc/full[test]", "healthfc")}


def _release(tmp_path: Path, **delta: int) -> Path:
    """prepare (all defaults) over a synthetic release sized like the official one, plus `delta` rows."""
    sizes = {k: n + delta.get(k, 0) for k, n in OFFICIAL.items()}
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=write_release(tmp_path / "raw", **sizes), out_dir=out, metrics_path=None))
    return out


def test_default_row_counts_are_the_documented_release_sizes():
    assert ValidateConfig().expected_rows == {
        "scifact": {"train+val": OFFICIAL["scifact_train"], "test": OFFICIAL["scifact_dev"]},
        "healthfc": {"test": OFFICIAL["healthfc"]}}


def test_release_of_the_official_size_passes_the_defaults(tmp_path):
    prepared = _release(tmp_path)
    result = validate(ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "r.json", metrics_path=None))
    assert result.success, result.summary()
    observed = sorted(c["observed"] for c in result.checks if c["rule"] == "expect_table_row_count_to_equal")
    assert observed == sorted(OFFICIAL.values())


@pytest.mark.parametrize("part", sorted(ROW_TABLES))
@pytest.mark.parametrize("delta", [-1, 1])
def test_one_row_more_or_less_fails_naming_dataset_expected_and_actual(tmp_path, part, delta):
    prepared = _release(tmp_path, **{part: delta})
    result = validate(ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "r.json", metrics_path=None))
    table, key = ROW_TABLES[part]
    assert _failed(result) == [(table, None, "expect_table_row_count_to_equal")]
    assert _summary_line(result, table) == (f"  - {table}: expect_table_row_count_to_equal "
                                            f"(value={OFFICIAL[key]}): observed {OFFICIAL[key] + delta}")


# --- files without ids -----------------------------------------------------------------------------

def test_claims_without_an_id_column_are_reported_not_a_crash(prepared, tmp_path, capfd):
    # e.g. an upstream rename of "id": every rule still runs; the bad label is shown by value.
    def drop_ids(rows):
        for r in rows:
            r.pop("id")
        rows[1]["label"] = "MAYBE"
    _rewrite(prepared / "full" / "healthfc.jsonl", drop_ids)
    _rewrite(prepared / "healthfc" / "test.jsonl", drop_ids)
    capfd.readouterr()
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    for table in ("healthfc/full", "healthfc/working"):
        assert (table, "id", "expect_column_to_exist") in failed
        assert (table, "label", "expect_column_values_to_be_in_set") in failed
        assert (table, "dataset", "expect_column_values_to_be_in_set") not in failed  # the other rules ran
    assert ("healthfc/working", "split_id", "expect_column_values_to_be_in_set") in failed
    assert "healthfc/full, column 'label': expect_column_values_to_be_in_set" in result.summary()
    assert "1 of 7 rows, e.g. 'MAYBE'" in _summary_line(result, "healthfc/full, column 'label'")
    assert not {t for t, _, _ in failed} - {"healthfc/full", "healthfc/working"}
    assert capfd.readouterr().err == ""  # no progress bars over our own output
