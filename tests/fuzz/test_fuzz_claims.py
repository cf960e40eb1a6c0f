"""Fuzzing a batch's claims file: any ids and texts (any script, emoji, lone surrogates, control characters,
very long), any JSON shapes. Either the file is refused with one InputError naming the record, or every claim
runs and gets its own trace that reads back with its exact id — never a traceback, never two claims in one
file, never a file outside --out."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from hypothesis import event, given
from hypothesis import strategies as st

from biocheck.agent.episode import Episode
from biocheck.agent.run import read_claims, trace_path
from biocheck.io import InputError
from tests.helpers.batch import batch_ids as run_batch_ids

any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=90)
valid_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=90)
ids = st.one_of(valid_text, any_text, st.integers(-5, 10**12), st.none(), st.booleans(), st.just("summary"),
                st.just("a/b"), st.just("a_b"), st.just("." * 3), st.text(alphabet="生😀é", min_size=60, max_size=200))
record = st.fixed_dictionaries(
    {"claim": st.one_of(valid_text.filter(str.strip), any_text), "id": ids},
    optional={"label": st.sampled_from(["SUPPORTED", "REFUTED", "NEI", "yes", None]),
              "dataset": st.one_of(st.none(), valid_text, any_text, st.integers())})
# Mostly records (most of them valid, so claims do run), now and then a line that is no record at all.
lines = st.lists(st.one_of(record, record, record, st.just("not json"), st.just([1, 2]), st.just({})),
                 min_size=1, max_size=5)

def _jsonl(rows: list) -> str:
    # ensure_ascii: a lone surrogate travels as a "\ud800" escape, as another program would write it
    return "".join((row if isinstance(row, str) else json.dumps(row, ensure_ascii=True)) + "\n" for row in rows)


@given(lines)
def test_a_claims_file_is_refused_in_one_line_or_every_claim_gets_its_own_trace(rows):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "claims.jsonl"
        path.write_text(_jsonl(rows), encoding="utf-8")
        try:
            claims = read_claims(path)
        except InputError as e:
            event("refused")
            assert str(e).startswith(str(path)) and "\n" not in str(e).strip(), str(e)
            return
        event("ran")
        out = Path(tmp) / "out"
        good = [c for c in claims if not c.get("problem")]  # a lone surrogate fails its record alone
        ran = run_batch_ids(out, claims)  # asserts the summary covers every claim
        assert ran == sorted(c["claim_id"] for c in good)
        names = {trace_path(out, c["claim_id"]).name for c in good}
        assert len(names) == len(good)  # no two claims share a file
        for c in good:
            ep = Episode.model_validate_json(trace_path(out, c["claim_id"]).read_text(encoding="utf-8"))
            assert ep.claim_id == c["claim_id"] and ep.claim == c["claim"]
        failed = json.loads((out / "summary.json").read_text(encoding="utf-8"))["failed"]
        assert len(failed) == len(claims) - len(good)
        assert sorted(p.name for p in Path(tmp).iterdir()) == ["claims.jsonl", "out"]
        assert {p.name for p in out.iterdir()} == names | {"summary.json"}

valid_record = st.fixed_dictionaries(
    {"claim": valid_text.filter(str.strip),
     "id": st.one_of(valid_text.filter(str.strip), st.integers(0, 10**12), st.text(alphabet="生😀é/ .", min_size=1,
                                                                                  max_size=200).filter(str.strip))},
    optional={"label": st.sampled_from(["SUPPORTED", "REFUTED", "NEI"]), "dataset": valid_text})


@given(st.lists(valid_record, min_size=1, max_size=6, unique_by=lambda r: str(r["id"])))
def test_valid_claims_in_any_script_all_run_each_into_its_own_trace(rows):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "claims.jsonl"
        path.write_text(_jsonl(rows), encoding="utf-8")
        claims = read_claims(path)  # valid text of any script, any length: never refused
        out = Path(tmp) / "out"
        assert run_batch_ids(out, claims) == sorted(str(r["id"]) for r in rows)
        for c in claims:
            ep = Episode.model_validate_json(trace_path(out, c["claim_id"]).read_text(encoding="utf-8"))
            assert ep.claim_id == c["claim_id"] and ep.claim == c["claim"]
        assert len({trace_path(out, c["claim_id"]).name for c in claims}) == len(claims)
