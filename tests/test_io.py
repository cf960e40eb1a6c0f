"""JSONL as users write it (issue 30): a byte-order mark, UTF-16, a truncated or bad line, line separators in strings."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.io import InputError, parse_jsonl, read_jsonl

runner = CliRunner()


BOM = b"\xef\xbb\xbf"


def test_a_jsonl_file_starting_with_a_bom_is_read(tmp_path):
    path = tmp_path / "claims.jsonl"
    path.write_bytes(BOM + b'{"id": "a", "claim": "x"}\n{"id": "b", "claim": "y"}\n')
    assert read_jsonl(path) == [{"id": "a", "claim": "x"}, {"id": "b", "claim": "y"}]
    assert parse_jsonl(BOM + b'{"a": 1}', "one line, no newline") == [{"a": 1}]


def test_two_files_joined_keep_working_across_the_second_bom():
    assert parse_jsonl(b'{"a": 1}\n' + BOM + b'{"b": 2}\n', "joined") == [{"a": 1}, {"b": 2}]


def test_a_utf16_file_is_named_as_utf16_not_as_corrupt():
    with pytest.raises(InputError) as e:
        parse_jsonl(b"\xff\xfe" + '{"a": 1}\n'.encode("utf-16-le"), "f.jsonl")
    assert "UTF-16" in str(e.value) and "truncated" not in str(e.value)


def test_a_truncated_last_line_still_gets_the_hint():
    with pytest.raises(InputError, match="truncated"):
        parse_jsonl(BOM + b'{"a": 1}\n{"b": ', "cut.jsonl")


def test_a_complete_bad_line_is_not_called_truncated():
    with pytest.raises(InputError) as e:
        parse_jsonl(b'{"a": 1}\n{"b": oops}\n', "f.jsonl")
    assert "line 2: invalid JSON" in str(e.value) and "truncated" not in str(e.value)


def test_line_separators_inside_a_json_string_round_trip(tmp_path):
    from biocheck.io import dump_jsonl

    rows = [{"claim": "one\u2028two\u2029three\x85four\x1cfive\x0bsix\x0cseven"}, {"claim": "next"}]
    dump_jsonl(tmp_path / "f.jsonl", rows)  # ensure_ascii=False: the separators are written raw
    assert read_jsonl(tmp_path / "f.jsonl") == rows


def test_a_batch_of_claims_with_a_bom_runs_through_the_cli(evidence_workdir):
    (evidence_workdir / "script.json").write_text(json.dumps([{"content": "## Conclusion\nSUPPORTED\n"}]))
    (evidence_workdir / "claims.jsonl").write_bytes(BOM + b'{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    assert json.loads((evidence_workdir / "out" / "summary.json").read_text())["episodes"] == 1
