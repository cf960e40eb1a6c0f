"""The registered model is the agent, and `champion` moves only through a gate: `select` registers each
selection as the `challenger` with its validation results; `champion` follows only a challenger that beats it
on the validation reward (the comparison recorded on the version) or `biocheck model promote`; the registered
version, served by MLflow's own scoring server (in-process, and `mlflow models serve` in a slow test), answers a
claim with the report; `biocheck check` without --llm runs the champion before models/selected and says which."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.labels import Label
from biocheck.llm.load import model_fingerprint
from biocheck.train.select import SelectConfig, select
from biocheck.wiring.served import ServeConfig
from tests.helpers.checkpoints import NAME, fake_checkpoints, tiny_checkpoints

runner = CliRunner()


def _select(tmp, ckpts, variant="eg_grpo", serve=None, **kw) -> dict:
    cfg = SelectConfig(checkpoints=ckpts, out_dir=tmp / f"selected-{ckpts.name}", metrics_path=tmp / "sel.json",
                       curve_path=tmp / "curve.csv", registered_model=NAME, **kw)
    if variant != "eg_grpo":
        cfg.alias = variant  # as pipeline.select_config sets it for the comparison variant
    return select(cfg, variant=variant, serve=serve)


def _aliases(client) -> dict[str, str]:
    return {alias: str(v) for alias, v in client.get_registered_model(NAME).aliases.items()}


def test_champion_moves_only_to_a_challenger_that_beats_it(tmp_path, store):  # noqa: F811
    first = _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.5}))["registered"]
    assert first["promoted"] and _aliases(store) == {"champion": "1", "challenger": "1"}
    assert store.get_model_version(NAME, "1").tags["promotion"].startswith("first version")

    worse = _select(tmp_path, fake_checkpoints(tmp_path / "b", {10: 0.3}))["registered"]
    assert not worse["promoted"]
    assert _aliases(store) == {"champion": "1", "challenger": "2"}  # the worse one is only the challenger
    tags = store.get_model_version(NAME, "2").tags
    assert (tags["promoted"], tags["compared_with"], tags["champion_validation_reward"]) == ("false", "1", "0.5")
    assert "0.3000 does not beat champion v1's 0.5000" in tags["promotion"]
    assert tags["validation_reward"] == "0.3" and tags["validation.outcome"] == "0.15"  # its validation results
    assert "validation reward 0.3000" in store.get_model_version(NAME, "2").description

    tie = _select(tmp_path, fake_checkpoints(tmp_path / "c", {10: 0.5}))["registered"]
    assert not tie["promoted"] and _aliases(store)["champion"] == "1"  # a tie keeps the champion

    better = _select(tmp_path, fake_checkpoints(tmp_path / "d", {10: 0.7}))["registered"]
    assert better["promoted"] and _aliases(store) == {"champion": "4", "challenger": "4"}
    assert store.get_model_version(NAME, "4").tags["compared_with"] == "1"


def test_the_outcome_only_ablation_is_never_the_challenger(tmp_path, store):  # noqa: F811
    _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.2}))
    ablation = _select(tmp_path, fake_checkpoints(tmp_path / "b", {10: 0.9}), variant="outcome_only")
    assert ablation["registered"]["alias"] == "outcome_only" and "promoted" not in ablation["registered"]
    assert _aliases(store) == {"champion": "1", "challenger": "1", "outcome_only": "2"}
    assert store.get_model_version(NAME, "2").tags["variant"] == "outcome_only"


def test_promote_by_hand_and_its_one_line_errors(tmp_path, store):  # noqa: F811
    _select(tmp_path, fake_checkpoints(tmp_path / "a", {10: 0.5}))
    _select(tmp_path, fake_checkpoints(tmp_path / "b", {10: 0.3}))
    r = runner.invoke(app, ["model", "promote", "--name", NAME])  # the challenger, by default
    assert r.exit_code == 0, r.output
    assert _aliases(store)["champion"] == "2" and "champion -> v2" in r.output
    assert store.get_model_version(NAME, "2").tags["promotion"].startswith("promoted by hand")
    assert runner.invoke(app, ["model", "promote", "1", "--name", NAME]).exit_code == 0
    assert _aliases(store)["champion"] == "1"
    for args, message in ((["7", "--name", NAME], "no version 7 (its versions: 1, 2)"),
                          (["nobody", "--name", NAME], "no alias 'nobody' (its aliases: challenger, champion)"),
                          (["--name", "no-such-model"], "has no such model")):
        r = runner.invoke(app, ["model", "promote", *args])
        assert r.exit_code == 1 and message in r.output, r.output
        assert r.output.startswith("error:") and r.output.count("\n") == 1 and "Traceback" not in r.output
    assert _aliases(store)["champion"] == "1"  # a failed promote changed nothing


@pytest.fixture
def served(tmp_path, store, tiny_model, evidence):  # noqa: F811
    """The tiny model selected and registered with a search index, then the index moved away: the registered
    agent must carry what it searches."""
    cfg, _ = evidence
    serve = ServeConfig(agent={"max_searches": 1, "max_new_tokens": 48, "abstract_chars": 200},
                        search={"backend": "local", "index_dir": str(cfg.index_dir), "max_results": 2})
    _select(tmp_path, tiny_checkpoints(tmp_path / "ckpt", tiny_model, {10: 0.5}), serve=serve)
    shutil.move(cfg.index_dir, tmp_path / "moved-index")
    return store.get_model_version_by_alias(NAME, "champion")


def test_the_champion_served_by_mlflows_scoring_server_answers_with_a_report(served, tmp_path):
    from fastapi.testclient import TestClient
    from mlflow.pyfunc import scoring_server

    model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
    assert model.metadata.signature.inputs.input_names() == ["claim"]
    client = TestClient(scoring_server.init(model))
    claim = "Vitamin D prevents fractures."
    response = client.post("/invocations", json={"dataframe_records": [{"claim": claim}]})
    assert response.status_code == 200, response.text
    (row,) = response.json()["predictions"]
    report = json.loads(row["report"])
    assert report["claim"] == claim
    assert set(report["report"]) >= {"supporting", "refuting", "summary", "conclusion"}
    assert report["meta"]["llm_fingerprint"] == served.tags["model_fingerprint"]  # the version's own weights
    assert report["meta"]["searches"] <= 1  # agent.max_searches as logged
    # the serving example MLflow wrote is a request the server takes
    example = json.loads(Path(mlflow.artifacts.download_artifacts(
        f"models:/{NAME}@champion/serving_input_example.json", dst_path=str(tmp_path / "example"))).read_text())
    assert client.post("/invocations", json=example).status_code == 200
    bad = client.post("/invocations", json={"dataframe_records": [{"claim": ""}]})
    assert bad.status_code >= 400 and "non-empty 'claim'" in bad.text


def _check_params(tmp_path, selected):
    import yaml

    from tests.helpers.paths import REPO

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"]["index_dir"] = str(tmp_path / "moved-index")
    params["select"]["out_dir"] = str(selected)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))


def _model_line(output: str) -> str:
    [line] = [x for x in output.splitlines() if x.startswith("model: ")]  # one line says which model
    return line


def test_check_without_a_local_model_runs_the_champion_and_says_which(served, tmp_path, monkeypatch):
    _check_params(tmp_path, tmp_path / "no-local-selection")
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--max-searches", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert f"the registry's champion ({NAME} version {served.version})" in _model_line(r.output)
    assert served.tags["model_fingerprint"] in r.output
    assert model_fingerprint(tmp_path / "selected-ckpt") == served.tags["model_fingerprint"]


def test_check_prefers_the_champion_to_models_selected_and_falls_back_to_it(served, tmp_path, monkeypatch):
    """models/selected is the newest selection, not a model the user gave: the registry's champion comes first;
    with no champion to read (tracking off) the selection runs, and stderr says why."""
    selected = tmp_path / "selected-ckpt"  # the selection select left behind, a model folder
    _check_params(tmp_path, selected)
    monkeypatch.chdir(tmp_path)
    args = ["check", "Vitamin D prevents fractures.", "--max-searches", "0", "--format", "json"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    line = _model_line(r.output)
    assert f"from the registry's champion ({NAME} version {served.version})" in line
    assert f"models:/{NAME}@champion" in json.loads(r.stdout)["meta"]["llm"]
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    line = _model_line(r.output)
    assert "from the selected checkpoint (biocheck select; no champion from the model registry)" in line
    assert json.loads(r.stdout)["meta"]["llm"] == f"transformers:{selected.as_posix()}"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc) -> None:
    """End the server and the workers it started (its own process group), whatever happened."""
    import os
    import signal
    import subprocess

    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.mark.slow  # a real server process: MLflow, torch and the agent load in it (about 30-60 s here)
def test_mlflow_models_serve_answers_a_claim_with_the_champions_report(served, tmp_path):
    """The command docs/mlflow.md gives, as a user runs it: `mlflow models serve -m models:/NAME@champion
    --env-manager local` on a free port, a claim POSTed to /invocations, the report parsed from the answer."""
    import os
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    from tests.helpers.paths import REPO

    port = _free_port()
    # as in an activated venv: MLflow runs `uvicorn` from PATH; this checkout's BioCheck loads the model
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"models:/{NAME}@champion",
             "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port), "-w", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # up to about 5 minutes for the server to load the model, on a busy machine
            assert proc.poll() is None, f"the server exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{base}/ping", timeout=2) as ping:
                    if ping.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        else:
            pytest.fail(f"the server never answered /ping:\n{log.read_text()[-3000:]}")
        claim = "Vitamin D prevents fractures."
        request = urllib.request.Request(f"{base}/invocations", method="POST",
                                         data=json.dumps({"dataframe_records": [{"claim": claim}]}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.loads(response.read())
        (row,) = answer["predictions"]
        report = json.loads(row["report"])
        assert report["claim"] == claim
        assert set(report["report"]) >= {"supporting", "refuting", "summary", "conclusion"}
        # a label, or none with the parse problems that say why (the tiny random model rarely writes one)
        assert report["report"]["conclusion"] in {label.value for label in Label} or (
            report["report"]["conclusion"] is None and report["problems"] and not report["ok"])
        assert report["meta"]["llm_fingerprint"] == served.tags["model_fingerprint"]  # the champion's weights
    finally:
        _stop(proc)
    assert proc.poll() is not None  # nothing left running
