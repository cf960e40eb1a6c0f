from __future__ import annotations

import json
from pathlib import Path

import pytest

from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import ValidateConfig, validate
from tests.helpers.builders import official_sizes, scifact_dev, scifact_train, write_raw, write_release

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


def _rewrite_everywhere(prepared: Path, dataset: str, mutate) -> None:
    """Apply `mutate(rows)` to the full file and, record by record, to the working files (by id)."""
    full = prepared / "full" / f"{dataset}.jsonl"
    before = {r["id"]: r for r in (json.loads(x) for x in full.read_text().splitlines())}
    _rewrite(full, mutate)
    after = {r["id"]: r for r in (json.loads(x) for x in full.read_text().splitlines())}
    for path in (prepared / dataset).glob("*.jsonl"):
        _rewrite(path, lambda rows: [r.update(after[r["id"]]) for r in rows if before[r["id"]] != after[r["id"]]])


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
    assert "id 101 (gold, full/scifact.jsonl) -> '999'" in result.summary()
    assert "id 101 (gold, scifact/test.jsonl) -> '999'" in result.summary()  # the working copy too


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
    assert _failed(result) == [("scifact/val.jsonl", None, "expect_row_count_to_match_manifest"),  # one too many
                               ("scifact/val.jsonl", "split", "expect_column_values_to_be_in_set"),
                               ("scifact/working", "id", "expect_column_values_to_be_unique")]
    cid = train[0]["id"]
    assert f"id {cid} -> {cid!r}" in _summary_line(result, "scifact/working")
    assert f"id {cid} -> 'train'" in _summary_line(result, "scifact/val.jsonl, column 'split'")


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
    assert _failed(result) == [("corpus.jsonl", None, "expect_row_count_to_match_manifest"), ("corpus", "id", "expect_column_values_to_be_unique")]
    line = _summary_line(result, "corpus,")
    assert "corpus, column 'id': expect_column_values_to_be_unique" in line and "id 101 -> '101'" in line


@pytest.mark.parametrize("field, value, column, rule, named", [
    ("title", None, "title", "expect_column_values_to_not_be_null", "id 103 -> None"),
    ("abstract", [], "n_sentences", "expect_column_values_to_be_between", "id 103 -> 0"),
])
def test_bad_corpus_record_is_named(prepared, tmp_path, field, value, column, rule, named):
    _rewrite(prepared / "corpus.jsonl", lambda rows: rows[2].update({field: value}))  # doc 103
    result, cfg = _validate(prepared, tmp_path)
    # Without an abstract, the gold sentences that point into doc 103 point nowhere.
    gold = [("scifact/evidence", "bad_sentences", "expect_column_values_to_be_null")] if field == "abstract" else []
    assert _failed(result) == [("corpus", column, rule), *gold]
    assert named in _summary_line(result, "corpus")
    assert json.loads(cfg.report_path.read_text())["n_failed"] == 1 + len(gold)  # the report is plain JSON


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
    assert "id 100 (cited, full/scifact.jsonl) -> '888'" in result.summary()


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
    _rewrite_everywhere(prepared, "healthfc", lambda rows: [rows[1].update(claim=short), rows[2].update(claim=long)])
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
    assert _failed(result) == [("healthfc/test.jsonl", None, "expect_row_count_to_match_manifest"),
                               ("healthfc/test.jsonl", "differs_from_full", "expect_column_values_to_be_null")]
    assert "id 9999 -> 'not in full/healthfc.jsonl'" in result.summary()


def test_working_split_in_wrong_file_is_caught(prepared, tmp_path):
    # A val claim moved into test.jsonl: ids stay unique; relabelled as test it still differs from full.
    val = [json.loads(x) for x in (prepared / "scifact" / "val.jsonl").read_text().splitlines()]
    _rewrite(prepared / "scifact" / "val.jsonl", lambda rows: rows.pop(0))
    _rewrite(prepared / "scifact" / "test.jsonl", lambda rows: rows.append({**val[0], "split": "test"}))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/val.jsonl", None, "expect_row_count_to_match_manifest"), ("scifact/test.jsonl", None, "expect_row_count_to_match_manifest"),
                               ("scifact/test.jsonl", "differs_from_full", "expect_column_values_to_be_null")]
    assert f"id {val[0]['id']} -> \"split 'test', full/scifact.jsonl has 'val'\"" in result.summary()


def test_working_rows_get_the_claim_rules_too(prepared, tmp_path):
    _rewrite(prepared / "scifact" / "train.jsonl", lambda rows: rows[0].update(label="MAYBE"))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/train.jsonl", "differs_from_full", "expect_column_values_to_be_null"),
                               ("scifact/train.jsonl", "label", "expect_column_values_to_be_in_set")]
    assert "'MAYBE'" in _summary_line(result, "scifact/train.jsonl, column 'label'")


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
    assert ("healthfc/full", "id", "expect_column_to_exist") in failed
    assert ("healthfc/full", "dataset", "expect_column_values_to_be_in_set") not in failed  # the other rules ran
    for table in ("healthfc/full", "healthfc/test.jsonl"):
        assert (table, "label", "expect_column_values_to_be_in_set") in failed
        assert "1 of 7 rows, e.g. 'MAYBE'" in _summary_line(result, f"{table}, column 'label'")
    assert "7 of 7 rows, e.g. 'no id to find it by in full/healthfc.jsonl'" in _summary_line(
        result, "healthfc/test.jsonl, column 'differs_from_full'")
    assert not {t for t, _, _ in failed} - {"healthfc/full", "healthfc/test.jsonl"}
    assert capfd.readouterr().err == ""  # no progress bars over our own output


# --- working splits checked against the full data, the corpus and the prepare config ---------------

def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _line_with(result, *parts: str) -> str:
    """The one summary line that holds every part (the file, the record and the value)."""
    lines = [line for line in result.summary().splitlines() if all(p in line for p in parts)]
    assert len(lines) == 1, result.summary()
    return lines[0]


@pytest.mark.parametrize("deleted", [["scifact/test.jsonl"], ["healthfc/test.jsonl"],
                                     ["scifact/train.jsonl", "scifact/val.jsonl", "scifact/test.jsonl",
                                      "healthfc/test.jsonl"]], ids=["scifact-test", "healthfc-test", "all"])
def test_a_deleted_working_split_fails_naming_the_file_and_the_fix(prepared, tmp_path, deleted):
    for rel in deleted:
        (prepared / rel).unlink()
    result, cfg = _validate(prepared, tmp_path)
    assert not result.success
    assert sorted(t for t, _, r in _failed(result) if r == "expect_file_to_exist") == sorted(deleted)
    for rel in deleted:
        line = _line_with(result, f"  - {rel}: expect_file_to_exist")
        assert "missing" in line and "dvc repro -f -s prepare" in line and "biocheck data prepare" in line
    assert json.loads(cfg.report_path.read_text())["success"] is False  # the report lists it too


def test_every_working_split_prepare_writes_is_required(prepared, tmp_path):
    from biocheck.data.schema import DATASET_SPLITS

    written = sorted(str(p.relative_to(prepared)) for p in prepared.glob("*/*.jsonl") if p.parent.name != "full")
    assert written == sorted(f"{ds}/{s}.jsonl" for ds, splits in DATASET_SPLITS.items() for s in splits)
    result, _ = _validate(prepared, tmp_path)
    required = sorted(c["table"] for c in result.checks if c["rule"] == "expect_file_to_exist")
    assert required == written


@pytest.mark.parametrize("dataset, index, field, value, named", [
    ("scifact", 0, "label", "REFUTED", "label 'REFUTED', full/scifact.jsonl has 'SUPPORTED'"),
    ("healthfc", 2, "claim", "Does homeopathy cure everything?",
     "claim 'Does homeopathy cure everything?', full/healthfc.jsonl has 'Does homeopathy cure allergies?'"),
])
def test_a_working_record_that_differs_from_the_full_data_is_named(prepared, tmp_path, dataset, index, field,
                                                                   value, named):
    path = prepared / dataset / "test.jsonl"
    rid = _rows(path)[index]["id"]
    _rewrite(path, lambda rows: rows[index].update({field: value}))
    result, cfg = _validate(prepared, tmp_path)
    # a flipped SciFact label also disagrees with the record's rationales
    gold = [("scifact/gold", "label_vs_evidence", "expect_column_values_to_be_null")] if field == "label" else []
    assert _failed(result) == [*gold, (f"{dataset}/test.jsonl", "differs_from_full", "expect_column_values_to_be_null")]
    check, = [c for c in json.loads(cfg.report_path.read_text())["checks"]
              if not c["success"] and c["table"] != "scifact/gold"]
    assert check["examples"] == [{"id": rid, "value": named}]  # the report keeps it whole
    assert f"id {rid} -> {named[:30]}" in _line_with(result, f"{dataset}/test.jsonl, column").replace('"', "")


def test_a_working_record_missing_from_the_full_data_is_named(prepared, tmp_path):
    _rewrite(prepared / "full" / "healthfc.jsonl", lambda rows: rows.pop(3))  # release row-count check is off here
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("full/healthfc.jsonl [test]", None, "expect_row_count_to_match_manifest"),  # one fewer than the manifest's
                               ("healthfc/test.jsonl", "differs_from_full", "expect_column_values_to_be_null")]
    assert "id 3 -> 'not in full/healthfc.jsonl'" in _line_with(result, "healthfc/test.jsonl")


def test_a_record_of_another_split_in_a_split_file_is_named(prepared, tmp_path):
    _rewrite(prepared / "scifact" / "test.jsonl", lambda rows: rows[1].update(split="train"))  # id 101
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("scifact/test.jsonl", "split", "expect_column_values_to_be_in_set") in failed
    assert "id 101 -> 'train'" in _line_with(result, "scifact/test.jsonl, column 'split'", "value_set=['test']")


def test_an_evidence_doc_missing_from_the_corpus_in_a_working_file_is_named(prepared, tmp_path):
    _rewrite(prepared / "scifact" / "test.jsonl", lambda rows: rows[0]["evidence"][0].update(doc_id="999"))
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("scifact/references", "doc_id", "expect_column_values_to_be_in_set") in failed
    assert "id 100 (gold, scifact/test.jsonl) -> '999'" in _line_with(result, "scifact/references, column 'doc_id'")
    assert ("scifact/test.jsonl", "differs_from_full", "expect_column_values_to_be_null") in failed


def test_a_malformed_evidence_entry_is_named_field_by_field(prepared, tmp_path):
    bad = {"doc_id": None, "sentences": "x", "label": "ZZZ"}
    _rewrite(prepared / "full" / "scifact.jsonl", lambda rows: rows[0]["evidence"].append(bad))
    result, _ = _validate(prepared, tmp_path)
    failed = _failed(result)
    assert ("scifact/references", "doc_id", "expect_column_values_to_not_be_null") in failed
    assert ("scifact/evidence", "label", "expect_column_values_to_be_in_set") in failed
    assert ("scifact/evidence", "bad_sentences", "expect_column_values_to_be_null") in failed
    assert "id 0 (gold, full/scifact.jsonl) -> None" in _line_with(result, "scifact/references, column 'doc_id'")
    assert "id 0 (gold, full/scifact.jsonl) -> 'ZZZ'" in _line_with(result, "scifact/evidence, column 'label'")
    assert "-> \"'x' is not a list of sentence numbers\"" in _line_with(result, "column 'bad_sentences'")


def test_a_gold_sentence_past_the_end_of_the_abstract_is_named(prepared, tmp_path):
    # doc 101 has 2 sentences (0 and 1)
    _rewrite_everywhere(prepared, "scifact", lambda rows: rows[0]["evidence"][0].update(sentences=[1, 2]))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/evidence", "bad_sentences", "expect_column_values_to_be_null")]
    assert "id 0 (gold, full/scifact.jsonl) -> 'sentence 2 of doc 101, which has 2'" in _line_with(
        result, "scifact/evidence")


def test_labels_the_prepare_config_dropped_from_a_split_fail_there(raw_dir, tmp_path):
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=out, metrics_path=None))  # default: train keeps S/R only
    nei = next(r for r in _rows(out / "full" / "scifact.jsonl") if r["split"] == "train" and r["label"] == "NEI")
    _rewrite(out / "scifact" / "train.jsonl", lambda rows: rows.append(nei))  # a true copy of a full record
    result, _ = _validate(out, tmp_path)
    assert _failed(result) == [("scifact/train.jsonl", None, "expect_row_count_to_match_manifest"),
                               ("scifact/train.jsonl", "label", "expect_column_values_to_be_in_set")]
    line = _line_with(result, "scifact/train.jsonl, column 'label'")
    assert "value_set=['SUPPORTED', 'REFUTED']" in line and f"id {nei['id']} -> 'NEI'" in line


def test_without_a_manifest_every_label_is_allowed_but_the_counts_cannot_be_checked(raw_dir, tmp_path):
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=out, metrics_path=None))
    nei = next(r for r in _rows(out / "full" / "scifact.jsonl") if r["split"] == "train" and r["label"] == "NEI")
    _rewrite(out / "scifact" / "train.jsonl", lambda rows: rows.append(nei))
    (out / "manifest.json").unlink()
    result, _ = _validate(out, tmp_path)
    assert _failed(result) == [("manifest.json", None, "expect_file_to_exist")]  # the label rule passes
    assert "cannot be counted" in _line_with(result, "  - manifest.json") and "biocheck data prepare" in result.summary()


def test_the_cli_exits_1_naming_a_deleted_split(prepared, tmp_path, monkeypatch):
    import yaml
    from typer.testing import CliRunner

    from biocheck.cli import app
    from tests.helpers.paths import REPO

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"]["out_dir"] = str(prepared)
    params["validate"]["expected_rows"] = {}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    (prepared / "scifact" / "test.jsonl").unlink()
    r = CliRunner().invoke(app, ["data", "validate", "--report", str(tmp_path / "v.json")])
    assert r.exit_code == 1, r.output
    assert "scifact/test.jsonl: expect_file_to_exist" in r.output and "passed" not in r.output


def test_a_supported_record_without_rationales_is_named_with_the_rule(prepared, tmp_path):
    def strip(rows):
        rows[0]["evidence"] = []
        assert rows[0]["label"] in ("SUPPORTED", "REFUTED")
    _rewrite_everywhere(prepared, "scifact", strip)
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/gold", "label_vs_evidence", "expect_column_values_to_be_null")]
    line = _line_with(result, "scifact/gold")
    assert "id 0 (full/scifact.jsonl) -> '" in line and "with no gold rationale" in line


def test_an_nei_record_with_a_rationale_is_named(prepared, tmp_path):
    def add(rows):
        nei = next(r for r in rows if r["label"] == "NEI")
        nei["evidence"] = [{"doc_id": "101", "sentences": [0], "label": "SUPPORTED"}]
    _rewrite_everywhere(prepared, "scifact", add)
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/gold", "label_vs_evidence", "expect_column_values_to_be_null")]
    assert "NEI with 1 gold rationale(s)" in _line_with(result, "scifact/gold")


@pytest.mark.parametrize("sentence", [-1, 999])
def test_a_gold_sentence_outside_the_abstract_is_named(prepared, tmp_path, sentence):
    _rewrite_everywhere(prepared, "scifact", lambda rows: rows[0]["evidence"][0].update(sentences=[sentence]))
    result, _ = _validate(prepared, tmp_path)
    assert _failed(result) == [("scifact/evidence", "bad_sentences", "expect_column_values_to_be_null")]
    assert f"sentence {sentence} of doc 101, which has 2" in _line_with(result, "full/scifact.jsonl) -> 'sentence")
