"""The validation report's pieces without running Great Expectations: the failure summary, how one GX
result becomes a check, and the tables (with their rules) built from the prepared data.

Running a GX suite costs about a second per table set (tests/data/test_validate.py does that end to end);
here the GX result objects are stand-ins with the attributes `_check_from_result` reads.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from biocheck.data.prepare import PrepareConfig, prepare
from biocheck.data.validate import (
    REQUIRED_COLUMNS,
    Table,
    ValidateConfig,
    ValidationResult,
    _check_from_result,
    build_tables,
    validate,
)
from biocheck.io import InputError
from biocheck.labels import LABELS
from tests.helpers.builders import write_raw

ALL = ["SUPPORTED", "REFUTED", "NEI"]


def _check(**kw) -> dict:
    return {"table": "t", "column": None, "rule": "expect_x", "args": "", "success": False, **kw}


def _result(*checks: dict) -> ValidationResult:
    return ValidationResult(success=all(c["success"] for c in checks), checks=list(checks))


def _examples_line(examples: list[dict]) -> str:
    """The summary's one failure line for a column check with these offending examples."""
    res = _result(_check(unexpected_count=len(examples), element_count=9, examples=examples))
    return res.summary().splitlines()[1]


# --- summary ------------------------------------------------------------------------------------------

def test_summary_of_a_success_counts_the_checks():
    res = _result(_check(success=True), _check(success=True), _check(success=True))
    assert res.failures == [] and res.summary() == "All 3 data checks passed."


def test_summary_names_table_column_rule_args_and_the_offending_rows():
    ok = _check(success=True, table="corpus")
    bad = _check(table="scifact/full", column="claim", rule="expect_column_value_lengths_to_be_between",
                 args="min_value=10, max_value=1000", unexpected_count=2, element_count=7,
                 examples=[{"id": "1", "value": "short"}, {"id": 2, "value": None}])
    res = _result(ok, bad)
    assert res.failures == [bad]
    assert res.summary() == (
        "1 of 2 data checks FAILED:\n"
        "  - scifact/full, column 'claim': expect_column_value_lengths_to_be_between "
        "(min_value=10, max_value=1000): 2 of 7 rows, e.g. id 1 -> 'short'; id 2 -> None")


def test_summary_of_a_table_rule_has_no_column_and_shows_the_detail():
    res = _result(_check(table="healthfc/full[test]", rule="expect_table_row_count_to_equal", args="value=750",
                         detail="observed 7"),
                  _check(table="corpus", rule="expect_y", detail=None))
    assert res.summary().splitlines() == [
        "2 of 2 data checks FAILED:",
        "  - healthfc/full[test]: expect_table_row_count_to_equal (value=750): observed 7",
        "  - corpus: expect_y: "]


def test_summary_counts_rows_even_without_examples():
    line = _result(_check(rule="expect_z", unexpected_count=0, element_count=0, detail="ignored")).summary()
    assert line.splitlines()[1] == "  - t: expect_z: 0 of 0 rows"  # a count, even a zero one, wins over the detail


def test_example_values_are_shown_whole_up_to_60_characters_then_cut_to_60():
    whole, long = "w" * 60, "abcdefghij" * 6 + "k"
    assert _examples_line([{"id": "a", "value": whole}]).endswith(f"e.g. id a -> {whole!r}")
    shown = long[:57] + "..."
    assert len(shown) == 60 and _examples_line([{"id": "b", "value": long}]).endswith(f"e.g. id b -> {shown!r}")


def test_an_example_without_id_is_its_value_alone():
    # A list (not a string) is never shortened: only text is cut.
    assert _examples_line([{"value": "x" * 70}]).endswith("e.g. " + repr("x" * 57 + "..."))
    assert _examples_line([{"value": [1, 2]}, {"id": None, "value": 3}]).endswith("e.g. [1, 2]; id None -> 3")


# --- one GX result -> one check ----------------------------------------------------------------------

def _gx(kwargs: dict, type_: str = "expect_column_values_to_be_in_set", success: bool = False,
        result: dict | None = None, exception: dict | None = None) -> SimpleNamespace:
    """Stand-in for a GX ExpectationValidationResult (the attributes the report reads)."""
    return SimpleNamespace(expectation_config=SimpleNamespace(kwargs={"batch_id": "b1", **kwargs}, type=type_),
                           success=success, result=result, exception_info=exception)


def _table(rows: int = 1) -> Table:
    import pandas as pd

    return Table("scifact/full", "scifact", pd.DataFrame({"id": list(range(rows))}))


def test_a_passing_check_keeps_its_counts_and_args_without_examples():
    r = _gx({"column": "label", "value_set": list(LABELS), "mostly": 1.0}, success=True,
            result={"element_count": 7, "unexpected_count": 0, "unexpected_index_list": []})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check == {"table": "scifact/full", "dataset": "scifact", "column": "label",
                     "rule": "expect_column_values_to_be_in_set",
                     "args": f"mostly=1.0, value_set={list(LABELS)}", "success": True,
                     "element_count": 7, "unexpected_count": 0}


@pytest.mark.parametrize("n", [10, 11])
def test_a_long_value_set_is_shown_as_its_size(n):
    values = [str(i) for i in range(n)]
    r = _gx({"column": "doc_id", "value_set": values}, success=True, result={})
    args = _check_from_result(_table(), r, ValidateConfig())["args"]
    assert args == (f"value_set={values}" if n <= 10 else f"value_set=<{n} values>")


def test_offending_rows_are_named_once_each_and_limited_to_max_examples():
    rows = [{"id": np.int64(4), "claim": "short"}, {"id": np.int64(4), "claim": "short"},  # the same row twice
            {"id": "7", "claim": float("nan")}, {"id": "8", "claim": "x"}, {"id": "9", "claim": "y"}]
    r = _gx({"column": "claim", "min_value": 10}, "expect_column_value_lengths_to_be_between",
            result={"element_count": 27, "unexpected_count": 5, "unexpected_index_list": rows,
                    "partial_unexpected_list": ["ignored"]})
    check = _check_from_result(_table(), r, ValidateConfig(max_examples=3))
    assert check["success"] is False and (check["unexpected_count"], check["element_count"]) == (5, 27)
    assert check["examples"] == [{"id": 4, "value": "short"}, {"id": "7", "value": None}, {"id": "8", "value": "x"}]
    assert type(check["examples"][0]["id"]) is int  # plain JSON data, not numpy
    json.dumps(check)  # the report is plain JSON


def test_without_row_ids_the_partial_unexpected_values_are_the_examples():
    r = _gx({"column": "label"}, result={"element_count": 3, "unexpected_count": 2, "unexpected_index_list": None,
                                        "partial_unexpected_list": ["MAYBE", np.float64("nan"), np.int64(3)]})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check["examples"] == [{"value": "MAYBE"}, {"value": None}, {"value": 3}]


def test_a_rule_that_raised_is_a_failure_naming_the_column_and_the_cut_message():
    message = "KeyError: 'claim' " + "z" * 300
    r = _gx({"column": "claim"}, "expect_column_values_to_not_be_null", success=True,
            result={"unexpected_count": 3}, exception={"raised_exception": True, "exception_message": message})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check["success"] is False and "unexpected_count" not in check
    assert check["detail"] == f"could not be evaluated (is column 'claim' missing?): {message[:200]}"


def test_a_rule_that_raised_without_a_message_still_says_what_to_check():
    r = _gx({"column": "label"}, "expect_column_values_to_be_in_set", exception={"raised_exception": True})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check["detail"] == "could not be evaluated (is column 'label' missing?): "


def test_bare_row_numbers_are_not_examples():
    # Without an id column GX lists offending rows by number; the values then come from the partial list.
    r = _gx({"column": "label"}, result={"element_count": 3, "unexpected_count": 1, "unexpected_index_list": [2],
                                        "partial_unexpected_list": ["MAYBE"]})
    assert _check_from_result(_table(), r, ValidateConfig())["examples"] == [{"value": "MAYBE"}]


def test_exception_info_without_a_raised_exception_is_ignored():
    r = _gx({"column": "id"}, success=True, result={"element_count": 2, "unexpected_count": 0},
            exception={"raised_exception": False, "exception_message": None})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check["success"] is True and "detail" not in check and check["unexpected_count"] == 0


@pytest.mark.parametrize("success", [True, False])
def test_a_table_rule_reports_the_observed_value(success):
    r = _gx({"value": 809}, "expect_table_row_count_to_equal", success=success, result={"observed_value": 23})
    check = _check_from_result(_table(), r, ValidateConfig())
    assert check["column"] is None and check["args"] == "value=809" and check["observed"] == 23
    assert check.get("detail") == (None if success else "observed 23")


@pytest.mark.parametrize(("rows", "detail"), [(0, "the table is empty"), (2, "the column does not exist")])
def test_a_failure_without_counts_says_why(rows, detail):
    r = _gx({"column": "label"}, "expect_column_to_exist", result={})
    assert _check_from_result(_table(rows), r, ValidateConfig())["detail"] == detail


def test_a_success_without_counts_has_no_detail():
    r = _gx({"column": "label"}, "expect_column_to_exist", success=True, result=None)
    check = _check_from_result(_table(0), r, ValidateConfig())
    assert check["success"] is True and "detail" not in check


# --- config and tables -------------------------------------------------------------------------------

def test_config_paths_become_paths_and_no_metrics_path_stays_none():
    cfg = ValidateConfig(prepared_dir="p", report_path="r.json", metrics_path="")
    assert (cfg.prepared_dir, cfg.report_path, cfg.metrics_path) == (Path("p"), Path("r.json"), None)
    assert ValidateConfig(metrics_path="m.json").metrics_path == Path("m.json")


def test_missing_prepared_dir_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match=r"no prepared data\. Run `biocheck data prepare` first") as err:
        build_tables(ValidateConfig(prepared_dir=tmp_path / "nowhere"))
    assert str(tmp_path / "nowhere") in str(err.value)


@pytest.fixture
def prepared(tmp_path) -> Path:
    out = tmp_path / "prepared"
    prepare(PrepareConfig(raw_dir=write_raw(tmp_path / "raw"), out_dir=out, metrics_path=None,
                          keep_labels={"train": ALL, "val": ALL, "test": ALL}))
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _rules(table: Table) -> list[tuple[str, dict]]:
    return [(e.expectation_type, dict(e.configuration.kwargs)) for e in table.expectations]


def test_tables_and_their_rules_follow_the_prepared_data(prepared):
    cfg = ValidateConfig(prepared_dir=prepared, claim_min_chars=12, claim_max_chars=345,
                         expected_rows={"scifact": {"train+val": 5, "test": 6}, "healthfc": {}})
    tables = {t.name: t for t in build_tables(cfg)}
    assert list(tables) == ["corpus", "scifact/full", "scifact/references", "scifact/evidence", "scifact/gold",
                            "scifact/full[train+val]", "scifact/full[test]", "scifact/train.jsonl",
                            "scifact/val.jsonl", "scifact/test.jsonl", "scifact/working", "healthfc/full",
                            "healthfc/references", "healthfc/evidence", "healthfc/test.jsonl", "healthfc/working"]
    assert {n: t.dataset for n, t in tables.items() if n != "corpus"} == {n: n.split("/")[0] for n in tables
                                                                          if n != "corpus"}
    assert tables["corpus"].dataset == "scifact"  # the corpus is SciFact's

    corpus = _rows(prepared / "corpus.jsonl")
    doc_ids = sorted(str(c["id"]) for c in corpus)
    assert tables["corpus"].df.to_dict("records") == [
        {"id": str(c["id"]), "title": c["title"], "n_sentences": len(c["abstract"])} for c in corpus]
    assert _rules(tables["corpus"]) == [
        ("expect_column_values_to_not_be_null", {"column": "id"}),
        ("expect_column_values_to_be_unique", {"column": "id"}),
        ("expect_column_values_to_not_be_null", {"column": "title"}),
        ("expect_column_values_to_be_between", {"column": "n_sentences", "min_value": 1})]

    for ds, splits in (("scifact", ["train", "val", "test"]), ("healthfc", ["test"])):
        full_rows = _rows(prepared / "full" / f"{ds}.jsonl")
        full = tables[f"{ds}/full"]
        assert full.df["id"].tolist() == [r["id"] for r in full_rows]
        assert all(full.df[c].dtype == object for c in REQUIRED_COLUMNS)
        assert _rules(full) == (
            [("expect_column_to_exist", {"column": c}) for c in REQUIRED_COLUMNS]
            + [("expect_column_values_to_not_be_null", {"column": c}) for c in REQUIRED_COLUMNS]
            + [("expect_column_value_lengths_to_be_between", {"column": "claim", "min_value": 12, "max_value": 345}),
               ("expect_column_values_to_not_match_regex", {"column": "claim", "regex": r"^\s*$"}),
               ("expect_column_values_to_be_in_set", {"column": "label", "value_set": list(LABELS)}),
               ("expect_column_values_to_be_in_set", {"column": "dataset", "value_set": [ds]}),
               ("expect_column_values_to_be_in_set", {"column": "split", "value_set": splits}),
               ("expect_column_values_to_be_unique", {"column": "id"})])

        files = [(f"full/{ds}.jsonl", full_rows)] + [(f"{ds}/{s}.jsonl", _rows(prepared / ds / f"{s}.jsonl"))
                                                     for s in splits]
        refs = tables[f"{ds}/references"]
        gold = [{"id": f"{r['id']} (gold, {f})", "doc_id": str(ev["doc_id"])}
                for f, rows in files for r in rows for ev in r["evidence"]]
        cited = [{"id": f"{r['id']} (cited, {f})", "doc_id": str(d)} for f, rows in files for r in rows
                 for d in r["cited_doc_ids"]]
        assert sorted(refs.df.to_dict("records"), key=str) == sorted(gold + cited, key=str)
        assert list(refs.df.columns) == ["id", "doc_id"]
        assert _rules(refs) == [("expect_column_values_to_not_be_null", {"column": "doc_id"}),
                                ("expect_column_values_to_be_in_set", {"column": "doc_id", "value_set": doc_ids})]
        evidence = tables[f"{ds}/evidence"]
        assert evidence.df.to_dict("records") == [
            {"id": f"{r['id']} (gold, {f})", "label": ev["label"], "bad_sentences": None}
            for f, rows in files for r in rows for ev in r["evidence"]]
        assert _rules(evidence) == [("expect_column_values_to_not_be_null", {"column": "label"}),
                                    ("expect_column_values_to_be_in_set", {"column": "label",
                                                                           "value_set": list(LABELS)}),
                                    ("expect_column_values_to_be_null", {"column": "bad_sentences"})]
        if ds == "scifact":  # HealthFC has no rationales, so no label-evidence rule
            gold = tables[f"{ds}/gold"]
            assert gold.df.to_dict("records") == [{"id": f"{r['id']} ({f})", "label_vs_evidence": None}
                                                  for f, rows in files for r in rows]
            assert _rules(gold) == [("expect_column_values_to_be_null", {"column": "label_vs_evidence"})]

        for (f, rows), split in zip(files[1:], splits, strict=True):
            table = tables[f]
            assert table.df["id"].tolist() == [r["id"] for r in rows]
            assert table.df["differs_from_full"].tolist() == [None] * len(rows)
            assert _rules(table) == [("expect_column_values_to_be_null", {"column": "differs_from_full"}),
                                     ("expect_column_values_to_be_in_set", {"column": "split", "value_set": [split]}),
                                     ("expect_column_values_to_be_in_set", {"column": "label", "value_set": ALL})]
        work = tables[f"{ds}/working"]
        assert work.df["id"].tolist() == [r["id"] for _, rows in files[1:] for r in rows]
        assert _rules(work) == [("expect_column_values_to_be_unique", {"column": "id"})]

    scifact = _rows(prepared / "full" / "scifact.jsonl")
    for group, n in (("train+val", 5), ("test", 6)):
        table = tables[f"scifact/full[{group}]"]
        assert table.df["id"].tolist() == [r["id"] for r in scifact if r["split"] in group.split("+")]
        assert _rules(table) == [("expect_table_row_count_to_equal", {"value": n})]
    assert tables["healthfc/references"].df.empty and tables["healthfc/evidence"].df.empty  # no corpus docs


def test_a_corpus_record_without_id_stays_missing(prepared):
    rows = _rows(prepared / "corpus.jsonl")
    rows[0].pop("id")
    rows[1]["abstract"] = None
    (prepared / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus, _, refs = build_tables(ValidateConfig(prepared_dir=prepared, expected_rows={}))[:3]
    assert corpus.df["id"].isna().tolist()[:2] == [True, False]  # missing, not the text "None" ...
    assert _rules(refs)[1][1]["value_set"] == sorted(str(r["id"]) for r in rows[1:])  # ... and no known doc
    assert corpus.df["n_sentences"].tolist()[1] == 0
    assert _rules(corpus)[-1][1]["column"] == "n_sentences"


def test_without_a_split_column_a_row_count_covers_the_whole_file(prepared):
    path = prepared / "full" / "healthfc.jsonl"
    rows = _rows(path)
    path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "split"}) + "\n" for r in rows))
    tables = {t.name: t for t in build_tables(ValidateConfig(prepared_dir=prepared,
                                                            expected_rows={"healthfc": {"test": 1}}))}
    assert len(tables["healthfc/full[test]"].df) == len(rows)
    assert set(tables["healthfc/test.jsonl"].df["differs_from_full"]) == {
        "split 'test', full/healthfc.jsonl has None"}


# --- working records against the full data ---------------------------------------------------------

FULL = [{"id": "1", "claim": "A claim.", "label": "NEI"}, {"id": "2", "claim": "B", "label": "SUPPORTED"},
        {"id": "1", "claim": "A duplicate.", "label": "REFUTED"}]


@pytest.mark.parametrize("row, differs", [
    ({"id": "1", "claim": "A claim.", "label": "NEI"}, None),
    ({"claim": "A claim.", "label": "NEI", "id": "1"}, None),  # key order does not matter
    ({"id": "1", "claim": "A claim.", "label": "REFUTED"}, "label 'REFUTED', full/x.jsonl has 'NEI'"),
    # two fields differ: the first is named
    ({"id": "1", "claim": "Edited.", "label": "REFUTED"}, "claim 'Edited.', full/x.jsonl has 'A claim.'"),
    ({"id": "1", "claim": "A claim.", "label": "NEI", "note": 3}, "note 3, full/x.jsonl has None"),
    ({"id": "1", "claim": "A claim."}, "label None, full/x.jsonl has 'NEI'"),
    ({"id": 1, "claim": "A claim.", "label": "NEI"}, "not in full/x.jsonl"),  # ids are strings
    ({"id": ["1"], "claim": "A claim.", "label": "NEI"}, "not in full/x.jsonl"),  # unhashable: no crash
    ({"id": "3", "claim": "A claim.", "label": "NEI"}, "not in full/x.jsonl"),
    ({"id": None, "claim": "A claim.", "label": "NEI"}, "no id to find it by in full/x.jsonl"),
    ({"claim": "A claim.", "label": "NEI"}, "no id to find it by in full/x.jsonl"),
])
def test_a_working_record_is_compared_with_the_first_full_record_of_its_id(row, differs):
    from biocheck.data.validate import _differs_from_full, _key

    by_id = {_key(r["id"]): r for r in reversed(FULL)}
    assert _differs_from_full(row, by_id, "full/x.jsonl") == differs


@pytest.mark.parametrize("sentences, doc, problem", [
    ([0, 1], "d", None),
    ([1], "unknown", None),  # an unknown doc is the references table's to name
    ([5], "unknown", None),
    ([2], "d", "sentence 2 of doc d, which has 2"),
    ([0, -1], "d", "sentence -1 of doc d, which has 2"),
    ("x", "d", "'x' is not a list of sentence numbers"),
    ([], "d", "[] is not a list of sentence numbers"),
    ([True], "d", "[True] is not a list of sentence numbers"),
    ([0.0], "d", "[0.0] is not a list of sentence numbers"),
    (None, None, "None is not a list of sentence numbers"),
])
def test_gold_sentences_must_be_numbers_inside_their_abstract(sentences, doc, problem):
    from biocheck.data.gold import sentence_problem

    assert sentence_problem(sentences, doc, {"d": 2}.get(doc)) == problem


def test_malformed_evidence_lists_are_rows_for_the_rules_not_a_crash():
    from biocheck.data.validate import _evidence, _references

    rows = [{"id": "1", "evidence": "junk", "cited_doc_ids": 7}, {"id": "2", "evidence": [5, {"doc_id": 9}]},
            {"id": "3", "evidence": None, "cited_doc_ids": None}, {"id": "4"}]
    files = [("f.jsonl", rows)]
    assert _references(files).to_dict("records") == [
        {"id": "1 (gold, f.jsonl)", "doc_id": None}, {"id": "2 (gold, f.jsonl)", "doc_id": None},
        {"id": "2 (gold, f.jsonl)", "doc_id": "9"}, {"id": "1 (cited, f.jsonl)", "doc_id": "7"}]
    assert _evidence(files, {}).to_dict("records") == [
        {"id": "1 (gold, f.jsonl)", "label": None, "bad_sentences": "None is not a list of sentence numbers"},
        {"id": "2 (gold, f.jsonl)", "label": None, "bad_sentences": "None is not a list of sentence numbers"},
        {"id": "2 (gold, f.jsonl)", "label": None, "bad_sentences": "None is not a list of sentence numbers"}]


@pytest.mark.parametrize("manifest, kept", [
    (None, {}),
    ("not json", {}),
    ("[]", {}),
    ('{"config": {}}', {}),
    ('{"config": {"keep_labels": ["NEI"]}}', {}),
    ('{"config": {"keep_labels": {"train": ["NEI"], "val": "NEI"}}}', {"train": ["NEI"]}),
])
def test_the_kept_labels_come_from_the_manifest_when_it_records_them(tmp_path, manifest, kept):
    from biocheck.data.validate import _kept_labels

    if manifest is not None:
        (tmp_path / "manifest.json").write_text(manifest)
    assert _kept_labels(tmp_path) == kept


def test_a_working_file_keeps_the_labels_of_the_manifest_and_the_rest_all(prepared):
    path = prepared / "manifest.json"
    path.write_text(json.dumps({"config": {"keep_labels": {"train": ["REFUTED"]}}}))
    tables = {t.name: t for t in build_tables(ValidateConfig(prepared_dir=prepared, expected_rows={}))}
    assert _rules(tables["scifact/train.jsonl"])[-1][1]["value_set"] == ["REFUTED"]
    assert _rules(tables["scifact/val.jsonl"])[-1][1]["value_set"] == list(LABELS)


def test_every_working_split_of_the_schema_has_a_file_check(prepared):
    from biocheck.data.validate import file_checks

    (prepared / "scifact" / "val.jsonl").unlink()
    checks = file_checks(ValidateConfig(prepared_dir=prepared))
    assert [(c["table"], c["success"]) for c in checks] == [
        ("scifact/train.jsonl", True), ("scifact/val.jsonl", False), ("scifact/test.jsonl", True),
        ("healthfc/test.jsonl", True)]
    assert checks[1]["detail"].startswith("missing. Re-create it with `dvc repro -f -s prepare`")
    assert {c["rule"] for c in checks} == {"expect_file_to_exist"} and "detail" not in checks[0]


def test_no_working_files_means_no_working_table(prepared):
    for split in ("train", "val", "test"):
        (prepared / "scifact" / f"{split}.jsonl").unlink(missing_ok=True)
    names = [t.name for t in build_tables(ValidateConfig(prepared_dir=prepared, expected_rows={}))]
    assert "scifact/working" not in names and "healthfc/working" in names


def test_report_and_metrics_files(prepared, tmp_path, monkeypatch):
    import biocheck.data.validate as v

    checks = [_check(success=True), _check(success=False, detail="bad")]
    given = []
    monkeypatch.setattr(v, "run_checks", lambda tables, cfg: given.append((tables, cfg)) or ValidationResult(False, checks))
    cfg = ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "r.json", metrics_path=tmp_path / "m.json")
    result = validate(cfg)
    assert result.success is False
    (tables, used), = given
    assert used is cfg and [t.name for t in tables] == [t.name for t in build_tables(cfg)]  # every suite runs
    files = v.file_checks(cfg)  # every working file is present: these pass, listed first
    assert len(files) == 4 and all(c["success"] for c in files)
    counts = v.count_checks(cfg)  # every file holds the records the manifest counted: these pass, listed next
    assert len(counts) == 9 and all(c["success"] for c in counts)
    assert json.loads(cfg.report_path.read_text()) == {"success": False, "n_checks": 15, "n_failed": 1,
                                                       "checks": files + counts + checks}
    assert json.loads(cfg.metrics_path.read_text()) == {"success": False, "checks": 15, "failed": 1}
    cfg2 = ValidateConfig(prepared_dir=prepared, report_path=tmp_path / "r2.json", metrics_path=None)
    validate(cfg2)
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".json") == ["m.json", "r.json", "r2.json"]


def test_running_the_suites_turns_gx_analytics_off_unless_the_user_chose(monkeypatch):
    from biocheck.data.validate import run_checks

    monkeypatch.delenv("GX_ANALYTICS_ENABLED", raising=False)
    assert run_checks([], ValidateConfig()) == ValidationResult(success=True, checks=[])
    assert os.environ["GX_ANALYTICS_ENABLED"] == "false"  # nothing phones home from a pipeline run
    monkeypatch.setenv("GX_ANALYTICS_ENABLED", "true")
    run_checks([], ValidateConfig())
    assert os.environ["GX_ANALYTICS_ENABLED"] == "true"


def test_running_the_suites_leaves_a_gx_project_in_the_working_directory_alone(tmp_path, monkeypatch):
    import great_expectations as gx
    import great_expectations.expectations as gxe
    import pandas as pd

    from biocheck.data.validate import run_checks

    gx.get_context(mode="file", project_root_dir=tmp_path)  # the user's own GX project, here
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)
    table = Table("t", "scifact", pd.DataFrame({"id": ["1", "2"]}), [gxe.ExpectColumnValuesToBeUnique(column="id")])
    assert run_checks([table], ValidateConfig()).success
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing saved into it


@pytest.mark.parametrize("dataset, label, evidence, problem", [
    ("scifact", "SUPPORTED", ["SUPPORTED"], None),
    ("scifact", "REFUTED", ["REFUTED", "REFUTED"], None),
    ("scifact", "NEI", [], None),
    ("scifact", "SUPPORTED", [], "SUPPORTED with no gold rationale; a scifact SUPPORTED claim has at least one"),
    ("scifact", "REFUTED", [], "REFUTED with no gold rationale; a scifact REFUTED claim has at least one"),
    ("scifact", "NEI", ["SUPPORTED"], "NEI with 1 gold rationale(s); an NEI claim has none"),
    ("scifact", "SUPPORTED", ["SUPPORTED", "REFUTED"],
     "SUPPORTED with a REFUTED rationale; every rationale is on the claim's side"),
    ("healthfc", "SUPPORTED", [], None),  # HealthFC records carry no rationales
])
def test_a_label_needs_rationales_on_its_side_and_nei_none(dataset, label, evidence, problem):
    from biocheck.data.gold import label_problem

    assert label_problem(dataset, label, evidence) == problem


def test_labels_that_are_not_ours_are_left_to_the_label_rules():
    from biocheck.data.gold import label_problem

    assert label_problem("scifact", "MAYBE", ["SUPPORTED"]) is None
    assert label_problem("scifact", "SUPPORTED", ["ZZZ"]) is None
