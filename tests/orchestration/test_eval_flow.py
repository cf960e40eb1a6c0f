"""The sharded evaluation (orchestration/dask.py, evaluate/shards.py, pipeline.evaluate_shard,
flows/evaluate.py): the same results as the serial stage, each episode run once, the model aliases, errors
before any work."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml
from flows.evaluate import evaluate_flow, main, shard_task  # Prefect's log handlers bind stderr now, not a test's

from biocheck import pipeline, wiring
from biocheck.data.schema import ClaimRecord
from biocheck.evaluate.shards import Shard, one_plan, plan, split
from biocheck.evaluate.systems import Lazy
from biocheck.io import InputError
from biocheck.llm.base import LLMError
from tests.helpers.builders import model_files, write_test_splits
from tests.helpers.eval_outputs import metrics, predictions
from tests.helpers.fake_openai import FakeOpenAI, assistant

CLAIMS = {"scifact": [(str(i), f"Vitamin D variant {i} lowers fracture risk.", ["SUPPORTED", "REFUTED", "NEI"][i % 3])
                      for i in range(1, 8)],
          "healthfc": [("1", "Zinc shortens colds.", "SUPPORTED"), ("7", "Statins cause myalgia.", "REFUTED")]}
SYSTEMS = ["base", "no_retrieval"]
LABELS = ["SUPPORTED", "REFUTED", "NOT ENOUGH INFORMATION"]


def _claim_of(body: dict) -> str:
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return next(c for rows in CLAIMS.values() for _, c, _ in rows if c in user)


def _reply(body, _headers):
    """The agent searches once, then reports; no_retrieval (no tools) answers at once. The verdict depends on
    the claim (a hash), so the predictions differ from claim to claim."""
    claim = _claim_of(body)
    if body.get("tools") and not any(m["role"] == "assistant" for m in body["messages"]):
        return 200, assistant({"content": None, "tool_calls": [{"id": "c0", "type": "function", "function": {
            "name": "search_pubmed", "arguments": json.dumps({"query": "vitamin D AND fracture*"})}}]})
    label = LABELS[int(hashlib.sha256(claim.encode()).hexdigest(), 16) % 3]
    report = ("## Supporting evidence\nNone\n## Refuting evidence\nNone\n## Summary\nJustification: x\n"
              f"## Conclusion\n{label}\n")
    return 200, assistant({"content": report})


def episodes_started(server: FakeOpenAI, since: int = 0) -> Counter:
    """(system kind, claim) of every request that opened an episode (no assistant turn yet)."""
    return Counter(("agent" if r["body"].get("tools") else "no_retrieval", _claim_of(r["body"]))
                   for r in server.requests[since:]
                   if not any(m["role"] == "assistant" for m in r["body"]["messages"]))


@pytest.fixture
def server(monkeypatch):
    fake = FakeOpenAI(_reply, keep_alive=True)
    monkeypatch.setenv("OPENAI_BASE_URL", fake.url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-no-secret")
    yield fake
    fake.close()


@pytest.fixture
def project(evidence_workdir: Path) -> Path:
    """Prepared test splits, every system on `openai:fake` (the fake server), no judge, 3 shards, 2 workers,
    one claim in flight (so a shard may hold one claim)."""
    write_test_splits(evidence_workdir, CLAIMS)
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"]["llm"] = "openai:fake"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None  # EQS by the (absent) training judge
    params["evaluate"].update(systems=SYSTEMS, datasets=list(CLAIMS), bootstrap=50, limit=None, workers=1)
    params["orchestrate"].update(shards=3, dask_workers=2, dask_address=None)
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return evidence_workdir


# --- shards -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_items, n", [(7, 3), (7, 1), (2, 3), (10, 4), (1, 8), (6, 6)])
def test_split_covers_every_item_once_in_order_in_balanced_runs(n_items, n):
    items = [f"c{i}" for i in range(n_items)]
    runs = split(items, n)
    assert [x for run in runs for x in run] == items  # every claim once, claim order kept
    assert len(runs) == min(n, n_items) and all(runs)  # more shards than claims: one claim each, none empty
    sizes = [len(r) for r in runs]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)
    assert split(items, n) == runs  # deterministic


def test_split_rejects_zero_shards_and_keeps_an_empty_list_empty():
    with pytest.raises(ValueError, match="shards: 0 must be >= 1"):
        split([1, 2], 0)
    assert split([], 3) == []


def test_plan_shards_each_system_and_dataset():
    claims = {d: [ClaimRecord(id=i, dataset=d, split="test", claim=c, label=g) for i, c, g in rows]
              for d, rows in CLAIMS.items()}
    shards = plan(SYSTEMS, claims, 3)
    expected = [(system, dataset, ids) for system in SYSTEMS for dataset, ids in (
        ("scifact", ("1", "2", "3")), ("scifact", ("4", "5")), ("scifact", ("6", "7")),
        ("healthfc", ("1",)), ("healthfc", ("7",)))]
    assert [(s.system, s.dataset, s.claim_ids) for s in shards] == expected
    assert shards[3].name == "base/healthfc#1of2"
    assert not one_plan(shards)


def test_a_shard_holds_at_least_one_batch_of_claims():
    claims = {d: [ClaimRecord(id=i, dataset=d, split="test", claim=c, label=g) for i, c, g in rows]
              for d, rows in CLAIMS.items()}
    shards = plan(SYSTEMS, claims, 3, min_claims=3)  # scifact's 7 claims: two shards of >= 3, healthfc's 2: one
    assert [(s.system, s.dataset, s.claim_ids) for s in shards] == [
        (system, dataset, ids) for system in SYSTEMS for dataset, ids in (
            ("scifact", ("1", "2", "3", "4")), ("scifact", ("5", "6", "7")), ("healthfc", ("1", "7")))]
    assert not one_plan(shards)
    whole = plan(SYSTEMS, claims, 3, min_claims=4)  # 7 // 4: one shard of scifact, as of healthfc
    assert [s.claim_ids for s in whole] == [tuple(i for i, _, _ in rows) for _ in SYSTEMS for rows in CLAIMS.values()]
    assert one_plan(whole)
    with pytest.raises(ValueError, match="min_claims: 0 must be >= 1"):
        plan(SYSTEMS, claims, 3, min_claims=0)


# --- the shard path and the full pass (no Prefect, no Dask) -------------------------------------------

def test_shards_write_only_traces_and_the_full_pass_reuses_every_one(project, server):
    setup = pipeline.evaluate_setup("params.yaml", out="sharded")
    shards = plan(list(setup.systems), setup.claims, 3)
    for shard in reversed(shards):  # any order: each shard writes its own claims' traces
        counts = pipeline.evaluate_shard("params.yaml", shard, out="sharded")
        assert (counts["claims"], counts["errors"]) == (len(shard.claim_ids), 0) and counts["seconds"] > 0
    n_claims = sum(len(rows) for rows in CLAIMS.values())
    assert len(list((project / "sharded" / "traces").rglob("*.json"))) == n_claims * len(SYSTEMS)
    assert not (project / "sharded" / "predictions").exists() and not (project / "sharded" / "eval.json").exists()
    assert not (project / "sharded" / "gallery").exists()
    ran = episodes_started(server)
    assert len(ran) == n_claims * len(SYSTEMS) and set(ran.values()) == {1}

    # A shard never sweeps temporaries: one may be another shard's trace in the middle of its rename.
    folder = next((project / "sharded" / "traces" / "base").glob("*/scifact"))
    (folder / ".tmp-7.json.abc").write_text("{")
    before = len(server.requests)
    pipeline.evaluate_shard("params.yaml", shards[0], out="sharded")
    assert (folder / ".tmp-7.json.abc").exists() and len(server.requests) == before

    pipeline.evaluate_stage("params.yaml", progress=False, out="sharded")
    assert len(server.requests) == before  # every episode came from a shard's trace
    assert not (folder / ".tmp-7.json.abc").exists()  # the full pass, alone in the folder, sweeps them

    pipeline.evaluate_stage("params.yaml", progress=False, out="serial")
    assert predictions(project / "sharded") == predictions(project / "serial")
    assert metrics(project / "sharded") == metrics(project / "serial")
    assert len({p["pred"] for rows in predictions(project / "serial").values() for p in rows}) > 1


def test_a_worker_builds_each_system_once_a_run_and_the_full_pass_builds_none(project, server):
    setup = pipeline.evaluate_setup("params.yaml", out="reuse")
    shards = plan(list(setup.systems), setup.claims, 3)
    done = [pipeline.evaluate_shard("params.yaml", shard, out="reuse", run="run-1") for shard in shards]
    # one worker, the shards in plan order (system by system): each system built once, at its first shard
    assert [d["builds"] for d in done] == [int(s.dataset == "scifact" and s.index == 0) for s in shards]
    fingerprints = {s.system: d["fingerprint"] for s, d in zip(shards, done, strict=True)}
    assert all((project / "reuse" / "traces" / s / fp).is_dir() for s, fp in fingerprints.items())
    # another run builds its own (its models or index may have changed), and so does a shard outside any run
    assert pipeline.evaluate_shard("params.yaml", shards[-1], out="reuse", run="run-2")["builds"] == 1
    assert pipeline.evaluate_shard("params.yaml", shards[0], out="reuse")["builds"] == 1

    built, before = Lazy.builds, len(server.requests)
    pipeline.evaluate_stage("params.yaml", progress=False, out="reuse", fingerprints=fingerprints)
    assert Lazy.builds == built and len(server.requests) == before  # no model loaded, no episode run again
    pipeline.evaluate_stage("params.yaml", progress=False, out="serial")
    assert Lazy.builds == built + len(SYSTEMS)
    assert predictions(project / "reuse") == predictions(project / "serial")
    assert metrics(project / "reuse") == metrics(project / "serial")


def test_a_shard_of_claims_that_left_the_split_is_one_clear_error(project, server):
    with pytest.raises(InputError, match=r"base/scifact#1of1: claim\(s\) 99 are no longer in the scifact split"):
        pipeline.evaluate_shard("params.yaml", Shard("base", "scifact", ("1", "99")), out="x")
    assert not server.requests


# --- the model name -----------------------------------------------------------------------------------

@pytest.fixture
def local_models(project) -> dict:
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["agent"]["llm"] = "transformers:models/base"
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    for folder in ("models/base", "models/selected", "models/selected_outcome_only", "runs/ckpt-7"):
        model_files(project / folder)
    return wiring.params_of("params.yaml")


@pytest.mark.parametrize("model, spec", [
    ("selected", "transformers:models/selected"),
    ("outcome_only", "transformers:models/selected_outcome_only"),
    ("champion", "transformers:models:/biocheck-agent@champion"),  # the registry's, whatever models/selected holds
    ("models:/biocheck-agent@challenger", "models:/biocheck-agent@challenger"),  # a spec: as given
    ("base", "transformers:models/base"),
    ("runs/ckpt-7", "transformers:runs/ckpt-7"),
    ("openai:gpt-x", "openai:gpt-x"),
    ("vllm:Qwen/Qwen3-4B", "vllm:Qwen/Qwen3-4B"),
])
def test_model_names_resolve_to_the_local_checkpoints_or_the_registry(local_models, model, spec):
    assert pipeline.eval_model(local_models, model) == spec


def test_a_model_folder_runs_where_the_checkpoints_run(local_models, project):
    for llm, spec in (("vllm:models/base", "vllm:runs/ckpt-7"), ("openai:models/base", "openai:runs/ckpt-7"),
                      ("openai:gpt-x", "transformers:runs/ckpt-7")):  # a hosted model: the folder runs in-process
        local_models["agent"]["llm"] = llm
        assert pipeline.eval_model(local_models, "runs/ckpt-7") == spec
    assert pipeline.eval_model(local_models, "selected") == "openai:gpt-x"  # hosted: every system runs agent.llm


@pytest.mark.parametrize("model, message", [
    ("latest", "--model latest: unknown model 'latest'; give a name (selected, outcome_only, base, champion)"),
    # the outcome-only model's old name: now the registry's challenger, so never taken silently
    ("challenger", "--model challenger: 'challenger' no longer names the outcome-only model (the registry's "
                   "challenger is the newest EG-GRPO selection); give outcome_only for the outcome-only model, or "
                   "selected (or models:/biocheck-agent@challenger) for the challenger."),
    ("runs/missing", "--model runs/missing: no model folder (config.json) at 'runs/missing'"),
])
def test_an_unknown_model_is_one_clear_error(local_models, model, message):
    with pytest.raises(InputError) as e:
        pipeline.eval_model(local_models, model)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_the_name_is_the_model_the_eg_grpo_system_runs(local_models, project):
    import shutil

    shutil.rmtree(project / "models/selected")  # no champion yet: the default fails, naming the command
    with pytest.raises(InputError, match=r"eg_grpo: no model in models/selected; run `dvc repro select@eg_grpo`"):
        pipeline.evaluate_setup("params.yaml", systems=["eg_grpo"])
    assert list(pipeline.evaluate_setup("params.yaml", systems=["eg_grpo"], model="base").systems) == ["eg_grpo"]
    shutil.rmtree(project / "models/selected_outcome_only")
    with pytest.raises(InputError, match=r"run `dvc repro train@outcome_only select@outcome_only` first"):
        pipeline.evaluate_setup("params.yaml", systems=["eg_grpo"], model="outcome_only")


# --- the flow's command line (fails before Prefect starts) --------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--systems", "base,gpt5"], "--systems base,gpt5: systems: unknown 'gpt5'; choose from base, eg_grpo"),
    (["--datasets", "pubmed"], "--datasets pubmed: datasets: unknown 'pubmed'; choose from scifact, healthfc"),
    (["--model", "latest"], "--model latest: unknown model 'latest'"),
    (["--model", "challenger"], "--model challenger: 'challenger' no longer names the outcome-only model"),
    (["--limit", "0"], "--limit 0: evaluate.limit must be >= 1, not 0"),
    (["--limit", "many"], "argument --limit: invalid int value: 'many'"),
])
def test_bad_arguments_are_one_line_and_exit_1(project, server, capsys, args, message):
    assert main(["flows/evaluate.py", "params.yaml", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not server.requests and not (project / "eval").exists()


def test_a_worker_outside_the_project_is_a_clear_error(project):
    state = shard_task.fn("params.yaml", Shard("base", "scifact", ("1",)), None, None, {}, "/elsewhere")
    assert state.is_failed() and "start the workers in the project folder" in state.message
    assert isinstance(state.data, InputError) and not (project / "eval").exists()


# --- the flow on a 2-worker LocalCluster ----------------------------------------------------------------

@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.mark.slow
def test_the_flow_on_two_dask_workers_equals_the_serial_stage(prefect_harness, project, server):
    result = evaluate_flow("params.yaml", out="flow")
    n_claims = sum(len(rows) for rows in CLAIMS.values())
    ran = episodes_started(server)
    assert len(ran) == n_claims * len(SYSTEMS) and set(ran.values()) == {1}  # each episode once, in a shard
    assert result["shards"] == 2 * (3 + 2) and result["metrics"] == "flow/eval.json"
    assert result["claims"] == {"scifact": 7, "healthfc": 2}
    # each worker builds a system once (at most 2 workers x 2 systems), the full pass none
    assert result["ran"] == "dask" and result["system_builds"]["collect"] == 0
    assert len(SYSTEMS) <= result["system_builds"]["shards"] <= 2 * len(SYSTEMS)

    since = len(server.requests)
    pipeline.evaluate_stage("params.yaml", progress=False, out="serial")
    assert len(episodes_started(server, since)) == n_claims * len(SYSTEMS)
    assert predictions(project / "flow") == predictions(project / "serial")
    assert metrics(project / "flow") == metrics(project / "serial")
    serial = json.loads((project / "serial" / "eval.json").read_text())
    assert result["scores"] == {s: {d: {"accuracy": m["accuracy"], "macro_f1": m["macro_f1"]}
                                    for d, m in by_d.items()} for s, by_d in serial.items()}
    assert (project / "flow" / "gallery" / "index.html").is_file()


@pytest.mark.slow
def test_a_flow_with_one_shard_per_system_and_dataset_runs_in_its_own_process(prefect_harness, project, server):
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["evaluate"]["workers"] = 7  # every dataset's claims fit in one batch: nothing for Dask to share out
    (project / "small.yaml").write_text(yaml.safe_dump(params))
    result = evaluate_flow("small.yaml", out="small")
    assert result["ran"] == "in-process" and result["shards"] == len(SYSTEMS) * len(CLAIMS)
    assert result["system_builds"] == {"shards": 0, "collect": len(SYSTEMS)}  # as the stage: each system once
    ran = episodes_started(server)
    assert len(ran) == sum(len(rows) for rows in CLAIMS.values()) * len(SYSTEMS) and set(ran.values()) == {1}
    pipeline.evaluate_stage("small.yaml", progress=False, out="serial")
    assert predictions(project / "small") == predictions(project / "serial")
    assert metrics(project / "small") == metrics(project / "serial")


@pytest.mark.slow
def test_the_flow_checks_systems_and_model_before_any_work(prefect_harness, project, server):
    with pytest.raises(InputError, match="--systems gpt5: systems: unknown 'gpt5'"):
        evaluate_flow("params.yaml", systems=["gpt5"], out="bad")
    with pytest.raises(InputError, match="--model latest: unknown model"):
        evaluate_flow("params.yaml", model="latest", out="bad")
    assert not server.requests and not (project / "bad").exists()


@pytest.mark.slow
def test_a_model_that_fails_to_load_on_the_workers_fails_the_flow_with_its_own_error(prefect_harness, project,
                                                                                      server):
    with pytest.raises(LLMError, match="/nonexistent/model: no such model directory"):
        evaluate_flow("params.yaml", systems=["eg_grpo"], model="transformers:/nonexistent/model", out="bad")
    assert not server.requests and not (project / "bad" / "eval.json").exists()
    assert not (project / "bad" / "predictions").exists()


@pytest.mark.slow
def test_the_flow_run_shows_its_headline_and_links_its_mlflow_run(prefect_harness, project, server):
    from mlflow import MlflowClient
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    state = evaluate_flow("params.yaml", out="shown", return_state=True)
    result, flow_run_id = state.result(), state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(
            flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])))
    by_key = {a.key: a for a in found}
    assert set(by_key) == {"evaluate-summary", "eval-metrics"}, [a.key for a in found]
    summary = by_key["evaluate-summary"].data
    for system, by_dataset in result["scores"].items():  # the headline: each row's own numbers
        for dataset, m in by_dataset.items():
            row = next(line for line in summary.splitlines() if line.startswith(f"| {system} | {dataset} |"))
            assert f"| {m['accuracy']:.3f} | {m['macro_f1']:.3f} |" in row, row
    rows = json.loads(by_key["eval-metrics"].data)
    assert sorted((r["system"], r["dataset"]) for r in rows) == sorted((s, d) for s in SYSTEMS for d in CLAIMS)
    # the link: the `evaluate` run this flow run logged, tagged with it, in the UI and as runs:/<id>
    [run] = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("biocheck-eval").experiment_id],
        filter_string=f"tags.prefect_flow_run = '{flow_run_id}' and attributes.run_name = 'evaluate'")
    assert f"runs:/{run.info.run_id}" in summary
    assert f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id})" in summary
