from __future__ import annotations

import json
from pathlib import Path

import pytest

from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import ValidateConfig, validate
from tests.builders import scifact_dev, scifact_train, write_raw

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


def test_missing_required_column_is_reported(prepared, tmp_path):
    _rewrite(prepared / "full" / "healthfc.jsonl", lambda rows: [r.pop("label") for r in rows])
    result, _ = _validate(prepared, tmp_path)
    assert ("healthfc/full", "label", "expect_column_to_exist") in _failed(result)
    assert "healthfc/full, column 'label'" in result.summary()
