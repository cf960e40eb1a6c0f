"""The model registry holds models: `biocheck select` logs the selected checkpoint as an MLflow model of its
`select <variant>` run and registers that logged model, so `models:/biocheck-agent@champion` loads through
MLflow (`mlflow.transformers.load_model`) and through BioCheck (`--llm models:/...`, downloaded into a cache),
and a version keeps its own copy of the files; evaluation results are metrics of the logged model; a moved
project still reads its artifacts."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from typer.testing import CliRunner

from biocheck import tracking
from biocheck.cli import app
from biocheck.llm.load import load_model, model_fingerprint
from biocheck.llm.resolve import ModelNotFoundError, resolve_model
from biocheck.llm.spec import split_spec
from biocheck.train.select import SelectConfig, select
from tests.helpers.checkpoints import NAME, fake_checkpoints, tiny_checkpoints

runner = CliRunner()


def _select(tmp: Path, ckpts: Path, **kw) -> dict:
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp / "selected", metrics_path=tmp / "sel.json",
                       curve_path=tmp / "curve.csv", registered_model=NAME, **kw)
    return select(cfg, variant="outcome_only" if kw.get("alias") == "outcome_only" else "eg_grpo")


@pytest.fixture
def champion(tmp_path, store, tiny_model):
    _select(tmp_path, tiny_checkpoints(tmp_path / "ckpt", tiny_model, {10: 0.2, 20: 0.5}))
    return store.get_model_version_by_alias(NAME, "champion")


def test_the_champion_loads_through_mlflow_after_select(champion, store, tmp_path):
    model_id = tracking.version_model_id(champion)
    assert champion.source == f"models:/{model_id}"  # the logged model, not the workspace folder
    logged = store.get_logged_model(model_id)
    assert logged.source_run_id == champion.run_id and str(logged.status) == "READY"
    assert store.get_run(champion.run_id).info.run_name == "select eg_grpo"
    pipe = mlflow.transformers.load_model(f"models:/{NAME}@champion")
    assert type(pipe).__name__ == "TextGenerationPipeline"
    assert pipe.model.config.to_dict()["architectures"] == json.loads(
        (tmp_path / "selected" / "config.json").read_text())["architectures"]
    assert pipe.tokenizer.chat_template  # the project's chat template came along
    info = mlflow.models.get_model_info(f"models:/{NAME}@champion")
    assert info.signature.inputs.input_names() == ["claim"] and info.signature.outputs.input_names() == ["report"]


def test_biocheck_loads_the_champion_by_its_registry_uri(champion, store, tmp_path):
    uri = f"models:/{NAME}@champion"
    assert split_spec(uri) == ("transformers", uri)
    folder = resolve_model(uri)
    assert folder.is_relative_to(tmp_path / "model-cache")
    assert model_fingerprint(folder) == champion.tags["model_fingerprint"] == model_fingerprint(tmp_path / "selected")
    assert resolve_model(f"models:/{NAME}/{champion.version}") == folder  # by number: the same cached copy
    loaded = load_model(uri, device="cpu")
    assert loaded.spec == f"transformers:{uri}" and loaded.path == folder


def test_check_runs_with_the_registered_champion(champion, evidence_workdir, monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")  # the store select wrote
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--llm", f"models:/{NAME}@champion",
                            "--max-searches", "1", "--trace", "t.json"])
    assert r.exit_code == 0, r.output
    trace = json.loads((evidence_workdir / "t.json").read_text())
    assert f"models:/{NAME}@champion" in json.dumps(trace)
    assert champion.tags["model_fingerprint"] in json.dumps(trace)


def test_a_new_selection_leaves_the_older_versions_files_as_they_were(tmp_path, store):
    _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.2, 20: 0.5}))
    first = store.get_model_version_by_alias(NAME, "champion")
    _select(tmp_path, fake_checkpoints(tmp_path / "b", {30: 0.9}))  # overwrites models/selected
    second = store.get_model_version_by_alias(NAME, "champion")
    assert (str(first.version), str(second.version)) == ("1", "2")
    old = resolve_model(f"models:/{NAME}/1")
    assert (old / "selection.json").is_file() and json.loads((old / "selection.json").read_text())["step"] == 20
    assert model_fingerprint(old) == first.tags["model_fingerprint"] != model_fingerprint(tmp_path / "selected")
    assert json.loads((resolve_model(f"models:/{NAME}@champion") / "selection.json").read_text())["step"] == 30
    # a folder that is no causal LM (no tokenizer, no architectures) is logged as files, without the flavor
    assert "transformers" not in mlflow.models.get_model_info(f"models:/{NAME}/1").flavors


@pytest.mark.parametrize("uri, message", [
    (f"models:/{NAME}@nobody", "has no alias 'nobody' (its aliases: challenger, champion)"),
    (f"models:/{NAME}/7", "has no version 7 (its versions: 1)"),
    ("models:/unknown-model@champion", "has no model 'unknown-model'"),
    (f"models:/{NAME}", "not a registered model reference"),
])
def test_a_registry_reference_that_names_nothing_is_one_line(tmp_path, store, uri, message):
    _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.2}))
    with pytest.raises(ModelNotFoundError, match=re.escape(message)) as e:
        resolve_model(uri)
    assert "\n" not in str(e.value)


def test_the_registry_with_tracking_off_or_unreachable_is_one_line(tmp_path, monkeypatch, store):
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    with pytest.raises(ModelNotFoundError, match="MLflow tracking is off"):
        resolve_model(f"models:/{NAME}@champion")
    monkeypatch.delenv("BIOCHECK_TRACKING")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'missing' / 'mlflow.db'}")
    with tracking.context():  # a new stage probes afresh
        with pytest.raises(ModelNotFoundError, match=r"cannot be used \(its folder .*missing does not exist\)"):
            resolve_model(f"models:/{NAME}@champion")
    r = runner.invoke(app, ["check", "A claim.", "--llm", f"models:/{NAME}@champion"])
    assert r.exit_code == 1 and r.output.strip().startswith("error:") and "Traceback" not in r.output


def test_evaluation_metrics_are_metrics_of_the_logged_model(tmp_path, store, caplog):
    from biocheck.evaluate.compare import tag_registered_versions

    _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.2, 20: 0.5}))
    _select(tmp_path, fake_checkpoints(tmp_path / "b", {10: 0.4}), alias="outcome_only")
    champion = store.get_model_version_by_alias(NAME, "champion")
    challenger = store.get_model_version_by_alias(NAME, "outcome_only")  # the ablation's own alias
    metrics = {s: {"scifact": {"n": 3, "accuracy": 0.5, "macro_f1": 0.25, "eqs": None, "ci": {"accuracy": {}}},
                   "healthfc": {"n": 7, "accuracy": 0.75, "macro_f1": 0.5, "eqs": 0.125}}
               for s in ("eg_grpo", "outcome_only")}
    ran = {"eg_grpo": {"model_fingerprint": champion.tags["model_fingerprint"]},
           "outcome_only": {"model_fingerprint": "another-model"}}
    with tracking.run("evaluate") as run:
        pass
    caplog.set_level(logging.INFO, logger="biocheck")
    with tracking.context(registered_model=NAME, model_aliases={"eg_grpo": "selected", "outcome_only": "outcome_only"}):
        # the first selection is champion and challenger (one version): its metrics once
        assert tag_registered_versions(metrics, ran, run.info.run_id) == ["champion", "challenger"]
    logged = store.get_logged_model(tracking.version_model_id(champion))
    assert {(m.key, m.value) for m in logged.metrics} == {
        ("scifact.n", 3), ("scifact.accuracy", 0.5), ("scifact.macro_f1", 0.25),
        ("healthfc.n", 7), ("healthfc.accuracy", 0.75), ("healthfc.macro_f1", 0.5), ("healthfc.eqs", 0.125)}
    assert {m.run_id for m in logged.metrics} == {champion.run_id}  # the model's own run (select)
    version = store.get_model_version(NAME, champion.version)
    assert not [k for k in version.tags if k.startswith("eval.")]  # numbers are metrics, not text tags
    assert version.tags["eval_run"] == f"runs:/{run.info.run_id}"
    assert not store.get_logged_model(tracking.version_model_id(challenger)).metrics  # not the model outcome_only ran
    assert "holds the model outcome_only ran" in caplog.text


def test_a_plain_mlflow_downloads_the_artifacts(tmp_path, monkeypatch):
    """Artifact locations are plain folders beside the SQLite database (mlartifacts/<experiment>): a Python
    that cannot import BioCheck (so no artifact plugin of ours) downloads a registered model's files and a
    run's artifacts with MLflow's own calls."""
    for name in (tracking.PIPELINE_ENV, "DVC_STAGE", "DVC_ROOT", "BIOCHECK_TRACKING"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{project / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # not the project: MLflow's default would put the files under ./mlruns
    _select(project, fake_checkpoints(project / "ckpt", {10: 0.2}))
    client = mlflow.MlflowClient(tracking.tracking_uri())
    version = client.get_model_version_by_alias(NAME, "champion")
    experiment = client.get_experiment_by_name("biocheck-train")
    assert experiment.artifact_location == (project / "mlartifacts" / "biocheck-train").as_uri()
    assert experiment.tags["mlflow.note.content"] == tracking.DESCRIPTIONS["train"]
    assert list((project / "mlartifacts").rglob("selection.json")) and not (tmp_path / "mlruns").exists()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    plain = subprocess.run([sys.executable, "-c", PLAIN.format(name=NAME, run_id=version.run_id,
                                                                uri=tracking.tracking_uri(), dst=tmp_path / "got")],
                           env=env, cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    step, listed = plain.stdout.split(maxsplit=1)
    assert step == "10" and "MLmodel" in listed


PLAIN = """import sys
sys.modules["biocheck"] = None  # as on a machine without BioCheck: importing it (a plugin of ours) fails
import json, pathlib, mlflow
mlflow.set_tracking_uri("{uri}")
model = mlflow.artifacts.download_artifacts("models:/{name}@champion", dst_path="{dst}/model")
step = json.loads(next(pathlib.Path(model).rglob("selection.json")).read_text())["step"]
run_files = mlflow.artifacts.list_artifacts(run_id="{run_id}")
assert not [m for m, v in sys.modules.items() if m.startswith("biocheck") and v is not None]
print(step, sorted(p.name for p in pathlib.Path(model).iterdir()), [f.path for f in run_files])
"""


def test_mlflow_processes_find_the_artifact_scheme_through_the_packages_entry_point():
    """Experiments an older BioCheck made (`biocheck-artifacts:` locations) stay readable by `mlflow ui` and
    plain MLflow calls in this environment, through the entry point."""
    import importlib.metadata
    import tomllib

    from tests.helpers.paths import REPO

    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]
    value = declared["mlflow.artifact_repository"][tracking.ARTIFACT_SCHEME]
    cls = importlib.metadata.EntryPoint(tracking.ARTIFACT_SCHEME, value, "mlflow.artifact_repository").load()
    repo = cls(f"{tracking.ARTIFACT_SCHEME}:/mlartifacts/x/1", tracking_uri="sqlite:////srv/project/mlflow.db")
    assert repo.artifact_dir == "/srv/project/mlartifacts/x/1"


QUICKSTART_DB = os.environ.get("BIOCHECK_MLFLOW_DB")  # e.g. the mlflow.db a `make quickstart` left (docs/mlflow.md)


@pytest.mark.skipif(not QUICKSTART_DB, reason="set BIOCHECK_MLFLOW_DB to the mlflow.db of a quickstart run")
def test_the_champion_of_a_quickstart_run_loads_through_mlflow(tmp_path, monkeypatch):
    """After `make quickstart` (BIOCHECK_MLFLOW_DB=<its mlflow.db>): the registry's champion loads through MLflow
    from that project's own artifacts, and is the model the pipeline selected (same fingerprint)."""
    db = Path(QUICKSTART_DB).resolve()
    assert db.is_file(), f"BIOCHECK_MLFLOW_DB={QUICKSTART_DB}: no such file"
    for name in (tracking.PIPELINE_ENV, "DVC_STAGE", "DVC_ROOT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    monkeypatch.setenv("BIOCHECK_MODEL_CACHE", str(tmp_path / "model-cache"))
    mlflow.set_tracking_uri(tracking.tracking_uri())
    tracking.use_project_artifacts()
    version = mlflow.MlflowClient().get_model_version_by_alias(NAME, "champion")
    assert version.source.startswith("models:/m-")
    pipe = mlflow.transformers.load_model(f"models:/{NAME}@champion")
    assert type(pipe).__name__ == "TextGenerationPipeline"
    folder = resolve_model(f"models:/{NAME}@champion")
    assert model_fingerprint(folder) == version.tags["model_fingerprint"]
    selected = db.parent / "models" / "selected"
    if selected.is_dir():  # the workspace still holds that selection
        assert model_fingerprint(selected) == version.tags["model_fingerprint"]


# --- one writer: a selection and a registry change at a time (issue 50, item 6) ---------------------------

def test_a_second_selection_of_the_same_checkpoints_writes_and_registers_nothing(tmp_path, store):
    """Two `select` at once registered the same checkpoint twice."""
    from biocheck.io import InputError
    from tests.helpers.eval_project import held

    ckpts = fake_checkpoints(tmp_path / "ckpt", {10: 0.2, 20: 0.5})
    with held(ckpts), pytest.raises(InputError, match=re.escape(
            f"select.checkpoints {ckpts}: another selection (biocheck select) is writing into this folder now")):
        _select(tmp_path, ckpts)
    assert not (tmp_path / "selected").exists() and not (tmp_path / "sel.json").exists()
    assert store.search_model_versions(f"name = '{NAME}'") == []
    with held(tmp_path):  # the SQLite store's folder: a registry change (select, promote) under way
        with pytest.raises(InputError, match=r"the model registry \(sqlite:///.*\): .* another registry change"):
            _select(tmp_path, ckpts)
        assert not (tmp_path / "selected").exists()
        _select(tmp_path, ckpts, register=False)  # a selection that leaves the registry alone needs no lock
        assert (tmp_path / "selected").is_dir()
        r = runner.invoke(app, ["model", "promote"])
        assert r.exit_code == 1 and "another registry change" in r.output and "Traceback" not in r.output
    assert str(_select(tmp_path, ckpts)["registered"]["version"]) == "1"  # released: registered once
    assert len(store.search_model_versions(f"name = '{NAME}'")) == 1
