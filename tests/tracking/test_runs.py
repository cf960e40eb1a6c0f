"""biocheck.tracking: experiments by purpose, the common tags, pipeline parent runs, datasets, lock hashes.

The real `dvc repro` (parent run and dvc_deps_md5 against dvc.lock) is in test_tracking_dvc.py, an unreachable
tracking store in test_tracking_unreachable.py, secrets in test_tracking_secrets.py, evaluation and the
registry in test_tracking_eval.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import uuid

import mlflow
import pytest
import yaml

from biocheck import tracking
from biocheck.io import InputError
from biocheck.pipeline import prepare_stage, validate_stage
from biocheck.tracking import flatten, repo_root, tracking_uri
from biocheck.wiring import tracking_config
from tests.helpers.paths import REPO
from tests.helpers.projects import flow_project

PIPELINE_NAME = re.compile(r"pipeline \d{4}-\d\d-\d\d \d\d:\d\d")


def _runs(client, experiment: str, query: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=query) if exp else []


def test_default_uri_is_sqlite_at_repo_root(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.chdir(REPO / "src" / "biocheck")
    assert repo_root() == REPO
    assert tracking_uri() == f"sqlite:///{REPO / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert tracking_uri() == "sqlite:////elsewhere.db"


def test_flatten_nested_stats():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}


def test_prepare_and_validate_log_dataset_stats(tmp_path, raw_dir, monkeypatch, client):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(raw_dir=str(raw_dir), out_dir=str(tmp_path / "prepared"))
    params["validate"]["expected_rows"] = {}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NCBI_API_KEY", "sekret-key-123")  # secrets in the env must never be logged
    stats = prepare_stage(path)
    validate_stage(path, prepared_dir=tmp_path / "prepared")

    runs = mlflow.search_runs(experiment_names=["biocheck-data"], order_by=["start_time DESC"], max_results=2,
                              output_format="list")
    validate_run, prepare_run = runs
    assert (prepare_run.info.run_name, validate_run.info.run_name) == ("prepare", "validate")
    for run, stage in ((prepare_run, "prepare"), (validate_run, "validate")):
        tags = run.data.tags
        assert (tags["stage"], tags["dvc_stage"], tags["profile"]) == (stage, stage, "quickstart")
        assert tags["dvc_deps_md5"] == "none"  # not run by DVC: no dvc.lock entry describes its inputs
        assert tags["git_commit"] == "unknown" and tags["git_dirty"] == "unknown"  # tmp_path is no git checkout
        assert "mlflow.parentRunId" not in tags and "pipeline_id" not in tags  # outside a pipeline: top level
    m = prepare_run.data.metrics
    assert m["full.scifact.test.REFUTED"] == stats["full"]["scifact"]["test"]["REFUTED"] == 2
    assert m["working.healthfc.test.NEI"] == stats["working"]["healthfc"]["test"]["NEI"]
    assert prepare_run.data.params["data.seed"] == str(params["data"]["seed"])
    assert validate_run.data.metrics["validation.failed"] == 0
    assert validate_run.data.metrics["full.healthfc.test.total"] == 7
    everything = str(prepare_run.data) + str(validate_run.data)
    assert "sekret-key-123" not in everything


def test_experiment_names_come_from_params_and_no_stage_reruns_for_them(tmp_path, raw_dir, monkeypatch, client):
    name = f"renamed-data-{uuid.uuid4().hex[:8]}"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update(raw_dir=str(raw_dir), out_dir=str(tmp_path / "prepared"), metrics_path=None)
    params["tracking"] = {"experiments": {"data": name}}  # the others keep their defaults
    monkeypatch.chdir(tmp_path)
    prepare_stage(params)
    [run] = _runs(client, name, "attributes.run_name = 'prepare'")
    assert run.data.tags["dvc_stage"] == "prepare"
    assert tracking_config(params).experiments == {"data": name, "train": "biocheck-train", "eval": "biocheck-eval"}
    # no DVC stage lists `tracking` among its params: renaming an experiment makes nothing out of date
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    listed = [p for s in stages.values() for p in (s.get("do", s).get("params") or [])]
    assert listed and not [p for p in listed if str(p).split(".")[0] == "tracking"]


@pytest.mark.parametrize("experiments, message", [
    ({"training": "x"}, "unknown purpose(s) training"),
    ({"eval": ""}, "experiments.eval must be a non-empty experiment name"),
    (["biocheck"], "experiments must map data, train, eval"),
])
def test_a_bad_tracking_section_is_one_clear_error(experiments, message):
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["tracking"] = {"experiments": experiments}
    with pytest.raises(InputError, match=re.escape(message)):
        tracking_config(params)


def _stage_run(stage: str, **kw) -> str:
    with tracking.run(stage, **kw) as active:
        tracking.log_metrics({"x": 1})
    return active.info.run_id


def test_a_pipeline_is_one_parent_per_experiment_with_the_stages_nested(monkeypatch, client):
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    with tracking.context(profile="quickstart"):
        data_runs = [_stage_run("prepare"), _stage_run("evidence")]
        train_run = _stage_run("train@eg_grpo", run_name="train eg_grpo seed=0", tags={"variant": "eg_grpo"})
    [data_parent] = _runs(client, "biocheck-data", f"tags.pipeline_id = '{pid}' and tags.kind = 'pipeline'")
    [train_parent] = _runs(client, "biocheck-train", f"tags.pipeline_id = '{pid}' and tags.kind = 'pipeline'")
    assert PIPELINE_NAME.fullmatch(data_parent.info.run_name)
    assert train_parent.info.run_name == data_parent.info.run_name  # one pipeline: the same name everywhere
    assert data_parent.data.tags["profile"] == "quickstart" and data_parent.info.status == "FINISHED"
    for run_id, parent in [*((r, data_parent) for r in data_runs), (train_run, train_parent)]:
        tags = client.get_run(run_id).data.tags
        assert tags["mlflow.parentRunId"] == parent.info.run_id and tags["pipeline_id"] == pid
    train_tags = client.get_run(train_run).data.tags
    assert (train_tags["dvc_stage"], train_tags["stage"], train_tags["variant"]) == ("train@eg_grpo", "train", "eg_grpo")
    assert client.get_run(train_run).info.run_name == "train eg_grpo seed=0"

    monkeypatch.setenv(tracking.PIPELINE_ENV, f"{pid}-next")  # the next pipeline: a parent of its own
    nxt = client.get_run(_stage_run("prepare")).data.tags["mlflow.parentRunId"]
    assert nxt != data_parent.info.run_id
    monkeypatch.delenv(tracking.PIPELINE_ENV)
    assert "mlflow.parentRunId" not in client.get_run(_stage_run("prepare")).data.tags


def test_a_failed_stage_marks_its_pipeline_failed_and_the_error_goes_on(monkeypatch, client):
    pid = f"test-{uuid.uuid4().hex}"
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    with pytest.raises(RuntimeError, match="stage broke"):
        with tracking.run("validate"):
            raise RuntimeError("stage broke")
    [parent] = _runs(client, "biocheck-data", f"tags.pipeline_id = '{pid}'  and tags.kind = 'pipeline'")
    [child] = _runs(client, "biocheck-data", f"tags.pipeline_id = '{pid}' and tags.stage = 'validate'")
    assert child.info.status == "FAILED" and parent.info.status == "FAILED"


def test_two_parents_of_one_pipeline_resolve_to_the_earliest(monkeypatch, client):
    """Two stages starting at once may both create the parent: every stage then nests under the earliest."""
    pid = f"test-{uuid.uuid4().hex}"
    exp = mlflow.set_experiment("biocheck-data").experiment_id
    first, second = (client.create_run(exp, run_name="pipeline x", start_time=t,
                                       tags={"pipeline_id": pid, "kind": "pipeline"}) for t in (1000, 2000))
    monkeypatch.setenv(tracking.PIPELINE_ENV, pid)
    assert client.get_run(_stage_run("evidence")).data.tags["mlflow.parentRunId"] == first.info.run_id
    assert second.info.run_id != first.info.run_id


FAKE_DVC = """import subprocess, sys
# a process whose command line reads `python .../dvc ...`, starting two "stage commands" like DVC does
for _ in range(2):
    subprocess.run([sys.executable, "-c", "from biocheck.tracking import pipeline_id; print(pipeline_id())"],
                   check=True)
"""


def test_under_dvc_the_pipeline_is_the_dvc_process_above_the_stage(tmp_path, monkeypatch):
    if not os.path.exists("/proc/self/stat"):
        pytest.skip("the dvc ancestor is read from Linux /proc")
    (tmp_path / "dvc").write_text(FAKE_DVC)
    monkeypatch.delenv(tracking.PIPELINE_ENV, raising=False)
    env = {**os.environ, "DVC_STAGE": "prepare"}

    def ids() -> list[str]:
        out = subprocess.run([sys.executable, str(tmp_path / "dvc"), "repro"], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        return out

    one, other = ids(), ids()
    assert one[0] == one[1] and one[0].startswith("dvc-")  # the stages of one `dvc repro` share it
    assert other[0] != one[0]  # the next `dvc repro` is another pipeline
    env.pop("DVC_STAGE")
    assert ids() == ["None", "None"]  # not run by DVC: no pipeline
    env[tracking.PIPELINE_ENV] = "flow-run-1"
    assert ids() == ["flow-run-1", "flow-run-1"]  # the Prefect flow's id wins


def test_lock_md5_changes_with_any_input_and_only_with_inputs():
    entry = {"cmd": "x --variant a", "deps": [{"path": "b", "hash": "md5", "md5": "2", "size": 3},
                                              {"path": "a", "hash": "md5", "md5": "1.dir", "size": 9, "nfiles": 2}],
             "params": {"params.yaml": {"data": {"seed": 13}}}, "outs": [{"path": "o", "md5": "9"}]}
    value = tracking.lock_md5(entry)
    assert re.fullmatch(r"[0-9a-f]{32}", value)
    same = {**entry, "outs": [], "deps": [{"path": "a", "md5": "1.dir"}, {"path": "b", "md5": "2"}]}
    assert tracking.lock_md5(same) == value  # dep order, sizes and outputs are no inputs
    changed = [{**entry, "deps": [entry["deps"][0], {"path": "a", "md5": "7.dir"}]},
               {**entry, "params": {"params.yaml": {"data": {"seed": 14}}}},
               {**entry, "deps": entry["deps"][:1]},
               {**entry, "cmd": "x --variant b"}]  # the command is an input: train@eg_grpo is not train@outcome_only
    assert len({value, *(tracking.lock_md5(e) for e in changed)}) == 5


PIPELINE = """stages:
  train:
    foreach: [eg_grpo, outcome_only]
    do:
      cmd: biocheck train --variant ${item}
      deps:
        - src.py
      outs:
        - models/checkpoints_${item}
      metrics:
        - metrics/train_${item}.json:
            cache: false
  evaluate:
    cmd: biocheck evaluate
    outs:
      - reports/eval
    plots:
      - metrics/curve.csv:
          cache: false
"""


def _git(root, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.org", "-c", "user.name=t", *args], cwd=root, check=True,
                   capture_output=True)


def test_git_dirty_leaves_out_what_the_pipeline_writes(tmp_path):
    """`dvc repro` in a fresh clone rewrites dvc.lock and the metrics and plots dvc.yaml names (committed, as DVC
    metrics are): the run is still of a clean checkout. Any other tracked file changed: dirty."""
    root = tmp_path / "clone"
    (root / ".dvc").mkdir(parents=True)
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / "dvc.yaml").write_text(PIPELINE)
    written = {"dvc.lock": "schema: '2.0'\nstages: {}\n", "metrics/train_outcome_only.json": "{}",
               "metrics/curve.csv": "step,reward\n", "reports/eval/index.html": "<p>"}
    for name, text in {**written, "src.py": "x = 1\n", "params.yaml": "seed: 1\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "a clone")
    assert tracking.git_state(root)["git_dirty"] == "false"
    for name, text in written.items():  # what `dvc repro` rewrites (foreach outputs resolved)
        (root / name).write_text(text + "\n# rewritten")
    state = tracking.git_state(root)
    assert state["git_dirty"] == "false" and re.fullmatch(r"[0-9a-f]{40}", state["git_commit"])
    (root / "params.yaml").write_text("seed: 2\n")  # an input: the run is not of the commit
    assert tracking.git_state(root)["git_dirty"] == "true"
    _git(root, "checkout", "params.yaml")
    _git(root, "mv", "src.py", "moved.py")  # a rename counts too
    assert tracking.git_state(root)["git_dirty"] == "true"


def test_a_shown_uri_hides_passwords_query_values_and_secrets(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-1234567890")
    shown = tracking.shown_uri("https://ann:pw-9876543@mlflow.example.org/path?token=tok-1234567890&x=1")
    assert shown == "https://ann:***@mlflow.example.org/path?token=***&x=***"
    assert tracking.shown_uri("http://127.0.0.1:9/tok-1234567890") == "http://127.0.0.1:9/***"


def test_a_dataset_is_logged_with_the_files_md5_and_its_path(tmp_path, monkeypatch, client):
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")  # the repo root: sources are relative to it
    split = tmp_path / "data" / "prepared" / "scifact" / "train.jsonl"
    split.parent.mkdir(parents=True)
    split.write_text('{"id": "1"}\n{"id": "2"}\n')
    monkeypatch.chdir(tmp_path)
    with tracking.run("train@eg_grpo") as active:
        tracking.log_dataset(split, context="training")
        tracking.log_dataset(tmp_path / "missing.jsonl", context="training")  # nothing to log: no error either
    [inp] = client.get_run(active.info.run_id).inputs.dataset_inputs
    assert inp.dataset.name == "scifact/train" and inp.dataset.source_type == "local"
    assert inp.dataset.digest == hashlib.md5(split.read_bytes()).hexdigest()  # what DVC records for the file
    assert yaml.safe_load(inp.dataset.source) == {"uri": "data/prepared/scifact/train.jsonl"}
    assert {(t.key, t.value) for t in inp.tags} == {("mlflow.data.context", "training")}


def test_an_unknown_stage_is_a_bug_not_a_tracking_warning():
    with pytest.raises(ValueError, match="unknown stage 'prepar'"):
        with tracking.run("prepar"):
            pass


def test_the_prefect_pipeline_gives_every_stage_one_pipeline_id(steps, tmp_path, monkeypatch):  # noqa: F811
    """Every DVC stage the pipeline flow starts sees the same BIOCHECK_PIPELINE_ID; the next run another."""
    import flows.pipeline as pipe

    seen = []
    for name in ("data_flow", "evidence_flow", "train_flow", "run_stages"):
        monkeypatch.setattr(pipe, name, lambda *a, **k: seen.append(os.environ.get(tracking.PIPELINE_ENV)))
    monkeypatch.delenv(tracking.PIPELINE_ENV, raising=False)
    pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "a", dvc_remote=None)))
    pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "b", dvc_remote=None)))
    first, second = seen[:4], seen[4:]
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] and first[0] != second[0]
    assert tracking.PIPELINE_ENV not in os.environ  # restored after the run


def test_model_init_is_a_data_run_tagged_with_the_models_fingerprint(tmp_path, tiny_model, monkeypatch, client):
    from biocheck.pipeline import model_stage

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["model"].update(base=str(tiny_model), out_dir=str(tmp_path / "base"), metrics_path=None)
    monkeypatch.chdir(tmp_path)
    stats = model_stage(params)
    run = client.search_runs([client.get_experiment_by_name("biocheck-data").experiment_id],
                             filter_string="attributes.run_name = 'model init'", order_by=["start_time DESC"])[0]
    assert run.data.tags["model_fingerprint"] == stats["fingerprint"] and run.data.tags["dvc_stage"] == "model"
    assert run.data.params["model.base"] == str(tiny_model)


def test_no_artifact_progress_bar_when_stderr_is_not_a_terminal(tmp_path, monkeypatch, client, capfd):
    from typer.testing import CliRunner

    from biocheck.cli import app

    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(30):
        (folder / f"{i}.txt").write_text(f"file {i}\n" * 50)
    with tracking.run("prepare") as active:
        tracking.log_artifacts(folder, "many")

    def download(dest: str) -> str:
        capfd.readouterr()
        mlflow.artifacts.download_artifacts(run_id=active.info.run_id, artifact_path="many",
                                            dst_path=str(tmp_path / dest))
        return capfd.readouterr().err

    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "true")
    assert "Downloading artifacts" in download("a")  # the bar MLflow draws, terminal or not
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    assert CliRunner().invoke(app, ["version"]).exit_code == 0  # any biocheck command, stderr not a terminal
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    err = download("b")
    assert "Downloading artifacts" not in err and "%|" not in err, err
    assert len(list((tmp_path / "b" / "many").iterdir())) == 30  # the files did come down
