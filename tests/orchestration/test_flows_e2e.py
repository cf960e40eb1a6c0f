"""What users run: every deployment's entry flow, with prefect.yaml's default parameters, on a fresh project.

A copy of the repository's tracked files as a new git + DVC project (the quickstart's params, every size cut to
the smallest that still runs each stage), a synthetic release shaped like the official one as its data mirror,
and Prefect's test harness (a real local Prefect API in this process). From the project folder, as a process
worker runs them:

- the weekly pipeline (`pipeline-weekly`): pull, every stage of dvc.yaml in DVC's order, push; the flow run
  Completed, `dvc status` clean, the artifacts published, and a fresh clone pulls every output and has nothing
  to recompute;
- `train-gpu`: everything already up to date, so no stage runs; `evidence-refresh-nightly`: no recorded live
  query, nothing to refresh; `evaluate`: the champion on every system, under runs/evaluate; `study`: the
  study's units and analysis; the two study-unit deployments: one unit each (their `stage` is what the study
  flow sends), recorded in study/dvc.lock as the study flow records them;
- and a validation that fails: the data flow run fails with its summary, as a message and an artifact.

Marked `e2e` (about 6 minutes; `make e2e`, which CI runs after `make test`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from biocheck.orchestration import dvc, plan
from tests.helpers.builders import official_sizes, write_release
from tests.helpers.paths import REPO
from tests.helpers.projects import copy_repo, workspace

pytestmark = pytest.mark.e2e

PREFECT_YAML = REPO / "prefect.yaml"
DEFAULTS = {d["name"]: d["parameters"] for d in yaml.safe_load(PREFECT_YAML.read_text())["deployments"]}


def _small(params: dict) -> dict:
    """The quickstart's params with every size cut to the smallest that still runs each stage's code."""
    params["data"]["subset"] = {"train": 8, "val": 4, "test": 2}
    params["model"]["tiny"].update(vocab_size=1024, max_docs=200)
    params["judge"].update(steps=20, folds=2)
    params["train"]["sft"].update(epochs=1)
    params["audit"].update(claims=2)
    params["train"].update(max_steps=2, save_steps=1, eval_steps=1, num_generations=2, per_device_train_batch_size=2,
                           max_completion_length=96, per_device_eval_batch_size=4, num_generations_eval=1)
    params["agent"].update(max_searches=1, max_new_tokens=24)
    params["evaluate"].update(limit=2, bootstrap=50, workers=2)
    params["orchestrate"].update(dask_workers=1, shards=2)
    params["study"].update(seeds=[0], steps=1, eval_steps=1, limit=2)
    return params


@pytest.fixture(scope="module")
def harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    mirror = write_release(tmp / "mirror", **official_sizes())  # validates under the real params.yaml
    work, _ = workspace(tmp, mirror)
    params = yaml.safe_load((work / "params.yaml").read_text())
    (work / "params.yaml").write_text(yaml.safe_dump(_small(params), sort_keys=False))
    return SimpleNamespace(work=work.resolve(), mirror=mirror, remote=tmp / "biocheck-dvc-remote")


@pytest.fixture(scope="module")
def pipeline(harness, project):
    """The weekly pipeline deployment's flow, with its default parameters, run from the project folder (as a
    process worker runs it): its final state and the stages DVC reads from dvc.yaml."""
    from flows.pipeline import pipeline_flow

    with _in(project):
        stages = dvc.pipeline(project.work).order
        state = pipeline_flow(**DEFAULTS["pipeline-weekly"], return_state=True)
    return SimpleNamespace(state=state, stages=stages)


@contextlib.contextmanager
def _in(project):
    """cwd = the project (a process worker runs a deployment in the folder `prefect deploy` ran in)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(project.work)
        mp.setenv("BIOCHECK_DATA_MIRROR", str(project.mirror))
        mp.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
        yield


def _completed(state) -> dict:
    assert state.is_completed(), f"{state.name}: {state.message}"
    return state.result()


def test_the_weekly_pipeline_runs_every_stage_of_dvc_yaml_and_leaves_dvc_clean(project, pipeline):
    from prefect.artifacts import Artifact

    out = _completed(pipeline.state)
    ran = {s: r for area in plan.AREAS for s, r in out[area].items()}
    assert list(ran) == list(pipeline.stages)  # every stage of dvc.yaml (judge_eqs and audit too), in DVC's order
    assert all(r["ran"] for r in ran.values()), {s: r["ran"] for s, r in ran.items()}
    assert out["pull"] is True and out["push"] == "local" and any(project.remote.rglob("*"))
    assert dvc.status(project.work, ["dvc.yaml"]) == {}  # (the study's stages run on demand: its own test)
    assert Artifact.get("validation").data.startswith("# Data validation passed")
    assert out["evaluate"]["evaluate"]["rows"] > 0 and Artifact.get("eval-metrics") is not None


def test_every_other_deployments_entry_flow_completes_with_its_defaults(project, pipeline):
    from flows.evaluate import evaluate_flow
    from flows.refresh import refresh_flow
    from flows.study import study_flow
    from flows.train import train_flow

    _completed(pipeline.state)
    work = project.work
    with _in(project):
        train = _completed(train_flow(**DEFAULTS["train-gpu"], return_state=True))
        assert list(train) == plan.areas(dvc.pipeline(work))["train"] and not any(r["ran"] for r in train.values())

        refreshed = _completed(refresh_flow(**DEFAULTS["evidence-refresh-nightly"], return_state=True))
        assert refreshed["summary"]["queries"] == 0  # the local index records no live query

        evaluated = _completed(evaluate_flow(**DEFAULTS["evaluate"], return_state=True))
        systems = yaml.safe_load((work / "params.yaml").read_text())["evaluate"]["systems"]
        assert set(evaluated["scores"]) == set(systems)
        assert set(json.loads((work / "runs" / "evaluate" / "eval.json").read_text())) == set(systems)

        sent = _study_units_as_deployments(work)  # two units done elsewhere and recorded, as the study flow does
        studied = _completed(study_flow(**DEFAULTS["study"], return_state=True))  # the rest, then the analysis
        assert list(studied)[-1] == "study/dvc.yaml:analyze"
        assert {s for s, r in studied.items() if not r["ran"]} == set(sent)  # recorded units are not redone
        assert json.loads((work / "metrics" / "study.json").read_text())["seeds"] == 1
    assert dvc.status(work) == {}  # both dvc.yaml files: nothing left to run, nothing half-recorded


def _study_units_as_deployments(work: Path) -> list[str]:
    """The study-unit deployments' entry flow with their defaults and the one parameter the study flow sends
    (`stage`): a training unit (study-unit-gpu) and its evaluation (study-unit-cpu), each then recorded in
    study/dvc.lock as the study flow records a unit a deployment ran (`dvc commit`)."""
    from flows.study import study_unit_flow

    sent = {"study-unit-gpu": "study/dvc.yaml:train@eg_grpo-0", "study-unit-cpu": "study/dvc.yaml:evaluate@eg_grpo-0"}
    for deployment, stage in sent.items():
        done = _completed(study_unit_flow(**DEFAULTS[deployment], stage=stage, return_state=True))
        assert done["stage"] == stage
        dvc.commit(work, stage)
        assert dvc.status(work, [stage]) == {}
    return list(sent.values())


def test_a_fresh_clone_pulls_every_output_and_has_nothing_to_recompute(project, pipeline, tmp_path):
    _completed(pipeline.state)
    work = project.work
    clone = tmp_path / "repo"
    copy_repo(clone)  # what `git clone` gives: tracked files, with dvc.lock and the `cache: false` outputs committed
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    for name in ("params.yaml", "dvc.lock"):
        shutil.copy2(work / name, clone / name)
    for folder in ("metrics", "reports"):
        shutil.rmtree(clone / folder, ignore_errors=True)
        shutil.copytree(work / folder, clone / folder)
    # the remote as the pipeline pushed it, where the clone's .dvc/config finds it (../biocheck-dvc-remote)
    shutil.copytree(project.remote, tmp_path / "biocheck-dvc-remote")
    assert not (clone / "data").exists() and not (clone / "models").exists()

    assert dvc.pull(clone, "local") is True
    for rel in ("data/prepared/corpus.jsonl", "data/raw/manifest.json", "models/selected/config.json"):
        assert (clone / rel).read_bytes() == (work / rel).read_bytes()
    assert dvc.status(clone, ["dvc.yaml"]) == {}  # every stage's outputs restored: nothing to recompute


def test_a_failing_validation_fails_the_flow_run_with_its_summary_and_an_artifact(project, pipeline, tmp_path):
    from flows.data import DataValidationError, data_flow
    from prefect.artifacts import Artifact

    _completed(pipeline.state)
    work = tmp_path / "repo"
    shutil.copytree(project.work, work, symlinks=True)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["validate"]["expected_rows"]["healthfc"] = {"test": 7}  # the release has 750
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    manifest = (work / "data" / "raw" / "manifest.json").stat().st_mtime_ns

    with _in(project):
        state = data_flow(root=str(work), return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, DataValidationError)
    assert str(error).startswith("1 of ") and "data checks FAILED" in str(error)
    assert "healthfc/full[test]" in str(error) and "observed 750" in str(error)
    assert "observed 750" in state.message  # the flow run's own message
    artifact = Artifact.get("validation")
    assert artifact.flow_run_id is not None and artifact.data.startswith("# Data validation FAILED")
    assert str(error) in artifact.data  # the same summary, verbatim
    # fetch and prepare were up to date; the failed validation is not recorded as done
    changed = dvc.status(work)
    assert "validate" in changed and "fetch" not in changed and "prepare" not in changed
    assert (work / "data" / "raw" / "manifest.json").stat().st_mtime_ns == manifest
