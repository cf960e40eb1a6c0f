"""The validator compares every split's record count with the prepare manifest's (issue 30): a deleted or
added record fails naming the file, what was expected, what was found and the fix; the summary prints data verbatim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import ValidateConfig, validate
from tests.helpers.paths import REPO

runner = CliRunner()


ALL = ["SUPPORTED", "REFUTED", "NEI"]


MARKUP = ":thumbs_up: [bold]loud[/bold] :smile:"  # rich would print 👍 loud 😄


@pytest.fixture
def prepared(raw_dir, tmp_path) -> Path:
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=out, metrics_path=None,
                          keep_labels={"train": ALL, "val": ALL, "test": ALL}))
    return out


def _validate(prepared: Path, tmp_path: Path):
    return validate(ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "report.json",
                                   metrics_path=None, expected_rows={}))


def _keep_first_lines(path: Path, n: int) -> None:
    path.write_text("".join(path.read_text(encoding="utf-8").splitlines(keepends=True)[:n]), encoding="utf-8")


def _stats(prepared: Path) -> dict:
    return json.loads((prepared / "manifest.json").read_text(encoding="utf-8"))["stats"]


def _failed_rules(result) -> list[tuple[str, str]]:
    return [(c["table"], c["rule"]) for c in result.failures]


def test_clean_prepared_data_has_one_passing_count_check_per_file_and_split(prepared, tmp_path):
    result = _validate(prepared, tmp_path)
    assert result.success, result.summary()
    counts = {c["table"]: c for c in result.checks if c["rule"] == "expect_row_count_to_match_manifest"}
    assert sorted(counts) == sorted(["scifact/train.jsonl", "scifact/val.jsonl", "scifact/test.jsonl",
                                     "healthfc/test.jsonl", "full/scifact.jsonl [train]", "full/scifact.jsonl [val]",
                                     "full/scifact.jsonl [test]", "full/healthfc.jsonl [test]", "corpus.jsonl"])
    stats = _stats(prepared)
    assert counts["scifact/train.jsonl"]["observed"] == stats["working"]["scifact"]["train"]["total"] > 1


def test_a_working_split_with_deleted_records_fails_naming_file_expected_found_and_fix(prepared, tmp_path):
    expected = _stats(prepared)["working"]["scifact"]["train"]["total"]
    _keep_first_lines(prepared / "scifact" / "train.jsonl", 1)  # what is left is still a true copy of full/
    result = _validate(prepared, tmp_path)
    assert _failed_rules(result) == [("scifact/train.jsonl", "expect_row_count_to_match_manifest")]
    line, = [x for x in result.summary().splitlines() if x.startswith("  - scifact/train.jsonl")]
    assert "split 'train' holds 1 record" in line and f"manifest.json says {expected}" in line
    assert "biocheck data prepare" in line
    report = json.loads((tmp_path / "report.json").read_text())
    check, = [c for c in report["checks"] if not c["success"]]
    assert check["observed"] == 1 and check["expected"] == expected


def test_a_full_file_or_the_corpus_with_a_deleted_record_fails(prepared, tmp_path):
    stats = _stats(prepared)
    _keep_first_lines(prepared / "corpus.jsonl", stats["corpus"]["docs"] - 1)
    rows = (prepared / "full" / "scifact.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    val = [i for i, r in enumerate(rows) if json.loads(r)["split"] == "val"]
    # drop a val record from full/ and from val.jsonl: every remaining record is still a true copy
    gone = json.loads(rows.pop(val[0]))["id"]
    (prepared / "full" / "scifact.jsonl").write_text("".join(rows), encoding="utf-8")
    work = prepared / "scifact" / "val.jsonl"
    work.write_text("".join(x for x in work.read_text(encoding="utf-8").splitlines(keepends=True)
                            if json.loads(x)["id"] != gone), encoding="utf-8")
    result = _validate(prepared, tmp_path)
    counts = [t for t, rule in _failed_rules(result) if rule == "expect_row_count_to_match_manifest"]
    assert sorted(counts) == ["corpus.jsonl", "full/scifact.jsonl [val]", "scifact/val.jsonl"]
    summary = result.summary()
    n_val = stats["full"]["scifact"]["val"]["total"]
    assert f"split 'val' holds {n_val - 1} records, manifest.json says {n_val}" in summary


def test_added_records_fail_too(prepared, tmp_path):
    path = prepared / "healthfc" / "test.jsonl"
    path.write_text(path.read_text(encoding="utf-8") * 2, encoding="utf-8")  # duplicates: ids and count
    result = _validate(prepared, tmp_path)
    assert ("healthfc/test.jsonl", "expect_row_count_to_match_manifest") in _failed_rules(result)


@pytest.mark.parametrize("manifest", [None, "not json", '{"config": {}}', '{"stats": {"working": {}}}'])
def test_without_the_manifests_counts_the_data_fails_validation(prepared, tmp_path, manifest):
    path = prepared / "manifest.json"
    if manifest is None:
        path.unlink()
    else:
        path.write_text(manifest)
    result = _validate(prepared, tmp_path)
    assert not result.success
    assert {t for t, _ in _failed_rules(result)} <= {"manifest.json", "scifact/train.jsonl", "scifact/val.jsonl",
                                                     "scifact/test.jsonl", "healthfc/test.jsonl", "corpus.jsonl",
                                                     "full/scifact.jsonl [train]", "full/scifact.jsonl [val]",
                                                     "full/scifact.jsonl [test]", "full/healthfc.jsonl [test]"}
    assert "biocheck data prepare" in result.summary()


def test_the_cli_exits_1_on_a_split_with_deleted_records(prepared, tmp_path, monkeypatch):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["validate"]["expected_rows"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    _keep_first_lines(prepared / "scifact" / "train.jsonl", 1)
    r = runner.invoke(app, ["data", "validate", "--report", str(tmp_path / "v.json")])
    assert r.exit_code == 1, r.output
    assert "scifact/train.jsonl: expect_row_count_to_match_manifest" in r.output and "passed" not in r.output


def test_a_validation_summary_prints_data_verbatim(prepared, tmp_path, monkeypatch):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["validate"]["expected_rows"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    path = prepared / "full" / "healthfc.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[0]["label"] = MARKUP
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = runner.invoke(app, ["data", "validate", "--report", str(tmp_path / "v.json")])
    assert r.exit_code == 1, r.output
    assert MARKUP in r.output and "👍" not in r.output and "😄" not in r.output
