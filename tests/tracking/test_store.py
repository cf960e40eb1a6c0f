"""A tracking store that cannot be used never costs a result: one warning line on stderr (what failed, where,
how to fix), the stage writes its outputs and exits 0, and MLflow is not even asked (no HTTP retry loop)."""

from __future__ import annotations

import json
import os

import mlflow
import pytest
from typer.testing import CliRunner

from biocheck import tracking
from biocheck.cli import app

runner = CliRunner()


def _mlflow_is_not_asked(monkeypatch) -> None:
    def asked(*_a, **_k):
        raise AssertionError("MLflow was called for a tracking store the probe found unusable")

    for name in ("set_tracking_uri", "set_experiment", "start_run"):
        monkeypatch.setattr(mlflow, name, asked)


def _one_warning(r, *needles: str) -> str:
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    # (MLflow's own INFO lines, e.g. "Creating initial MLflow database tables", are no warnings)
    lines = [x for x in r.stderr.splitlines() if "warning" in x.lower() or "error" in x.lower()]
    assert len(lines) == 1, r.stderr
    line = lines[0]
    assert line.startswith("warning: MLflow tracking off: ") and "BIOCHECK_TRACKING=off" in line
    assert "results are written as usual" in line and "MLFLOW_TRACKING_URI" in line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


@pytest.mark.parametrize("uri, shown, why", [
    ("http://ann:pw-5ecret-42@127.0.0.1:9", "http://ann:***@127.0.0.1:9", "no answer"),
    ("sqlite:///{tmp}/no/such/folder/mlflow.db", "sqlite:///{tmp}/no/such/folder/mlflow.db", "does not exist"),
], ids=["server-down", "missing-folder"])
def test_prepare_writes_its_outputs_with_one_warning_line(workdir, monkeypatch, uri, shown, why):  # noqa: F811
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri.format(tmp=workdir))
    _mlflow_is_not_asked(monkeypatch)
    r = runner.invoke(app, ["data", "prepare"])
    line = _one_warning(r, shown.format(tmp=workdir), why, "starting the prepare run")
    assert "pw-5ecret-42" not in r.output and "pw-5ecret-42" not in line
    assert (workdir / "data" / "prepared" / "scifact" / "train.jsonl").is_file()
    assert json.loads((workdir / "metrics" / "data.json").read_text())["working"]["scifact"]["train"]["total"] == 4


def test_a_folder_named_as_the_database_is_one_warning_line_without_retries(workdir, monkeypatch):  # noqa: F811
    # issue 50: MLflow retried opening a folder as SQLite for 100+ s; the probe now says what it is at once
    (workdir / "store.db").mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'store.db'}")
    _mlflow_is_not_asked(monkeypatch)
    _one_warning(runner.invoke(app, ["data", "prepare"]), "store.db is a folder, not a database file")
    assert (workdir / "data" / "prepared" / "corpus.jsonl").is_file()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_warning_line(workdir, monkeypatch):  # noqa: F811
    folder = workdir / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder}/mlflow.db")
    try:
        _one_warning(runner.invoke(app, ["data", "prepare"]), "is not writable")
    finally:
        folder.chmod(0o700)
    assert (workdir / "data" / "prepared" / "corpus.jsonl").is_file()


def test_a_store_failing_mid_run_is_one_warning_line_too(workdir, monkeypatch, tmp_path):  # noqa: F811
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mid.db'}")

    def broken(*_a, **_k):
        raise mlflow.exceptions.MlflowException("database is locked")

    monkeypatch.setattr(mlflow, "log_metrics", broken)
    r = runner.invoke(app, ["data", "prepare"])
    _one_warning(r, "logging metrics", "database is locked")
    assert (workdir / "metrics" / "data.json").is_file()
    assert not tracking.enabled()  # off for the rest of the stage, for this store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    assert tracking.enabled()  # another store is tried afresh
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mid.db'}")
    with tracking.context():
        assert tracking.enabled()  # and so is this one by the next stage


def test_tracking_off_says_nothing(workdir, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    _mlflow_is_not_asked(monkeypatch)
    r = runner.invoke(app, ["data", "prepare"])
    assert r.exit_code == 0 and "tracking" not in r.stderr.lower()


def test_evaluate_writes_its_metrics_with_one_warning_line(project, monkeypatch):  # noqa: F811
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9/")
    _mlflow_is_not_asked(monkeypatch)
    r = runner.invoke(app, ["evaluate", "--systems", "no_retrieval", "--no-progress"])
    _one_warning(r, "http://127.0.0.1:9/", "starting the evaluate run")
    metrics = json.loads((project / "reports" / "eval_metrics.json").read_text())
    assert metrics["no_retrieval"]["scifact"]["n"] == 3
    assert (project / "eval" / "predictions" / "no_retrieval" / "healthfc.jsonl").is_file()


def test_the_store_object_holds_what_was_probed_and_given_up_for_one_stage(tmp_path, monkeypatch, capsys):
    """tracking.store.STORE is this process's only tracking state: a give-up turns tracking off until the next
    stage's context (which probes afresh); STORE.reset() is a fresh process's state, for tests."""
    from biocheck.tracking.store import STORE

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'gone' / 'mlflow.db'}")
    monkeypatch.delenv("BIOCHECK_TRACKING", raising=False)
    with tracking.context(profile="p"):
        assert tracking.store_problem() == f"its folder {tmp_path / 'gone'} does not exist"
        with tracking.guard("logging metrics"):
            raise tracking.Unavailable(tracking.store_problem())
        assert not tracking.enabled() and tracking.current().profile == "p"
        (tmp_path / "gone").mkdir()
        assert tracking.store_problem() is not None  # probed once per stage
    assert capsys.readouterr().err.count("warning: MLflow tracking off: logging metrics at sqlite:///") == 1
    with tracking.context():
        assert tracking.enabled() and tracking.store_problem() is None  # the next stage tries again
        STORE.give_up("x", RuntimeError("down"))
        assert not tracking.enabled()
        STORE.reset()
        assert tracking.enabled() and not STORE.probed and tracking.current().profile is None
