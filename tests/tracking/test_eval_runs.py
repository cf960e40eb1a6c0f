"""The evaluation and the model registry in MLflow: `evaluate` with one `eval <system> <dataset>` child per
pair (test splits as datasets, identical metric keys), nested in its pipeline's parent; `select` registering
a version tagged with its validation reward, step and run link under champion/challenger; the evaluation's
runs named for the model they ran (`selected`, not `champion`) and tagged with the registry's aliases of those
weights (by model fingerprint), and the metrics written onto the versions the evaluated system really ran only."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import uuid
from pathlib import Path

import mlflow
import pytest
import yaml

from biocheck import tracking
from biocheck.evaluate.compare import RUN_METRICS, tag_registered_versions
from biocheck.evaluate.harness import read_episode
from biocheck.io import InputError
from biocheck.llm.base import LLMError
from biocheck.llm.scripted import ScriptedChat
from biocheck.pipeline import evaluate_config, evaluate_stage, select_stage
from biocheck.wiring import params_of
from tests.helpers.checkpoints import fake_checkpoints


@pytest.fixture
def registered(project, client):  # noqa: F811
    """The project with two selections registered under a model name of its own: champion and challenger."""
    name = f"biocheck-agent-{uuid.uuid4().hex[:8]}"
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["select"] = {"registered_model": name}
    params["train"]["out_dir"] = str(fake_checkpoints(project / "ckpt", {10: 0.2, 20: 0.5}))
    fake_checkpoints(project / "ckpt_outcome_only", {10: 0.4})
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    select_stage(project / "params.yaml")
    select_stage(project / "params.yaml", variant="outcome_only")
    return name


def test_select_registers_versions_with_their_reward_step_and_run_link(registered, client):
    champion = client.get_model_version_by_alias(registered, "champion")
    challenger = client.get_model_version_by_alias(registered, "outcome_only")  # the ablation: never the challenger
    assert client.get_model_version_by_alias(registered, "challenger").version == champion.version
    assert (champion.tags["validation_reward"], champion.tags["step"], champion.tags["variant"]) == ("0.5", "20", "eg_grpo")
    assert (challenger.tags["validation_reward"], challenger.tags["step"]) == ("0.4", "10")
    assert challenger.tags["variant"] == "outcome_only"
    run = client.get_run(champion.run_id)
    assert run.info.run_name == "select eg_grpo" and run.data.tags["dvc_stage"] == "select@eg_grpo"
    assert client.get_experiment(run.info.experiment_id).name == "biocheck-train"
    assert champion.tags["run_uri"] == f"runs:/{run.info.run_id}"
    assert champion.tags["run_link"] == f"#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"
    assert champion.tags["model_fingerprint"] == run.data.tags["model_fingerprint"] != challenger.tags["model_fingerprint"]


def test_evaluation_metrics_go_onto_the_version_that_was_evaluated_only(registered, client, caplog):
    champion = client.get_model_version_by_alias(registered, "champion")
    metrics = {s: {"scifact": {"n": 3, "accuracy": 0.5, "macro_f1": 0.25, "eqs": None, "ci": {"accuracy": {}}}}
               for s in ("eg_grpo", "outcome_only", "cer")}
    ran = {"eg_grpo": {"model_fingerprint": champion.tags["model_fingerprint"]},
           "outcome_only": {"model_fingerprint": "another-model"}}
    caplog.set_level(logging.INFO, logger="biocheck")
    with tracking.context(registered_model=registered, model_aliases={"eg_grpo": "selected", "outcome_only": "outcome_only"}):
        # one version (the first selection is champion and challenger): its metrics once, both aliases named
        assert tag_registered_versions(metrics, ran, "run-1") == ["champion", "challenger"]
    tags = client.get_model_version(registered, champion.version).tags
    assert {k: v for k, v in tags.items() if k.startswith("eval")} == {"eval_run": "runs:/run-1"}
    metrics = client.get_logged_model(tracking.version_model_id(champion)).metrics  # metrics of the logged model
    assert {(m.key, m.value) for m in metrics} == {
        ("scifact.n", 3), ("scifact.accuracy", 0.5), ("scifact.macro_f1", 0.25)}  # None (eqs), nested: left out
    challenger = client.get_model_version_by_alias(registered, "outcome_only")
    assert not [k for k in challenger.tags if k.startswith("eval")]
    assert not client.get_logged_model(tracking.version_model_id(challenger)).metrics
    assert "holds the model outcome_only ran (fingerprint another-model)" in caplog.text


def test_evaluate_nests_one_run_per_system_and_dataset_with_its_test_split(registered, client, monkeypatch):
    """One level: the `evaluate` run is top-level in biocheck-eval (with its pipeline's tag, no pipeline parent
    there) and each `eval <system> <dataset>` is its child, which starts and ends with its own episodes."""
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["tracking"]["trace_samples"] = 2
    Path("params.yaml").write_text(yaml.safe_dump(params))
    result = evaluate_stage("params.yaml", progress=False, systems=["eg_grpo", "no_retrieval"])
    exp = client.get_experiment_by_name("biocheck-eval").experiment_id
    runs = client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}'")
    by_name = {r.info.run_name: r for r in runs}
    pairs = [f"eval {s} {d}" for s in ("eg_grpo", "no_retrieval") for d in ("scifact", "healthfc")]
    assert sorted(by_name) == sorted(["evaluate", *pairs])  # no pipeline parent in this experiment
    parent = by_name["evaluate"]
    assert "mlflow.parentRunId" not in parent.data.tags and result["mlflow_run"] == parent.info.run_id
    # the runs span the work: in the order the pairs ran, each ended before the metrics were written (the
    # runs are logged after that), each at least as long as its episodes took, all inside the parent
    spans = [(by_name[n].info.start_time, by_name[n].info.end_time) for n in pairs]
    assert parent.info.start_time <= spans[0][0] and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert all(start <= end <= parent.info.end_time for start, end in spans)
    for name, (start, end) in zip(pairs, spans, strict=True):
        _, system, dataset = name.split()
        path = Path(result["predictions"][system][dataset])  # <out>/predictions/<system>/<dataset>.jsonl
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        # each episode's seconds: in its trace's times file (not in the predictions), and the run's cost metric
        seconds = [read_episode(path.parents[2] / r["trace"]).timing["total_s"] for r in rows]
        assert end - start >= 1000 * sum(seconds) - 1, name
        assert sum(seconds) > 0 and by_name[name].data.metrics["seconds_mean"] == pytest.approx(
            sum(seconds) / len(seconds)), name
    metrics_written = evaluate_config(params_of("params.yaml")).metrics_path.stat().st_mtime * 1000
    assert spans[-1][1] <= metrics_written + 1  # every pair had ended when the metrics were written
    splits = {d: project_split(d) for d in ("scifact", "healthfc")}
    logged = {i.dataset.name: i.dataset.digest for i in client.get_run(parent.info.run_id).inputs.dataset_inputs}
    assert logged == {f"{d}/test": hashlib.md5(p.read_bytes()).hexdigest() for d, p in splits.items()}
    for name in pairs:
        run = client.get_run(by_name[name].info.run_id)
        _, system, dataset = name.split()
        tags = run.data.tags
        assert (tags["system"], tags["dataset"], tags["dvc_stage"], tags["profile"]) == (
            system, dataset, "evaluate", "quickstart")
        assert tags["mlflow.parentRunId"] == parent.info.run_id and tags["model_fingerprint"] != "unknown"
        [inp] = run.inputs.dataset_inputs
        assert inp.dataset.name == f"{dataset}/test" and inp.dataset.digest == logged[f"{dataset}/test"]
        # system, dataset and model alias are params (compare-view axes), its own only: not every system's
        alias = {"eg_grpo": "selected", "no_retrieval": "none"}[system]  # eg_grpo ran models/selected's place
        params = run.data.params
        assert (params["system"], params["dataset"], params["model_alias"]) == (system, dataset, alias)
        assert tags["model_alias"] == alias and "systems" not in params and "datasets" not in params
        # the scripted model is no registered version's
        assert (tags["registry_aliases"], tags["registry_versions"]) == ("none", "none")
        assert set(run.data.metrics) == set(RUN_METRICS)  # the headline numbers only, the same keys everywhere
        assert {"accuracy", "macro_f1", "eqs", "ehr", "n", "ehr_n", "eqs_n"} <= set(run.data.metrics)
        details = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/metrics.json"))
        assert details["metrics"]["accuracy"] == pytest.approx(run.data.metrics["accuracy"])
        assert {"ci", "2way", "3way", "confusion"} <= details["metrics"].keys()  # the rest: an artifact
        assert details["paired"]["n"] == (3 if dataset == "scifact" else 2) or system == "eg_grpo"
        traces = mlflow.search_traces(run_id=run.info.run_id, return_type="list", flush=True)
        assert len(traces) == 2  # tracking.trace_samples, set to 2 above; the datasets have 3 and 2 claims
        root = next(s for t in traces for s in t.data.spans if s.parent_id is None)
        assert root.outputs["conclusion"] == "SUPPORTED" and root.inputs["dataset"] == dataset
        # the spans ran when the episode did: its times, from the file beside its trace (the trace holds none)
        path = Path(result["predictions"][system][dataset])
        trace_of = {r["id"]: r["trace"] for r in map(json.loads, path.read_text().splitlines())}
        (began, ended), = read_episode(path.parents[2] / trace_of[root.inputs["claim_id"]]).clock["episode"]
        assert abs(root.start_time_ns - began) < 1e6 and abs(root.end_time_ns - ended) < 1e6  # MLflow keeps ms


def watch_runs(client, monkeypatch, pid: str, fail: bool = False) -> list[dict[str, str]]:
    """Each call of the scripted model first reads this evaluation's runs from MLflow, as a user watching the UI
    would ({run name: status}, appended to the list returned); `fail`: then the call fails (LLMError)."""
    seen: list[dict[str, str]] = []
    answer = ScriptedChat.chat

    def watching(self, messages, tools):
        runs = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string=f"tags.pipeline_id = '{pid}'",
                                  output_format="list")
        seen.append({r.info.run_name: r.info.status for r in runs})
        if fail:
            raise LLMError("the model server went away")
        return answer(self, messages, tools)

    monkeypatch.setattr(ScriptedChat, "chat", watching)
    return seen


def test_each_evaluation_run_is_running_while_its_work_runs(project, client, monkeypatch):  # noqa: F811
    """Watching MLflow during an evaluation: `evaluate` and the pair whose episodes are running are RUNNING, the
    pairs done before it FINISHED, those after it not there yet; afterwards every run is FINISHED, with its
    metrics, and the time it ran spans its episodes."""
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    seen = watch_runs(client, monkeypatch, pid)
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo", "no_retrieval"])
    pairs = [f"eval {s} {d}" for s in ("eg_grpo", "no_retrieval") for d in ("scifact", "healthfc")]
    assert len(seen) >= len(pairs)  # the model answered every pair's claims
    running = []
    for runs in seen:
        assert runs.pop("evaluate") == "RUNNING"
        k = len(runs) - 1  # the pairs start in order, one at a time
        assert runs == {**{name: "FINISHED" for name in pairs[:k]}, pairs[k]: "RUNNING"}, runs
        running.append(pairs[k])
    assert list(dict.fromkeys(running)) == pairs  # every pair was seen RUNNING, in the order it ran
    runs = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string=f"tags.pipeline_id = '{pid}'",
                              output_format="list")
    assert sorted(r.info.run_name for r in runs) == sorted(["evaluate", *pairs])
    assert {r.info.status for r in runs} == {"FINISHED"} and all(r.info.end_time for r in runs)
    assert all(set(r.data.metrics) == set(RUN_METRICS) for r in runs if r.info.run_name != "evaluate")


def test_a_failed_evaluation_ends_its_runs_failed(project, client, monkeypatch):  # noqa: F811
    """No claim gets an answer: the evaluation fails, and so do the run of the pair it failed in and `evaluate`;
    no run is left RUNNING, and no pair after it starts."""
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    seen = watch_runs(client, monkeypatch, pid, fail=True)
    with pytest.raises(LLMError, match="no claim got an answer"):
        evaluate_stage("params.yaml", progress=False, systems=["eg_grpo"])
    assert seen and seen[0] == {"evaluate": "RUNNING", "eval eg_grpo scifact": "RUNNING"}
    runs = mlflow.search_runs(experiment_names=["biocheck-eval"], filter_string=f"tags.pipeline_id = '{pid}'",
                              output_format="list")
    assert {r.info.run_name: r.info.status for r in runs} == {"evaluate": "FAILED", "eval eg_grpo scifact": "FAILED"}
    assert all(r.info.end_time for r in runs)


def test_evaluate_tags_the_champion_version_it_ran(registered, client, monkeypatch):
    """(The registry part: H1 of issue 31 owns tag_registered_versions and this test's expectations.)"""
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo", "no_retrieval"])
    exp = client.get_experiment_by_name("biocheck-eval").experiment_id
    runs = client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}'")
    by_name = {r.info.run_name: r for r in runs}
    parent = by_name["evaluate"]
    # the scripted model is not the registered champion: its version keeps no evaluation tags ...
    champion = client.get_model_version_by_alias(registered, "champion")
    assert not [k for k in champion.tags if k.startswith("eval")]
    # ... until the champion's fingerprint is the one eg_grpo ran (as when it runs models/selected)
    ran = by_name["eval eg_grpo scifact"].data.tags["model_fingerprint"]
    client.set_model_version_tag(registered, champion.version, "model_fingerprint", ran)
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo", "no_retrieval"])
    tags = client.get_model_version(registered, champion.version).tags
    again = {r.info.run_name: r for r in client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}'",
                                                             order_by=["attributes.start_time DESC"])
             if r.info.run_id not in {x.info.run_id for x in runs}}
    # the first selection is champion and challenger: its runs say both, and that version
    assert again["eval eg_grpo scifact"].data.tags["registry_aliases"] == "champion,challenger"
    assert again["eval eg_grpo scifact"].data.tags["registry_versions"] == str(champion.version)
    assert again["eval no_retrieval scifact"].data.tags["registry_aliases"] == "none"
    accuracy = client.get_run(by_name["eval eg_grpo healthfc"].info.run_id).data.metrics["accuracy"]
    logged = {m.key: m for m in client.get_logged_model(tracking.version_model_id(champion)).metrics}
    assert logged["healthfc.accuracy"].value == pytest.approx(accuracy) and logged["scifact.n"].value == 3
    assert logged["scifact.n"].dataset_name == "scifact/test"  # linked to the test split it was measured on
    assert tags["eval_run"].startswith("runs:/") and tags["eval_run"] != f"runs:/{parent.info.run_id}"  # the latest


def project_split(dataset: str) -> Path:
    return Path("data") / "prepared" / dataset / "test.jsonl"


def test_evaluating_the_outcome_only_model_is_logged_under_its_name(registered, client, monkeypatch):
    """`evaluate --model outcome_only` runs the eg_grpo system on the outcome-only weights: its runs say so
    (param and tag model_alias), so a filter on the newest selection's runs leaves them out; the old name of
    that model, `challenger` (now the registry's newest EG-GRPO selection), is refused in one line."""
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    with pytest.raises(InputError, match=r"^--model challenger: 'challenger' no longer names the outcome-only "
                                         r"model .*give outcome_only for the outcome-only model"):
        evaluate_stage("params.yaml", progress=False, systems=["eg_grpo"], model="challenger")
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo"], model="outcome_only")
    exp = client.get_experiment_by_name("biocheck-eval").experiment_id
    scope = f"tags.pipeline_id = '{pid}' and params.system = 'eg_grpo'"
    runs = client.search_runs([exp], filter_string=scope)
    assert sorted(r.data.params["dataset"] for r in runs) == ["healthfc", "scifact"]
    assert {(r.data.params["model_alias"], r.data.tags["model_alias"]) for r in runs} == {
        ("outcome_only", "outcome_only")}
    assert client.search_runs([exp], filter_string=f"{scope} and params.model_alias = 'selected'") == []


def test_a_selection_that_lost_to_the_champion_is_evaluated_as_the_challenger(registered, client, monkeypatch):
    """The newest selection is worse than the champion, so the champion stays; evaluate runs models/selected
    (that selection) and its runs say what it is: model_alias `selected`, registry_aliases `challenger` (not
    the champion), and its numbers go onto the challenger's version, never the champion's."""
    params = yaml.safe_load(Path("params.yaml").read_text())
    params["train"]["out_dir"] = str(fake_checkpoints(Path("ckpt_worse"), {10: 0.3}))  # champion's: 0.5
    Path("params.yaml").write_text(yaml.safe_dump(params))
    worse = select_stage("params.yaml")["registered"]
    champion = client.get_model_version_by_alias(registered, "champion")
    assert not worse["promoted"] and champion.version != worse["version"]
    assert client.get_model_version_by_alias(registered, "challenger").version == worse["version"]
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo"])
    exp = client.get_experiment_by_name("biocheck-eval").experiment_id
    [run, *_] = client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}' and tags.system = 'eg_grpo'")
    # the scripted project's eg_grpo model stands in for models/selected: give the challenger its fingerprint
    client.set_model_version_tag(registered, worse["version"], "model_fingerprint", run.data.tags["model_fingerprint"])
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo"])
    runs = client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}' and tags.system = 'eg_grpo'")
    assert sorted((r.data.tags["registry_aliases"], r.data.params["dataset"]) for r in runs) == [
        ("challenger", "healthfc"), ("challenger", "scifact"), ("none", "healthfc"), ("none", "scifact")]
    for r in runs:  # the newest selection, by name; the registry's alias of its weights, by fingerprint
        assert r.data.params["model_alias"] == r.data.tags["model_alias"] == "selected"
        assert r.data.tags["registry_versions"] in ("none", str(worse["version"]))
    assert client.search_runs([exp], filter_string=f"tags.pipeline_id = '{pid}' and "
                                                   "tags.registry_aliases LIKE '%champion%'") == []
    assert client.get_model_version_by_alias(registered, "champion").version == champion.version  # unchanged
    assert "eval_run" not in client.get_model_version(registered, champion.version).tags
    assert client.get_model_version(registered, worse["version"]).tags["eval_run"].startswith("runs:/")
