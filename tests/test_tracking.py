from __future__ import annotations

import mlflow
import yaml

from biocheck.pipeline import prepare_stage, validate_stage
from biocheck.tracking import flatten, repo_root, tracking_uri
from tests.conftest import REPO


def test_default_uri_is_sqlite_at_repo_root(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(REPO / "src" / "biocheck")
    assert repo_root() == REPO
    assert tracking_uri() == f"sqlite:///{REPO / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert tracking_uri() == "sqlite:////elsewhere.db"


def test_flatten_nested_stats():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_prepare_and_validate_log_dataset_stats(tmp_path, raw_dir, monkeypatch):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(raw_dir=str(raw_dir), out_dir=str(tmp_path / "prepared"))
    params["validate"]["expected_rows"] = {}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NCBI_API_KEY", "sekret-key-123")  # secrets in the env must never be logged
    stats = prepare_stage(path)
    validate_stage(path, prepared_dir=tmp_path / "prepared")

    mlflow.set_tracking_uri(tracking_uri())
    runs = mlflow.search_runs(experiment_names=["biocheck"], order_by=["start_time DESC"], max_results=2,
                              output_format="list")
    validate_run, prepare_run = runs
    assert prepare_run.data.tags["stage"] == "prepare" and validate_run.data.tags["stage"] == "validate"
    m = prepare_run.data.metrics
    assert m["full.scifact.test.REFUTED"] == stats["full"]["scifact"]["test"]["REFUTED"] == 2
    assert m["working.healthfc.test.NEI"] == stats["working"]["healthfc"]["test"]["NEI"]
    assert prepare_run.data.params["data.seed"] == str(params["data"]["seed"])
    assert validate_run.data.metrics["validation.failed"] == 0
    assert validate_run.data.metrics["full.healthfc.test.total"] == 7
    everything = str(prepare_run.data) + str(validate_run.data)
    assert "sekret-key-123" not in everything
