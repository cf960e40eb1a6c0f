"""prefect.yaml: its seven deployments, checked statically and against a real local Prefect server.

- Statically: each deployment's entrypoint loads, its default parameters fit the flow's signature (the
  check the server makes when a run is created), its cron strings are valid, pools and names as designed.
- On a server (slow): `prefect server start` on a free 127.0.0.1 port, work pools cpu and gpu,
  `prefect deploy --all` from a throw-away project (a tiny model, index and test split), then through the
  API: the schedules carry prefect.yaml's crons, every deployment runs in the directory it was deployed
  from, an unknown parameter is rejected by `prefect deployment run` (and, passed through the Python API,
  fails its run with a message naming it), and a worker runs the `evaluate` deployment to COMPLETED with
  its metrics under runs/evaluate. Everything started is stopped, and nothing carrying its marker survives.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from biocheck.data.schema import ClaimRecord
from tests.helpers.paths import REPO
from tests.helpers.prefect_server import PrefectServer, prefect_server

PREFECT_YAML = REPO / "prefect.yaml"
SPEC = yaml.safe_load(PREFECT_YAML.read_text())
DEPLOYMENTS = {d["name"]: d for d in SPEC["deployments"]}
SCHEDULED = ("pipeline-weekly", "evidence-refresh-nightly")
RUN_TIMEOUT_S = 600  # the evaluate run: worker start, flow-run process, Dask, tiny model (about a minute here)


def _flow(entrypoint: str):
    from prefect.flows import load_flow_from_entrypoint

    path, fn = entrypoint.split(":")
    return load_flow_from_entrypoint(f"{REPO / path}:{fn}")


def _crons(deployment: dict) -> list[tuple[str, str]]:
    return [(s["cron"], s["timezone"]) for s in deployment.get("schedules") or []]


# --- prefect.yaml, without a server -------------------------------------------------------------------

def test_the_seven_deployments_on_their_pools():
    pools = {name: d["work_pool"]["name"] for name, d in DEPLOYMENTS.items()}
    assert pools == {"pipeline-weekly": "cpu", "evidence-refresh-nightly": "cpu", "evaluate": "cpu", "train-gpu": "gpu",
                     "study": "cpu", "study-unit-gpu": "gpu", "study-unit-cpu": "cpu"}
    assert all(d.get("enforce_parameter_schema") is True for d in DEPLOYMENTS.values())
    # Prefect's default pull step: the absolute directory `prefect deploy` runs in (not a stale $PWD).
    assert SPEC.get("pull") is None and not any("pull" in d for d in DEPLOYMENTS.values())


def test_scheduled_deployments_have_valid_crons_and_on_demand_ones_none():
    from prefect.client.schemas.schedules import CronSchedule

    for name, d in DEPLOYMENTS.items():
        crons = _crons(d)
        assert bool(crons) == (name in SCHEDULED), name
        assert all(sched["active"] is False for sched in d.get("schedules") or []), name  # deployed paused
        for cron, tz in crons:
            schedule = CronSchedule(cron=cron, timezone=tz)  # raises on an invalid cron string or time zone
            assert len(cron.split()) == 5 and schedule.timezone == tz


@pytest.mark.parametrize("name", sorted(DEPLOYMENTS))
def test_default_parameters_fit_the_flow(name):
    """The server validates a run's parameters against this schema; a default the flow does not take would
    fail every run."""
    from prefect.utilities.callables import parameter_schema
    from prefect.utilities.schema_tools import validate

    d = DEPLOYMENTS[name]
    flow = _flow(d["entrypoint"])
    schema = parameter_schema(flow).model_dump_for_openapi()
    unknown = set(d["parameters"]) - set(schema["properties"])
    assert not unknown, f"{name}: {unknown} not parameters of {d['entrypoint']}"
    validate(d["parameters"], schema, raise_on_error=True, ignore_required=True)


def test_on_demand_evaluation_writes_beside_the_dvc_outputs():
    from biocheck import pipeline, wiring

    out = DEPLOYMENTS["evaluate"]["parameters"]["out"]
    assert out == "runs/evaluate" and "/runs/" in (REPO / ".gitignore").read_text().splitlines()
    dvc_metrics = pipeline.evaluate_config(wiring.params_of(REPO / "params.yaml")).metrics_path
    assert not Path(dvc_metrics).is_relative_to(out)


# --- against a real Prefect server --------------------------------------------------------------------

CLAIMS = [("1", "Vitamin D supplementation reduces hip fractures.", "SUPPORTED"),
          ("2", "Aspirin reduces cardiovascular mortality.", "REFUTED"),
          ("3", "Coffee causes atrial fibrillation.", "NEI")]
EVALUATE = {"systems": ["no_retrieval", "base"], "datasets": ["scifact"], "model": "base", "limit": 2}


def _project(root: Path, evidence_cfg, tiny_model: Path) -> Path:
    """The repo's flows, prefect.yaml and params.yaml, with a scifact test split, the tiny model as
    models/base and the test index; the smallest evaluation that still maps shards (one Dask worker, two)."""
    shutil.copytree(REPO / "flows", root / "flows", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(PREFECT_YAML, root / "prefect.yaml")
    shutil.copytree(tiny_model, root / "models" / "base")
    split = root / "data" / "prepared" / "scifact" / "test.jsonl"
    split.parent.mkdir(parents=True)
    split.write_text("".join(ClaimRecord(id=i, dataset="scifact", split="test", claim=c, label=g)
                             .model_dump_json() + "\n" for i, c, g in CLAIMS))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"].update(index_dir=str(evidence_cfg.index_dir), store=str(evidence_cfg.store))
    params["agent"].update(max_new_tokens=32, max_searches=1)
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None  # EQS by the (absent) training judge
    params["evaluate"].update(bootstrap=20, workers=1)
    params["orchestrate"].update(dask_workers=1, shards=2, dask_address=None)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def _api(server: PrefectServer, method: str, path: str, **kwargs):
    r = httpx.request(method, f"{server.api_url}{path}", timeout=30, **kwargs)
    r.raise_for_status()
    return r.json()


def _flow_run_id(output: str) -> str:
    m = re.search(r"UUID: ([0-9a-f-]{36})", output)
    assert m, output
    return m.group(1)


def _runs_of(server: PrefectServer, deployment_id: str, state: str | None = None) -> list[dict]:
    query = {"deployments": {"id": {"any_": [deployment_id]}}, "sort": "EXPECTED_START_TIME_ASC"}
    if state:
        query["flow_runs"] = {"state": {"type": {"any_": [state]}}}
    return _api(server, "POST", "/flow_runs/filter", json=query)


def _scheduler_follows_the_crons(server: PrefectServer, deployed: dict, timeout: float = 300) -> None:
    """The server's scheduler fills each scheduled deployment with runs at its cron's next times (from
    prefect.yaml), and the on-demand ones with none."""
    from prefect.server.schemas.schedules import CronSchedule

    deadline = time.monotonic() + timeout
    while not all(_runs_of(server, deployed[name]["id"], "SCHEDULED") for name in SCHEDULED):
        if time.monotonic() > deadline:  # a wait limit against a hung server, not a timing check
            pytest.fail(f"the scheduler made no runs for the scheduled deployments within {timeout:g} s")
        time.sleep(2)
    for name, d in deployed.items():
        times = [datetime.fromisoformat(r["expected_start_time"])
                 for r in _runs_of(server, d["id"], "SCHEDULED")]
        if name not in SCHEDULED:
            assert times == [], name
            continue
        ((cron, tz),) = _crons(DEPLOYMENTS[name])
        schedule = CronSchedule(cron=cron, timezone=tz)
        # consecutive occurrences of the cron, from one of the first two after the deployment was created
        assert times == asyncio.run(schedule.get_dates(n=len(times), start=times[0])), name
        assert times[0] in asyncio.run(schedule.get_dates(n=2, start=datetime.fromisoformat(d["created"]))), name


def _wait_terminal(server: PrefectServer, run_ids: list[str], worker, timeout: float) -> dict[str, dict]:
    deadline = time.monotonic() + timeout
    while True:
        runs = {i: _api(server, "GET", f"/flow_runs/{i}") for i in run_ids}
        if all(r["state"]["type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED") for r in runs.values()):
            return runs
        assert worker.poll() is None, f"the worker exited early:\n{server.log('worker')[-4000:]}"
        if time.monotonic() > deadline:  # a wait limit against a hung run, not a timing check
            pytest.fail(f"runs not finished within {timeout:g} s: {({i: r['state'] for i, r in runs.items()})}")
        time.sleep(2)


@pytest.mark.slow  # a server, four deployments, a worker and two flow runs: 85-150 s on 2 busy cores
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds leftover processes through /proc (Linux)")
def test_deployments_on_a_real_prefect_server(tmp_path, evidence, tiny_model):
    project = _project(tmp_path / "project", evidence[0], tiny_model)
    elsewhere = tmp_path / "elsewhere"  # the worker's (and a stale $PWD's) directory: not the project
    elsewhere.mkdir()
    with prefect_server(tmp_path / "prefect-home") as server:  # stops everything on the way out, also on failure
        _on_the_server(server, project, elsewhere)
    assert server.survivors() == [] and all(p.poll() is not None for p in server.procs)
    assert not (project / "metrics").exists()  # the DVC outputs untouched


def _on_the_server(server: PrefectServer, project: Path, elsewhere: Path) -> None:
    for pool in ("cpu", "gpu"):
        r = server.cli("work-pool", "create", pool, "--type", "process")
        assert r.returncode == 0, r.stdout
    r = server.cli("--no-prompt", "deploy", "--all", cwd=project, env={"PWD": str(elsewhere)})
    assert r.returncode == 0, r.stdout

    deployed = {d["name"]: d for d in _api(server, "POST", "/deployments/filter", json={})}
    assert set(deployed) == set(DEPLOYMENTS)
    for name, spec in DEPLOYMENTS.items():
        d = deployed[name]
        assert d["work_pool_name"] == spec["work_pool"]["name"] and d["enforce_parameter_schema"] is True
        assert [(s["schedule"]["cron"], s["schedule"]["timezone"]) for s in d["schedules"]] == _crons(spec), name
        assert not any(s["active"] for s in d["schedules"]), name  # paused until the user resumes them
        assert d["parameters"] == spec["parameters"]
        assert d["pull_steps"] == [{"prefect.deployments.steps.set_working_directory": {
            "directory": str(project.resolve())}}], name
    assert not deployed["evaluate"]["schedules"] and deployed["train-gpu"]["work_pool_name"] == "gpu"
    # The documented way to start them (prefect.yaml, docs/orchestration.md); then the scheduler fills them.
    r = server.cli("--no-prompt", "deployment", "schedule", "resume", "--all")
    assert r.returncode == 0, r.stdout
    resumed = {d["name"]: d for d in _api(server, "POST", "/deployments/filter", json={})}
    assert all(s["active"] for name in SCHEDULED for s in resumed[name]["schedules"])
    _scheduler_follows_the_crons(server, deployed)

    # An unknown parameter: the CLI refuses it by name, before any run exists.
    r = server.cli("deployment", "run", "biocheck-evaluate/evaluate", "--param", "nonsense=1")
    assert r.returncode != 0 and "'nonsense'" in r.stdout and "'limit'" in r.stdout, r.stdout
    assert _runs_of(server, deployed["evaluate"]["id"]) == []
    # The Python API: the server checks types but not names, so the run exists and fails when it starts.
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: server.api_url}):
        bad = run_deployment("biocheck-evaluate/evaluate", parameters={"nonsense": 1}, timeout=0)
        # What the pipeline sends with orchestrate.train_deployment (flows/pipeline.py train_step): accepted,
        # and waiting on the gpu pool (no gpu worker here, so it stays scheduled).
        train = run_deployment("biocheck-train/train-gpu", parameters={"params": "params.yaml", "root": str(project)},
                               timeout=0)
    train_run = _api(server, "GET", f"/flow_runs/{train.id}")
    assert train_run["state"]["type"] == "SCHEDULED" and train_run["work_pool_name"] == "gpu", train_run
    assert train_run["parameters"] == {"params": "params.yaml", "root": str(project)}

    r = server.cli("deployment", "run", "biocheck-evaluate/evaluate", "--params", json.dumps(EVALUATE))
    assert r.returncode == 0, r.stdout
    good = _flow_run_id(r.stdout)

    worker = server.spawn("worker", "start", "--pool", "cpu", cwd=elsewhere, name="worker")
    runs = _wait_terminal(server, [good, str(bad.id)], worker, RUN_TIMEOUT_S)
    logs = server.log("worker")[-6000:]
    assert runs[good]["state"]["type"] == "COMPLETED", (runs[good]["state"], logs)
    # Prefect 3.9.1 binds the parameters only in the flow-run process: the run crashes ("Process exited with
    # status code: 1") and its log, not its state message, names the parameter.
    assert runs[str(bad.id)]["state"]["type"] == "CRASHED", (runs[str(bad.id)]["state"], logs)
    bad_log = "\n".join(line["message"] for line in _api(server, "POST", "/logs/filter", json={
        "logs": {"flow_run_id": {"any_": [str(bad.id)]}}}))
    assert "SignatureMismatchError" in bad_log and "'nonsense'" in bad_log, bad_log

    # the run shows its results: the summary (headline and MLflow links) and the metric table
    shown = {a["key"]: a for a in _api(server, "POST", "/artifacts/filter", json={
        "artifacts": {"flow_run_id": {"any_": [good]}}})}
    assert set(shown) == {"evaluate-summary", "eval-metrics"}, shown
    assert "| no_retrieval | scifact | 2 |" in shown["evaluate-summary"]["data"], shown["evaluate-summary"]["data"]
    metrics = json.loads((project / "runs" / "evaluate" / "eval.json").read_text())
    assert sorted(metrics) == sorted(EVALUATE["systems"])
    assert all(list(by_dataset) == ["scifact"] and by_dataset["scifact"]["n"] == EVALUATE["limit"]
               for by_dataset in metrics.values())
    assert not (elsewhere / "runs").exists()
