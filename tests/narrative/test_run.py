"""check_passage_claims: the agent on each extracted claim (one trace each, resumed on a rerun), the overall line,
failed claims, and the model extractor's answer feeding the claims."""

from __future__ import annotations

import json

from biocheck.agent.episode import Agent, AgentConfig, Episode
from biocheck.labels import Label
from biocheck.llm.scripted import ScriptedChat
from biocheck.narrative.extract import extract
from biocheck.narrative.run import check_passage_claims, claim_ids, overall_line
from biocheck.narrative.schema import ExtractedClaim
from tests.helpers.batch import SEARCH, VerdictChat
from tests.helpers.turns import TABLE, TableTool

PASSAGE = "Vitamin D prevents fractures. Homeopathy cures cancer. Does coffee cause cancer?"


def _agent(llm) -> Agent:
    return Agent(llm, tool=TableTool(TABLE), cfg=AgentConfig(llm="scripted:<inline>"))


def test_each_claim_is_checked_with_its_span_verdict_and_trace(tmp_path):
    llm = VerdictChat(refute=("Homeopathy",))
    result = check_passage_claims(extract(PASSAGE), _agent(llm), tmp_path / "out", search=SEARCH)
    assert [(c.id, c.start, c.end, c.text) for c in result.claims] == [
        ("c0-29", 0, 29, "Vitamin D prevents fractures."), ("c30-54", 30, 54, "Homeopathy cures cancer.")]
    assert [c.conclusion for c in result.claims] == [Label.SUPPORTED, Label.REFUTED]
    for c in result.claims:  # the conclusion is the trace's
        episode = Episode.model_validate_json(c.trace.read_text())
        assert episode.claim == c.text and episode.report.conclusion == c.conclusion and episode.claim_id == c.id
    assert [(s.start, s.end, s.reason) for s in result.skipped] == [(55, 80, "question")]
    assert result.overall == "2 claims: 1 supported, 1 refuted; 1 sentence not check-worthy"
    assert result.method == "sentences" and result.note == "" and result.reused == 0


def test_a_rerun_reuses_every_trace(tmp_path):
    llm = VerdictChat()
    check_passage_claims(extract(PASSAGE), _agent(llm), tmp_path, search=SEARCH)
    asked = len(llm.asked)
    again = check_passage_claims(extract(PASSAGE), _agent(llm), tmp_path, search=SEARCH)
    assert len(llm.asked) == asked and again.reused == 2


def test_a_failed_claim_is_listed_as_failed_without_a_trace(tmp_path):
    llm = VerdictChat(fail={"Homeopathy"})
    result = check_passage_claims(extract(PASSAGE), _agent(llm), tmp_path, search=SEARCH)
    failed = result.claims[1]
    assert failed.trace is None and failed.conclusion is None and "connection refused" in failed.error
    assert result.overall == "2 claims: 1 supported, 1 failed; 1 sentence not check-worthy"


def test_a_passage_of_only_questions_has_no_claims_and_says_why(tmp_path):
    result = check_passage_claims(extract("Does coffee cause cancer? Is aspirin safe?"), _agent(VerdictChat()),
                                  tmp_path, search=SEARCH)
    assert result.claims == () and result.overall == "0 claims: every sentence was skipped: 2 questions"


def test_claims_sharing_a_span_get_distinct_ids():
    claims = (ExtractedClaim(0, 10, "a", "model"), ExtractedClaim(0, 10, "b", "model"), ExtractedClaim(11, 20, "c",
                                                                                                      "model"))
    assert claim_ids(claims) == ["c0-10", "c0-10.2", "c11-20"]


def test_overall_line_without_anything():
    assert overall_line([], ()) == "0 claims: the extraction found no check-worthy claim in the passage"


def test_the_model_extractor_feeds_the_agent(tmp_path):
    answer = {"claims": [{"claim": "Vitamin D prevents fractures in adults.", "quote": "Vitamin D prevents fractures."}],
              "skipped": [{"quote": "Homeopathy cures cancer.", "reason": "opinion"},
                          {"quote": "Does coffee cause cancer?", "reason": "question"}]}
    extraction = extract(PASSAGE, ScriptedChat([{"content": json.dumps(answer)}]))
    result = check_passage_claims(extraction, _agent(VerdictChat()), tmp_path, search=SEARCH)
    assert result.method == "model" and [(c.id, c.text) for c in result.claims] == [
        ("c0-29", "Vitamin D prevents fractures in adults.")]
    assert result.overall == "1 claim: 1 supported; 2 sentences not check-worthy"
