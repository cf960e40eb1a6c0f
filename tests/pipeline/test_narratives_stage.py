"""The passage benchmark's stages on a small project (pipeline/narratives.py): the same seed gives the same
passages, every arm is scored as computed here by hand, a rerun reuses every episode, 0 passages is an empty,
explained result, and an OpenAI-compatible model (a local fake server's scripted answers: a test, not a result)
extracts through the same code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from biocheck.narrative.bench import read_passages
from biocheck.narrative.prompts import extraction_prompt
from biocheck.pipeline.narratives import narrative_passages_stage, narratives_stage
from tests.helpers.eval_project import REPORT
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.fake_openai import assistant as fake_answer
from tests.helpers.narrative_project import set_narratives as _set


def test_the_same_seed_composes_the_same_passages(bench_project):
    done = narrative_passages_stage("params.yaml")
    first = Path(done["path"]).read_bytes()
    assert done["passages"] == 2 and 4 <= done["gold_claims"] <= 8
    assert narrative_passages_stage("params.yaml")["passages"] == 2
    assert Path(done["path"]).read_bytes() == first
    _set(bench_project, seed=1)
    narrative_passages_stage("params.yaml")
    assert Path(done["path"]).read_bytes() != first


def test_every_arm_is_scored_as_computed_by_hand(bench_project):
    narrative_passages_stage("params.yaml")
    passages = read_passages("data/narratives/passages.jsonl")
    gold = [c for p in passages for c in p.claims]
    supported = sum(c.label.value == "SUPPORTED" for c in gold)
    metrics = narratives_stage("params.yaml", progress=False)

    arms = metrics["arms"]
    # the scripted model concludes SUPPORTED on every claim: right exactly on the SUPPORTED gold claims
    assert arms["gold"]["claim_accuracy"]["value"] == pytest.approx(supported / len(gold))
    assert arms["gold"]["recall"]["value"] == 1.0 and arms["gold"]["precision"]["value"] == 1.0
    # the sentence rule: k claims and k - 1 connectives per passage, the non-claim left out
    k = [len(p.claims) for p in passages]
    assert arms["sentences"]["precision"]["value"] == pytest.approx(sum(k) / sum(2 * x - 1 for x in k))
    assert arms["sentences"]["recall"]["value"] == 1.0
    assert arms["sentences"]["non_claim_left_out"]["k"] == 2
    # the scripted "model" answers the extraction with a report, not JSON: the sentence rule stood in, twice
    assert (arms["extracted"]["fallback"]["k"], arms["extracted"]["fallback"]["n"]) == (2, 2)
    assert arms["extracted"]["claim_accuracy"] == arms["sentences"]["claim_accuracy"]
    # the whole passage: one SUPPORTED verdict for all its claims
    assert arms["passage"]["claim_accuracy"]["value"] == pytest.approx(supported / len(gold))
    all_supported = sum(all(c.label.value == "SUPPORTED" for c in p.claims) for p in passages)
    assert arms["passage"]["passage_accuracy"]["k"] == all_supported
    assert metrics["extraction_cost"]["passage"]["value"] == 0.0
    assert metrics["about"]["passages"] == 2 and metrics["about"]["gold_claims"] == len(gold)

    assert json.loads(Path("metrics/narratives.json").read_text()) == json.loads(json.dumps(metrics))
    rows = [json.loads(x) for x in Path("reports/narratives/claims.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * len(gold)  # one per arm and gold claim
    assert sum(r["correct"] for r in rows if r["arm"] == "gold") == supported
    index = Path("reports/narratives/index.html").read_text()
    assert "passage benchmark" in index and "p0000" in index
    page = Path("reports/narratives/passages/p0000.html").read_text()
    assert passages[0].claims[0].text.split()[0] in page
    assert "| one claim per sentence (baseline) |" in Path("reports/narratives/table.md").read_text()


def test_a_rerun_reuses_every_episode(bench_project):
    narrative_passages_stage("params.yaml")
    first = narratives_stage("params.yaml", progress=False)
    traces = sorted(Path("narratives/traces").rglob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in traces]
    # texts shared by arms are one episode: fewer traces than the arms' claims together
    extracted = [json.loads(x) for x in Path("reports/narratives/extracted.jsonl").read_text().splitlines()]
    assert 0 < len(traces) < len(extracted)
    again = narratives_stage("params.yaml", progress=False)
    assert again == first
    assert [p.stat().st_mtime_ns for p in sorted(Path("narratives/traces").rglob("*.json"))] == stamps


def test_zero_passages_is_an_explained_empty_result_that_loads_no_model(bench_project):
    _set(bench_project, passages=0)
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["agent"]["llm"] = "transformers:no/such/model"  # loading it would fail
    Path("params.yaml").write_text(yaml.safe_dump(params))
    assert narrative_passages_stage("params.yaml")["passages"] == 0
    metrics = narratives_stage("params.yaml", progress=False)
    assert "narratives.passages is 0" in metrics["skipped"]
    assert "not run" in Path("reports/narratives/table.md").read_text()
    assert "Not run" in Path("reports/narratives/index.html").read_text()


def test_an_openai_compatible_model_extracts_through_the_same_code(bench_project, monkeypatch):
    narrative_passages_stage("params.yaml")
    passages = {p.text: p for p in read_passages("data/narratives/passages.jsonl")}

    def reply(body, headers):
        messages = body["messages"]
        if messages[0]["content"] == extraction_prompt():  # the extraction step: scripted perfect answers
            p = passages[messages[1]["content"]]
            answer = {"claims": [{"claim": c.text, "quote": c.text} for c in p.claims],
                      "skipped": [{"quote": p.text[p.non_claim.start:p.non_claim.end], "reason": p.non_claim.reason}]}
            return 200, fake_answer({"content": json.dumps(answer)})
        return 200, fake_answer({"content": REPORT})

    fake = FakeOpenAI(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-secret")
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["agent"]["llm"] = "openai:fake-model"
    Path("params.yaml").write_text(yaml.safe_dump(params))
    try:
        metrics = narratives_stage("params.yaml", progress=False)
    finally:
        fake.close()
    extracted = metrics["arms"]["extracted"]
    assert (extracted["fallback"]["k"], extracted["fallback"]["n"]) == (0, 2)
    assert extracted["precision"]["value"] == 1.0 and extracted["recall"]["value"] == 1.0
    assert extracted["non_claim_left_out"]["k"] == 2
    assert metrics["extraction_cost"]["extracted"]["value"] == 0.0
    assert sum(1 for r in fake.requests if r["body"]["messages"][0]["content"] == extraction_prompt()) == 2
    assert "sk-test-not-a-secret" not in Path("metrics/narratives.json").read_text()


def test_the_run_is_logged_to_mlflow_tagged_task_narrative(bench_project, store):
    narrative_passages_stage("params.yaml")
    metrics = narratives_stage("params.yaml", progress=False)
    (run,) = store.search_runs([store.get_experiment_by_name("biocheck-eval").experiment_id],
                               filter_string="tags.task = 'narrative'")
    assert run.info.run_name == "narratives" and run.data.tags["system"] == "eg_grpo"
    logged = run.data.metrics
    assert logged["gold/claim_accuracy.value"] == metrics["arms"]["gold"]["claim_accuracy"]["value"]
    assert logged["passage/passage_accuracy.n"] == 2
    assert "extracted/extraction_cost.value" in logged
    assert run.data.params["narratives.passages"] == "2"
    names = {a.path for a in store.list_artifacts(run.info.run_id, "narratives")}
    assert "narratives/table.md" in names and "narratives/claims.jsonl" in names
