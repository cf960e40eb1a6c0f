"""No secret from the environment reaches the tracking store: run tracked stages with NCBI_API_KEY,
OPENAI_API_KEY, HF_TOKEN, GITHUB_TOKEN and MY_SERVICE_TOKEN set (one of them also inside a logged config
value), then read every byte of the MLflow database and of the artifact store."""

from __future__ import annotations

import json
import os

import mlflow
import yaml
from typer.testing import CliRunner

from biocheck import tracking
from biocheck.cli import app
from biocheck.pipeline import evaluate_stage, select_stage
from biocheck.secrets import is_secret_name
from tests.helpers.checkpoints import fake_checkpoints

SECRETS = {"NCBI_API_KEY": "ncbi-5ecret-0a1b2c3d", "OPENAI_API_KEY": "sk-5ecret-openai-4e5f6a7b",
           "HF_TOKEN": "hf_5ecretToken8c9d0e", "GITHUB_TOKEN": "ghp_5ecretGithub1f2a3b",
           "MY_SERVICE_TOKEN": "svc-5ecret-4c5d6e7f"}


def test_tracked_stages_store_no_secret(project, monkeypatch, tmp_path):  # noqa: F811
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    store = tmp_path / "tracking"
    store.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'mlflow.db'}")
    monkeypatch.setenv(tracking.PIPELINE_ENV, "secrets-test")  # pipeline parents too
    client = mlflow.MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    for name in tracking.EXPERIMENTS.values():  # artifacts under the store folder too, not the cwd's mlruns/
        client.create_experiment(name, artifact_location=(store / "artifacts" / name).as_uri())

    # a logged config value holding a secret: the model spec `check --mlflow` logs as agent.llm
    script = project / f"{SECRETS['OPENAI_API_KEY']}.json"
    script.write_text((project / "script.json").read_text())
    claims = project / "claims.jsonl"
    claims.write_text('{"id": "a", "claim": "Vitamin D prevents fractures."}\n')
    r = CliRunner().invoke(app, ["check", "--claims", str(claims), "--out", "out", "--llm", f"scripted:{script.name}",
                                 "--mlflow"])
    assert r.exit_code == 0, r.output
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["train"]["out_dir"] = str(fake_checkpoints(project / "ckpt", {10: 0.3}))
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    registered = select_stage("params.yaml")["registered"]
    assert (registered["alias"], registered["promoted"]) == ("challenger", True)  # the first: champion too
    evaluate_stage("params.yaml", progress=False, systems=["eg_grpo", "no_retrieval"])

    # the runs are there, with the secret in the config blanked
    [check] = client.search_runs([client.get_experiment_by_name("biocheck-eval").experiment_id],
                                 filter_string="tags.stage = 'check'")
    assert check.data.params["agent.llm"] == "scripted:***.json"
    assert client.list_artifacts(check.info.run_id, "traces")
    files = [f for f in store.rglob("*") if f.is_file()]
    assert (store / "mlflow.db") in files and len(files) >= 10  # traces, gallery, tables, eval JSONs
    leaks = {f"{f.relative_to(store)}: {name}" for f in files for name, value in SECRETS.items()
             if value.encode() in f.read_bytes() or value in str(f)}
    assert not leaks, leaks
    assert json.loads((project / "out" / "summary.json").read_text())["episodes"] == 1


def test_a_shown_uri_masks_its_query_values_also_without_a_password(monkeypatch):
    """A tracking URI in a message: its query values (`?token=...`) are masked by `shown_uri` itself, with no
    password in the URI and no secret in the environment to fall back on."""
    for name, value in dict(os.environ).items():
        if is_secret_name(name) or "://" in value:
            monkeypatch.delenv(name)
    shown = tracking.shown_uri("https://mlflow.example.org/api?token=tok-0a1b2c3d4e&run=7")
    assert shown == "https://mlflow.example.org/api?token=***&run=***"
    assert tracking.shown_uri("sqlite:////abs/mlflow.db") == "sqlite:////abs/mlflow.db"  # nothing to mask: as given


def test_a_large_file_is_streamed_and_a_secret_across_two_chunks_is_still_found(tmp_path, monkeypatch):
    """Model weights are never read into memory whole: a file over the text limit is scanned in chunks, copied
    as it is when it holds no secret, and refused when one straddles a chunk boundary."""
    secret = "sk-5ecret-openai-4e5f6a7b"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    monkeypatch.setattr(tracking.logs, "_TEXT_MAX", 64)  # where copy_redacted reads them
    monkeypatch.setattr(tracking.logs, "_CHUNK", 32)
    clean = tmp_path / "clean.bin"
    clean.write_bytes(bytes(range(256)) * 4)
    assert tracking.copy_redacted(clean, tmp_path / "out" / "clean.bin")
    assert (tmp_path / "out" / "clean.bin").read_bytes() == clean.read_bytes()
    straddling = tmp_path / "weights.bin"
    straddling.write_bytes(b"\x00" * 20 + secret.encode() + b"\xff" * 200)  # bytes 20-45: chunks 0 and 1
    assert not tracking.copy_redacted(straddling, tmp_path / "out" / "weights.bin")
    assert not (tmp_path / "out" / "weights.bin").exists()
