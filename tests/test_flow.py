"""The Prefect flows run the real DVC stages, in a copy of the repo as a DVC project, under a throw-away
Prefect server: DVC runs each stage once and records it in dvc.lock, a second flow run reruns nothing, a
failing validation fails the flow run with its summary (message and markdown artifact), and the pipeline
pushes its outputs to the DVC remote, from which a fresh clone pulls them back.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from biocheck.orchestration import dvc
from tests.builders import write_raw
from tests.test_pipeline import _copy_repo, _workspace

DATA_STAGES = ("fetch", "prepare", "validate")


@pytest.fixture(scope="module")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


def _set_expected_healthfc(work: Path, rows: int) -> None:
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["validate"]["expected_rows"] = {"healthfc": {"test": rows}}  # write_raw's release has 7
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def _outputs(work: Path) -> dict[str, int]:
    """mtime of every file the data and evidence stages write."""
    roots = [work / "data", work / "reports" / "validation.json", work / "metrics"]
    files = [p for r in roots for p in ([r] if r.is_file() else r.rglob("*")) if p.is_file()]
    return {str(p.relative_to(work)): p.stat().st_mtime_ns for p in files}


@pytest.fixture(scope="module")
def ran(prefect_harness, tmp_path_factory):
    """A copy of the repo as a DVC project (git + .dvc/ + dvc.yaml + params.yaml + src/) on a tiny raw
    release, after one run of the data flow and the evidence flow."""
    from flows.data import data_flow
    from flows.evidence import evidence_flow

    tmp = tmp_path_factory.mktemp("flows")
    mirror = write_raw(tmp / "mirror")
    work, _ = _workspace(tmp, mirror)
    _set_expected_healthfc(work, 7)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BIOCHECK_DATA_MIRROR", str(mirror))
        data = data_flow(root=str(work))
        evidence = evidence_flow(root=str(work))
    return SimpleNamespace(work=work, data=data, evidence=evidence, outputs=_outputs(work))


def _copy(work: Path, dest: Path) -> Path:
    """The project with its outputs and DVC cache, as a second checkout on the same machine would be."""
    shutil.copytree(work, dest / "repo", symlinks=True)
    return dest / "repo"


@pytest.mark.slow  # a Prefect server (~20 s) and each stage a `dvc repro` of a fresh `biocheck` process
def test_flows_run_each_stage_through_dvc_once_then_skip_it(ran):
    from flows.data import data_flow
    from flows.evidence import evidence_flow
    from prefect.artifacts import Artifact

    work = ran.work
    assert [ran.data[s]["ran"] for s in DATA_STAGES] == [True, True, True]
    assert ran.evidence["evidence"]["ran"] is True
    assert {*DATA_STAGES, "evidence"} <= set(yaml.safe_load((work / "dvc.lock").read_text())["stages"])
    assert ran.data["validate"]["failed"] == 0 and ran.data["validate"]["checks"] > 0
    assert json.loads((work / "reports" / "validation.json").read_text())["success"] is True
    assert json.loads((work / "metrics" / "data.json").read_text())["full"]["healthfc"]["test"]["total"] == 7
    assert json.loads((work / "metrics" / "evidence.json").read_text())["index"]["docs"] > 0
    assert Artifact.get("validation").data.startswith("# Data validation passed")

    again = data_flow(root=str(work))  # nothing changed: DVC skips every stage, no output is rewritten
    assert [again[s]["ran"] for s in DATA_STAGES] == [False, False, False]
    assert evidence_flow(root=str(work))["evidence"]["ran"] is False
    assert _outputs(work) == ran.outputs


@pytest.mark.slow
def test_a_failing_validation_fails_the_flow_run_with_its_summary_and_an_artifact(ran, tmp_path):
    from flows.data import DataValidationError, data_flow
    from prefect.artifacts import Artifact

    work = _copy(ran.work, tmp_path)
    _set_expected_healthfc(work, 750)  # the official size; this release has 7
    state = data_flow(root=str(work), return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, DataValidationError)
    assert str(error).startswith("1 of ") and "data checks FAILED" in str(error)
    assert "healthfc/full[test]" in str(error) and "observed 7" in str(error)
    assert "observed 7" in state.message  # the flow run's own message

    artifact = Artifact.get("validation")
    assert artifact.flow_run_id is not None and artifact.data.startswith("# Data validation FAILED")
    assert str(error) in artifact.data  # the same summary, verbatim
    # fetch and prepare were up to date; the failed validation is not recorded as done
    changed = dvc.status(work)
    assert "validate" in changed and "fetch" not in changed and "prepare" not in changed
    assert (work / "data" / "raw" / "manifest.json").stat().st_mtime_ns == ran.outputs["data/raw/manifest.json"]


@pytest.mark.slow
def test_the_pipeline_pushes_after_success_and_a_fresh_clone_pulls_the_outputs(ran, tmp_path, monkeypatch):
    import flows.pipeline as pipe

    work = _copy(ran.work, tmp_path)
    remote = tmp_path / "biocheck-dvc-remote"  # .dvc/config: ../../biocheck-dvc-remote from repo/.dvc
    assert dvc.remotes(work)["local"] == str(remote)
    steps = []
    monkeypatch.setattr(pipe, "train_step", lambda params, root, deployment: steps.append("train") or {})
    monkeypatch.setattr(pipe, "evaluate_task", lambda root: steps.append("evaluate") or {})

    out = pipe.pipeline_flow(root=str(work))  # pull (nothing there yet), data, evidence (skipped), push
    assert steps == ["train", "evaluate"] and out["push"] == "local" and out["pull"] is True
    assert [out["data"][s]["ran"] for s in DATA_STAGES] == [False, False, False]
    assert any(remote.rglob("*")), "dvc push wrote nothing"

    clone = tmp_path / "clone"  # what `git clone` gives: tracked files, dvc.lock and the metrics, no data
    _copy_repo(clone)
    subprocess.run(["git", "init", "-q"], cwd=clone, check=True)
    for name in ("params.yaml", "dvc.lock"):
        shutil.copy2(work / name, clone / name)
    for folder in ("metrics", "reports"):  # `cache: false` outputs live in git, not the remote
        shutil.rmtree(clone / folder, ignore_errors=True)
        shutil.copytree(work / folder, clone / folder)
    assert not (clone / "data").exists()

    assert dvc.pull(clone, "local") is True
    for rel in ("data/prepared/corpus.jsonl", "data/raw/manifest.json"):
        assert (clone / rel).read_bytes() == (work / rel).read_bytes()
    assert any((clone / "data" / "evidence" / "index").iterdir())
    changed = dvc.status(clone)
    assert not ({*DATA_STAGES, "evidence"} & set(changed)), changed  # restored: nothing to recompute
