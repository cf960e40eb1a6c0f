"""Batches under hostile input: any claim id gets a bounded file name of its own, text that is not valid
Unicode is refused with its record, one bad claim fails alone, and an --out belongs to one run key (model,
prompts, settings and the evidence index's content): another run into it is refused, never mixed.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from biocheck.agent.episode import Agent, AgentConfig, Episode
from biocheck.agent.run import read_claims, run_batch, trace_name, trace_path
from biocheck.cli import app
from biocheck.evidence.local import LocalIndex, index_fingerprint
from biocheck.evidence.types import Article
from biocheck.io import InputError
from tests.helpers.batch import CLAIMS, SEARCH, RecordingChat
from tests.helpers.batch import batch_ids as run_ids
from tests.helpers.cli import assert_one_clear_line
from tests.helpers.turns import REPORT, TABLE, TableTool

runner = CliRunner()
NAME_MAX = os.pathconf("/", "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
TMP_EXTRA = len(".tmp-") + len(".") + 8  # what an atomic write adds to the name of its temporary file
CJK_80 = "生物医学事实核查" * 10  # 80 characters, 240 bytes in UTF-8


# -- file names: bounded in bytes, any text, distinct ids never share one ------------------------------------------

def file_bytes(claim_id: str) -> int:
    return len(f"{trace_name(claim_id)}.json".encode())


@pytest.mark.parametrize("cid", [CJK_80, "生" * 300, "😀" * 100, "é" * 200, "a" * 300, "\ud800", "x\udcff" * 90])
def test_a_trace_name_fits_any_file_system_in_bytes_with_room_for_its_temporary(cid):
    assert file_bytes(cid) + TMP_EXTRA <= 143  # eCryptfs' limit, the smallest in common use (ext4's is 255)
    trace_name(cid).encode("utf-8")  # never a lone surrogate in a file name


@given(st.lists(st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=120),
                min_size=2, max_size=8, unique=True))
@settings(max_examples=300, deadline=None)
def test_distinct_ids_get_distinct_bounded_names_even_on_a_case_insensitive_disk(ids):
    names = [trace_name(i) for i in ids]
    assert len({n.casefold() for n in names}) == len(ids)
    for n in names:
        assert file_bytes(n) <= 143 - TMP_EXTRA and n.encode("utf-8") and not n.startswith(".")
        assert "/" not in n and "\\" not in n and "\x00" not in n and n.lower() not in {"summary", "metrics", "scores"}


def test_a_batch_with_an_id_of_80_cjk_characters_writes_every_trace(tmp_path):
    claims = [*CLAIMS[:2], {"claim": "Claim number 9 is true.", "claim_id": CJK_80}]
    assert run_ids(tmp_path, claims) == sorted(["c0", "c1", CJK_80])
    ep = Episode.model_validate_json(trace_path(tmp_path, CJK_80).read_text(encoding="utf-8"))
    assert ep.claim_id == CJK_80
    assert run_ids(tmp_path, claims) == []  # and the rerun finds it


def test_the_cli_batch_with_long_cjk_and_emoji_ids_exits_0(check_workdir):  # noqa: F811
    claims = check_workdir / "claims.jsonl"
    claims.write_text("".join(json.dumps({"id": i, "claim": "Vitamin D prevents fractures."}, ensure_ascii=a) + "\n"
                              for i, a in ((CJK_80, False), ("😀" * 70, True), ("b", False))), encoding="utf-8")
    r = runner.invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", "scripted:script.json"])
    assert r.exit_code == 0, r.output
    assert json.loads((check_workdir / "out" / "summary.json").read_text())["episodes"] == 3


# -- text that is not valid Unicode: that record fails alone, with its record number; the others run -----------------

@pytest.mark.parametrize("record, field", [('{"id": "\\ud800", "claim": "A."}', "'id'"),
                                           ('{"id": "a", "claim": "Vitamin \\udcff D."}', "'claim'"),
                                           ('{"claim": "A.", "dataset": "sci\\ud800"}', "'dataset'")])
def test_a_lone_surrogate_fails_its_record_alone_and_the_others_run(tmp_path, record, field):
    path = tmp_path / "claims.jsonl"
    path.write_text('{"id": "ok", "claim": "Fine."}\n' + record + "\n")
    ok, bad = read_claims(path)
    assert "problem" not in ok and re.search(rf"record 2: {field} .*surrogate", bad["problem"])
    bad["problem"].encode("utf-8")  # the message itself can be printed
    out = tmp_path / "out"
    assert run_ids(out, [ok, bad]) == ["ok"]  # the bad one never reached the model
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))  # valid UTF-8, whatever the id
    assert summary["episodes"] == 1 and [f["error"] for f in summary["failed"]] == [bad["problem"]]
    assert trace_path(out, "ok").is_file()


def test_the_cli_batch_with_a_lone_surrogate_runs_the_others_and_exits_1(check_workdir):  # noqa: F811
    (check_workdir / "claims.jsonl").write_text('{"id": "a", "claim": "A."}\n{"id": "b\\ud800", "claim": "B."}\n')
    r = runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "out", "--llm", "scripted:script.json"])
    assert_one_clear_line(r, "1 of 2 claims failed", "b\\ud800", "record 2", "surrogate")
    assert trace_path(check_workdir / "out", "a").is_file()
    failed = json.loads((check_workdir / "out" / "summary.json").read_text(encoding="utf-8"))["failed"]
    assert [f["id"] for f in failed] == ["b\\ud800"]


def test_a_single_claim_with_a_lone_surrogate_is_one_line_not_a_traceback(check_workdir):  # noqa: F811
    r = runner.invoke(app, ["check", "caf\udcff claim", "--llm", "scripted:script.json", "--trace", "t.json"])
    assert_one_clear_line(r, "claim", "surrogate")
    assert not (check_workdir / "t.json").exists()


# -- one bad claim fails alone ---------------------------------------------------------------------------------

def test_a_claim_whose_trace_cannot_be_written_is_listed_and_the_others_run(tmp_path):
    (tmp_path / "c1.json").mkdir()  # something that is not a file holds c1's trace name
    summary = run_batch(Agent(RecordingChat(), TableTool(TABLE), AgentConfig(llm="scripted:<inline>")), CLAIMS,
                        tmp_path, progress=False, search=SEARCH)
    assert [f["id"] for f in summary["failed"]] == ["c1"] and summary["episodes"] == 3
    assert all(trace_path(tmp_path, c).is_file() for c in ("c0", "c2", "c3"))


# -- one --out, one run key ----------------------------------------------------------------------------------------

def snapshot(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("change, named", [
    ({"llm": RecordingChat([{"content": REPORT + "\n"}])}, "llm_fingerprint"),  # another model
    ({"cfg": AgentConfig(llm="scripted:other")}, "llm"),
    ({"cfg": AgentConfig(llm="scripted:<inline>", max_searches=2)}, "agent.max_searches"),  # other prompts too
    ({"search": {**SEARCH, "max_results": 2}}, "search.max_results"),
    ({"search": {**SEARCH, "backend": "replay"}}, "search.backend"),
])
def test_a_second_run_with_another_key_into_the_same_out_is_refused_and_changes_nothing(tmp_path, change, named):
    run_ids(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(InputError) as info:
        run_ids(tmp_path, **change)
    text = str(info.value)
    assert "--out" in text and named in text and "\n" not in text, text
    assert snapshot(tmp_path) == before  # no trace overwritten, the summary untouched
    assert run_ids(tmp_path / "new", **change) == ["c0", "c1", "c2", "c3"]  # a new --out runs it


def test_another_runs_traces_of_other_claims_also_refuse_the_out(tmp_path):
    run_ids(tmp_path, CLAIMS[:2])
    others = [{"claim": "Another claim.", "claim_id": "z9"}]
    with pytest.raises(InputError, match="--out"):
        run_ids(tmp_path, others, cfg=AgentConfig(llm="scripted:<inline>", temperature=0.5))


def test_the_same_key_still_resumes_and_new_claims_join_the_run(tmp_path):
    run_ids(tmp_path, CLAIMS[:2])
    assert run_ids(tmp_path) == ["c2", "c3"]
    assert json.loads((tmp_path / "summary.json").read_text())["reused"] == 2


def test_the_cli_refuses_a_second_model_into_the_same_out_with_one_line(check_workdir):  # noqa: F811
    (check_workdir / "other.json").write_text(json.dumps([{"content": REPORT + "\n"}]))
    claims = check_workdir / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n{"id": "b", "claim": "B."}\n')
    args = ["check", "--claims", str(claims), "--out", "out"]
    assert runner.invoke(app, [*args, "--llm", "scripted:script.json"]).exit_code == 0
    before = snapshot(check_workdir / "out")
    r = runner.invoke(app, [*args, "--llm", "scripted:other.json"])
    assert_one_clear_line(r, "--out", "another run")
    assert snapshot(check_workdir / "out") == before
    r = runner.invoke(app, [*args, "--llm", "scripted:script.json"])  # the first model again: resumes
    assert r.exit_code == 0 and json.loads((check_workdir / "out" / "summary.json").read_text())["reused"] == 2


# -- the evidence index is part of the key ---------------------------------------------------------------------

PAPERS = [Article(pmid=str(100 + i), title=f"Paper {i}", abstract=f"Vitamin D study number {i}.") for i in range(3)]


def local_search(index) -> dict:
    return {**SEARCH, "index_dir": str(index)}


def test_the_index_fingerprint_follows_its_content_not_its_build(tmp_path):
    index = tmp_path / "index"
    LocalIndex.build(PAPERS, index)
    first = index_fingerprint(index)
    LocalIndex.build(PAPERS, index)  # rebuilt from the same papers
    assert first is not None and index_fingerprint(index) == first
    LocalIndex.build([*PAPERS, Article(pmid="999", title="New", abstract="A new top-ranked paper.")], index)
    assert index_fingerprint(index) != first
    LocalIndex.build(PAPERS, index)
    LocalIndex.open(index).add([Article(pmid="998", title="Added", abstract="Added later.")])
    assert index_fingerprint(index) not in (None, first)
    assert index_fingerprint(tmp_path / "nowhere") is None


def test_a_batch_rerun_after_the_index_changed_reuses_no_trace(tmp_path):
    index, out = tmp_path / "index", tmp_path / "out"
    LocalIndex.build(PAPERS, index)
    run_ids(out, search=local_search(index))
    LocalIndex.build(PAPERS, index)  # an identical rebuild: still the same run
    assert run_ids(out, search=local_search(index)) == []
    LocalIndex.build([*PAPERS, Article(pmid="999", title="New", abstract="A new top-ranked paper.")], index)
    before = snapshot(out)
    with pytest.raises(InputError, match="evidence"):
        run_ids(out, search=local_search(index))
    assert snapshot(out) == before
    assert run_ids(tmp_path / "out2", search=local_search(index)) == ["c0", "c1", "c2", "c3"]


def test_an_evaluation_reruns_its_episodes_in_a_new_folder_when_the_index_changed(tmp_path):
    from biocheck.evaluate.harness import run_system
    from biocheck.evaluate.systems import make_system
    from biocheck.evidence.search import SearchConfig
    from tests.helpers.eval_project import claims

    index, out = tmp_path / "index", tmp_path / "eval"
    (tmp_path / "script.json").write_text(json.dumps([{"content": REPORT}]))
    cfg = SearchConfig(index_dir=index, store=tmp_path / "ev.sqlite")

    def folders(name: str) -> int:
        """Runs `name` on two claims; how many trace folders (one per system fingerprint) it then has."""
        system = make_system(name, llm=f"scripted:{tmp_path / 'script.json'}", agent_cfg=AgentConfig(),
                             search_cfg=cfg)
        run_system(system, claims(2), "scifact", out, progress=False)
        return len(list((out / "traces" / name).iterdir()))

    LocalIndex.build(PAPERS, index)
    assert folders("base") == 1 and folders("no_retrieval") == 1
    LocalIndex.build(PAPERS, index)  # an identical rebuild: the same evidence, episodes reused
    assert folders("base") == 1
    LocalIndex.build([*PAPERS, Article(pmid="999", title="New", abstract="A new top-ranked paper.")], index)
    assert folders("base") == 2  # new evidence: the agent's episodes run again, beside the old ones
    assert folders("no_retrieval") == 1  # a system that never searches keeps its episodes


def test_a_second_batch_into_an_out_being_written_is_refused(tmp_path):
    """Two batches started together would both pass the one-run check: the folder is locked while one runs."""
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a batch in another process holds it
        with pytest.raises(InputError, match="another batch is writing into this folder"):
            run_ids(out, CLAIMS[:1])
        assert list(out.iterdir()) == []
    finally:
        os.close(fd)
    assert run_ids(out, CLAIMS[:1]) == ["c0"]  # released: the batch runs


def test_traces_from_before_the_evidence_key_are_rerun_not_refused(tmp_path):
    """An --out an older version wrote has no `evidence` in its keys: the same run, resumed by rerunning them."""
    index, out = tmp_path / "index", tmp_path / "out"
    LocalIndex.build(PAPERS, index)
    search = local_search(index)
    assert run_ids(out, CLAIMS[:2], search=search) == ["c0", "c1"]
    for c in CLAIMS[:2]:
        path = trace_path(out, c["claim_id"])
        trace = json.loads(path.read_text())
        assert trace["run_key"].pop("evidence")  # as an older version wrote it
        path.write_text(json.dumps(trace))
    assert run_ids(out, CLAIMS[:2], search=search) == ["c0", "c1"]  # rerun (their key lacks a part), not refused
    assert run_ids(out, CLAIMS[:2], search=search) == []
