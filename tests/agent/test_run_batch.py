"""run_batch resumes per claim: a claim is rerun exactly when its own trace is missing, unreadable, or was made
for another claim text (another model, prompt, agent or search setting is another run, refused in the same
folder: tests/agent/test_run_batch_faults.py); traces never share a file.

The scripted model records every conversation it answers, so the tests count the episodes that
actually ran, not just the files on disk.
"""

from __future__ import annotations

import json
import logging

import pytest

from biocheck.agent.episode import AgentConfig, Episode
from biocheck.agent.run import trace_name, trace_path
from biocheck.io import InputError
from tests.helpers.batch import CLAIMS, SEARCH, RecordingChat, batch_ids
from tests.helpers.turns import REPORT


def test_a_fresh_batch_runs_every_claim_once(tmp_path):
    assert batch_ids(tmp_path) == ["c0", "c1", "c2", "c3"]
    assert all(trace_path(tmp_path, c["claim_id"]).is_file() for c in CLAIMS)


def test_an_interrupted_batch_runs_only_the_missing_claims(tmp_path):
    batch_ids(tmp_path)
    # as if the process died after two claims: their traces exist, the summary was never written
    (tmp_path / "summary.json").unlink()
    for cid in ("c1", "c3"):
        trace_path(tmp_path, cid).unlink()
    kept = trace_path(tmp_path, "c0").stat().st_mtime_ns
    assert batch_ids(tmp_path) == ["c1", "c3"]
    assert trace_path(tmp_path, "c0").stat().st_mtime_ns == kept


def test_a_finished_batch_reruns_exactly_the_claim_whose_trace_is_gone(tmp_path):
    batch_ids(tmp_path)
    trace_path(tmp_path, "c2").unlink()
    assert batch_ids(tmp_path) == ["c2"]
    assert batch_ids(tmp_path) == []  # nothing left to do


def test_resume_false_reruns_every_claim(tmp_path):
    batch_ids(tmp_path)
    assert batch_ids(tmp_path, resume=False) == ["c0", "c1", "c2", "c3"]


# -- trace names: one file per claim id, never the summary's ---------------------------------------------------

IDS = ["a/b", "a_b", "a:b", "summary", "Summary", "metrics", "scores", "A", "a", ".hidden", "..", "x" * 300,
       "x" * 301, "a_b-" + "0" * 10, "13", "scifact-13", "é"]


def test_every_claim_id_gets_its_own_file_even_on_a_case_insensitive_file_system():
    names = [trace_name(i) for i in IDS]
    assert len({n.lower() for n in names}) == len(IDS)
    assert not {n.lower() for n in names} & {"summary", "metrics", "scores"}
    assert all(len(n) <= 120 and not n.startswith(".") and "/" not in n for n in names)


@pytest.mark.parametrize("cid", ["c1", "13", "scifact-13", "claim_7.v2"])
def test_plain_ids_are_their_own_file_names(tmp_path, cid):
    assert trace_path(tmp_path, cid) == tmp_path / f"{cid}.json"


@pytest.mark.parametrize("cid, readable", [("a/b", "a_b-"), ("summary", "summary-"), ("Vit D", "Vit_D-")])
def test_other_ids_keep_a_readable_slug_and_add_a_hash_of_the_exact_id(cid, readable):
    name = trace_name(cid)
    assert name.startswith(readable) and len(name) == len(readable) + 10 and name != cid


def test_ids_that_slug_alike_and_an_id_named_summary_all_keep_their_trace(tmp_path):
    claims = [{"claim": f"Claim {i}.", "claim_id": cid} for i, cid in enumerate(["a/b", "a_b", "summary"])]
    assert batch_ids(tmp_path, claims) == ["a/b", "a_b", "summary"]
    traces = sorted(p.name for p in tmp_path.glob("*.json") if p.name != "summary.json")
    assert len(traces) == 3
    assert sorted(Episode.model_validate_json((tmp_path / t).read_text()).claim_id for t in traces) == [
        "a/b", "a_b", "summary"]
    assert json.loads((tmp_path / "summary.json").read_text())["episodes"] == 3
    assert batch_ids(tmp_path, claims) == []  # the rerun finds every trace (and the summary is not one)


# -- stale resume: a trace is reused only when what produced it is unchanged --------------------------------------

def test_a_changed_claim_text_reruns_that_claim_only(tmp_path):
    batch_ids(tmp_path)
    edited = [dict(c, claim="Claim number 2 is false.") if c["claim_id"] == "c2" else c for c in CLAIMS]
    assert batch_ids(tmp_path, edited) == ["c2"]
    assert Episode.model_validate_json(trace_path(tmp_path, "c2").read_text()).claim == "Claim number 2 is false."


def test_a_changed_gold_label_or_dataset_reruns_that_claim(tmp_path):
    batch_ids(tmp_path)
    edited = [dict(c, gold_label="REFUTED") if c["claim_id"] == "c1" else c for c in CLAIMS]
    assert batch_ids(tmp_path, edited) == ["c1"]
    assert Episode.model_validate_json(trace_path(tmp_path, "c1").read_text()).gold_label == "REFUTED"


@pytest.mark.parametrize("change", [
    {"cfg": AgentConfig(llm="scripted:<inline>", max_searches=2)},
    {"cfg": AgentConfig(llm="scripted:<inline>", abstract_chars=50)},
    {"cfg": AgentConfig(llm="scripted:<inline>", temperature=0.7)},
    {"search": {**SEARCH, "max_results": 2}},
    {"search": {**SEARCH, "backend": "replay"}},
    {"search": {**SEARCH, "index_dir": "other-index"}},
    {"llm": RecordingChat([{"content": REPORT + "\n"}])},  # another script: another model fingerprint
])
def test_any_changed_setting_is_another_run_with_its_own_out(tmp_path, change):
    batch_ids(tmp_path / "first")
    with pytest.raises(InputError, match="holds the traces of another run"):  # never two runs in one folder
        batch_ids(tmp_path / "first", **change)
    assert batch_ids(tmp_path / "second", **change) == ["c0", "c1", "c2", "c3"]
    assert batch_ids(tmp_path / "second", **change) == []  # and the new traces are then reused


@pytest.mark.parametrize("cfg", [AgentConfig(llm="scripted:<inline>", workers=3)])
def test_how_many_run_at_once_and_entrez_timeouts_do_not_invalidate_traces(tmp_path, cfg):
    batch_ids(tmp_path)
    assert batch_ids(tmp_path, cfg=cfg, search={**SEARCH, "timeout_s": 99, "max_attempts": 1}) == []


def test_what_was_reused_and_what_was_rerun_is_said(tmp_path, caplog):
    batch_ids(tmp_path)
    edited = [dict(c, claim="Changed.", gold_label="NEI") if c["claim_id"] == "c3" else c for c in CLAIMS]
    with caplog.at_level(logging.INFO, logger="biocheck.agent.run"):
        summary_run = batch_ids(tmp_path, edited)
    assert summary_run == ["c3"]
    text = caplog.text
    assert "changed: claim, gold_label" in text and "c3" in text and "reused 3 of 4" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reused"] == 3 and summary["rerun"] == {"changed: claim, gold_label": 1}


@pytest.mark.parametrize("content", ["{}", '{"claim": "Claim number 1 is tr', "", "\x00\xff"])
def test_a_broken_trace_is_rerun_with_a_warning(tmp_path, caplog, content):
    batch_ids(tmp_path)
    trace_path(tmp_path, "c1").write_text(content, encoding="latin-1")
    with caplog.at_level(logging.WARNING, logger="biocheck.agent.run"):
        assert batch_ids(tmp_path) == ["c1"]
    assert any(str(trace_path(tmp_path, "c1")) in r.getMessage() and r.levelno == logging.WARNING
               for r in caplog.records)
    assert Episode.model_validate_json(trace_path(tmp_path, "c1").read_text()).claim_id == "c1"


# -- failures: recorded per claim, the others still run, nothing half-written ---------------------------------

def test_a_claim_whose_model_fails_is_listed_and_gets_no_trace(tmp_path):
    llm = RecordingChat(fail={"Claim number 2"})
    assert batch_ids(tmp_path, llm=llm) == ["c0", "c1", "c3"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 3
    assert summary["failed"] == [{"id": "c2", "error": "connection refused by http://localhost:8000/v1"}]
    assert not trace_path(tmp_path, "c2").exists()
    assert batch_ids(tmp_path) == ["c2"]  # the rerun retries exactly the failed claim
    assert json.loads((tmp_path / "summary.json").read_text())["failed"] == []
