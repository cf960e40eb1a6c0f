"""`biocheck study` (biocheck.study.units, study/dvc.yaml, flows/study.py): its params, its units, its outputs.

The statistics are tests/study/test_analysis.py's; here: a unit trains from the shared start with its own seed, the
stages DVC expands are the ones the runner takes, the analysis writes every output from the units' predictions
(values checked by hand) and nests its MLflow run under `study <name>`, the Prefect flow sends each unit where
orchestrate says, and the whole study runs through DVC on the tiny model, killed and resumed (slow).
"""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck import tracking
from biocheck.cli import app
from biocheck.evaluate.systems.base import Prediction
from biocheck.io import InputError
from biocheck.orchestration import dvc
from biocheck.params import load_params
from biocheck.rewards.funnel import Funnel
from biocheck.study import units as study
from tests.helpers.builders import model_files
from tests.helpers.paths import REPO

PROFILES = ("quickstart", "smol", "paper")


def _profile(name: str) -> dict:
    return dict(load_params(REPO / "profiles" / f"{name}.yaml"))  # base.yaml with the profile's values


def _study_yaml() -> dict:
    return yaml.safe_load((REPO / study.STUDY_DVC).read_text())


# --- params and units -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", PROFILES)
def test_every_profile_has_a_study_that_builds(name):
    cfg = study.study_config(_profile(name))
    assert cfg.reference in cfg.variants and cfg.seeds and cfg.datasets
    assert len(study.stages(cfg)) == 2 * len(cfg.seeds) * len(cfg.variants) + 2


def test_study_dvc_yaml_writes_where_the_study_reads():
    """study/dvc.yaml cannot read the paths from params (DVC parses it on every `dvc repro`): they are written out
    there, and must be StudyConfig's."""
    stages = _study_yaml()["stages"]
    cfg = study.StudyConfig
    outs = lambda s: [next(iter(o)) if isinstance(o, dict) else o for o in stages[s]["outs"]]  # noqa: E731
    assert outs("train") == [f"{cfg.out_dir.as_posix()}/${{item.variant}}-s${{item.seed}}"]
    assert outs("evaluate") == [f"{cfg.eval_dir.as_posix()}/${{item.variant}}-s${{item.seed}}"]
    assert outs("evaluate_start") == [f"{cfg.eval_dir.as_posix()}/{study.START}"]
    assert set(outs("analyze")) == {cfg.report_path.as_posix(), cfg.page_dir.as_posix(), cfg.plots_dir.as_posix(),
                                    cfg.metrics_path.as_posix()}
    # a plain out: a declared metrics file that a quickstart never writes makes `dvc metrics show` warn
    assert "metrics" not in stages["analyze"]
    for name in ("train", "evaluate"):
        assert stages[name]["matrix"] == {"variant": "${study.variants}", "seed": "${study.seeds}"}
    assert _study_yaml()["vars"] == ["../params.yaml:study,orchestrate"]


def test_the_runner_takes_exactly_the_stages_dvc_expands(tmp_path):
    """`dvc stage list` of study/dvc.yaml (the matrix expanded by DVC itself) is the runner's list, in any order."""
    for rel in (".dvc/config", "dvc.yaml", study.STUDY_DVC):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((REPO / rel).read_text())
    params = _profile("smol")
    params["study"]["seeds"] = [0, 1, 2]  # three seeds: a matrix other than the default's
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    out = subprocess.run([str(Path(sys.executable).parent / "dvc"), "stage", "list", "--all", "--name-only"],
                         cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()
    listed = [s for s in out if s.startswith(study.STUDY_DVC)]
    assert sorted(listed) == sorted(study.stages(study.study_config(params)))
    assert len(listed) == 2 * 3 * 2 + 2


@pytest.mark.parametrize(("change", "message"), [
    ({"seeds": [0, -1]}, "seeds: -1 not allowed"),
    ({"seeds": [0, 0]}, "seeds lists a value twice"),
    ({"variants": ["eg_grpo", "ppo"]}, "variants: ppo not allowed"),
    ({"datasets": ["scifact_val"]}, "datasets: scifact_val not allowed"),  # the claims that chose the checkpoints
    ({"metrics": ["macro_f1"]}, "metrics: macro_f1 not allowed"),  # not a ratio of sums over claims
    ({"reference": "outcome_only", "variants": ["eg_grpo"]}, "reference 'outcome_only' is not among variants"),
    ({"steps": 0}, "steps"),
    ({"steps": 4, "eval_steps": 3}, "eval_steps 3 must divide steps 4"),  # the last step would have no checkpoint
    ({"name": "it's"}, "letters, digits"),  # it goes into MLflow filter strings
    ({"nope": 1}, "unknown key(s) study.nope"),
])
def test_a_bad_study_section_is_one_clear_error(change, message):
    params = _profile("quickstart")
    params["study"].update(change)
    with pytest.raises(InputError, match="study") as e:
        study.study_config(params)
    assert message in str(e.value)


def test_a_unit_trains_its_variant_with_its_seed_from_the_shared_start():
    from biocheck.pipeline import train_setup

    params = _profile("quickstart")
    cfg = study.study_config(params)
    c = train_setup(study.unit_params(params, "outcome_only"), **study.unit_overrides(cfg, "outcome_only", 1))
    assert c.model.out_dir == Path("models/sft")  # the SFT warm start every unit shares
    assert c.train.sft["enabled"] is False  # no warm start of its own: another seed would train another one
    assert c.reward.variant == "outcome_only" and c.train.seed == 1
    assert c.train.out_dir == Path("study/checkpoints/outcome_only-s1") and c.train.metrics_path is None
    assert (c.train.max_steps, c.train.save_steps, c.train.eval_steps) == (cfg.steps, cfg.eval_steps, cfg.eval_steps)
    assert c.train.eval_on_start is False
    assert params == _profile("quickstart")  # the caller's params untouched
    paper = _profile("paper")  # no SFT in this profile: the base model is the start
    assert study.start_dir(paper) == Path(paper["model"]["out_dir"])


def test_the_stage_inputs_of_two_seeds_differ_only_in_the_seed_and_folder():
    params = _profile("smol")
    params["study"]["seeds"] = [0, 2]
    a = study.stage_inputs(params, "train@eg_grpo-0")
    b = study.stage_inputs(params, "train@eg_grpo-2")
    assert a["train"].pop("seed") == 0 and b["train"].pop("seed") == 2
    assert a["train"].pop("out_dir") != b["train"].pop("out_dir")
    assert a == b
    with pytest.raises(InputError, match="not a stage of study/dvc.yaml"):
        study.stage_inputs(params, "nope")


def test_the_start_unit_evaluates_the_start_on_every_claim_when_limit_is_null(tmp_path, monkeypatch):
    """study.limit null must reach the evaluation as null (every claim), not fall back to evaluate.limit: an
    override of None is no override, so the unit puts its settings into the params."""
    from biocheck import pipeline

    monkeypatch.chdir(tmp_path)
    model_files(Path("models/sft"))
    seen = []
    monkeypatch.setattr(pipeline, "evaluate_stage", lambda p, progress, out, model: seen.append((p, out, model))
                        or {"metrics": {"eg_grpo": {"scifact": {"n": 300}}}})
    params = _profile("quickstart")
    params["study"].update(limit=None, full_split=True)
    assert params["evaluate"]["limit"] == 4  # the pipeline's own evaluation keeps its limit
    out = study.evaluate_unit(params, progress=False)
    [(p, where, model)] = seen
    assert {k: p["evaluate"][k] for k in ("systems", "datasets", "limit", "full_split")} == {
        "systems": ["eg_grpo"], "datasets": ["scifact"], "limit": None, "full_split": True}
    assert where == Path("study/eval/start") and model == "transformers:models/sft"
    assert json.loads(Path("study/eval/start/selection.json").read_text())["unit"] == "start"
    assert out["metrics"] == {"scifact": {"n": 300}} and params["evaluate"]["limit"] == 4  # the caller's untouched


# --- the analysis ---------------------------------------------------------------------------------------

GOLD = ["SUPPORTED", "REFUTED", "SUPPORTED", "REFUTED"]
RIGHT = {  # unit -> right answers on the 4 claims
    "start": [0, 0, 1, 0],
    "eg_grpo-s0": [1, 1, 1, 0], "eg_grpo-s1": [1, 1, 1, 1],
    "outcome_only-s0": [1, 0, 0, 0], "outcome_only-s1": [0, 0, 0, 0],
}
CITES = {"eg_grpo": (2, 0), "outcome_only": (2, 1), "start": (1, 1)}  # (cited, hallucinated) per report


def _predictions(unit: str) -> list[Prediction]:
    other = {"SUPPORTED": "REFUTED", "REFUTED": "SUPPORTED"}
    cited, bad = CITES[unit.split("-s")[0]]
    # the funnel: every claim's gold paper retrieved; cited where the answer is right
    return [Prediction(id=str(i), dataset="scifact", system="eg_grpo", fingerprint=unit, gold=g,
                       pred=g if RIGHT[unit][i] else other[g], writes_report=True, parseable=True, cited=cited,
                       hallucinated=bad, ehr=bad / cited, funnel=Funnel(gold=1, retrieved=True, cited=bool(RIGHT[unit][i])))
            for i, g in enumerate(GOLD)]


@pytest.fixture
def analyzed(tmp_path, monkeypatch):
    """A project with every unit's predictions and selection, analyzed with MLflow on (SQLite in tmp)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("BIOCHECK_TRACKING", raising=False)
    for var in (tracking.PIPELINE_ENV, tracking.PARENT_NAME_ENV, tracking.RUN_TAGS_ENV):
        monkeypatch.delenv(var, raising=False)
    params = _profile("quickstart")
    params["study"].update(name="hand", seeds=[0, 1], metrics=["accuracy", "ehr"])
    for unit in RIGHT:
        folder = study.StudyConfig.eval_dir / unit / "predictions" / "eg_grpo"
        folder.mkdir(parents=True)
        (folder / "scifact.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in _predictions(unit)))
        variant, _, seed = unit.partition("-s")
        (folder.parent.parent / "selection.json").write_text(json.dumps(
            {"unit": unit, "variant": None if unit == "start" else variant, "seed": int(seed) if seed else None,
             "step": 0 if unit == "start" else 2, "eval_reward": 0.5}))
    return params, study.analyze_units(params)


def test_the_analysis_gives_the_hand_computed_differences(analyzed):
    params, out = analyzed
    acc = out["datasets"]["scifact"]["metrics"]["accuracy"]
    # eg_grpo: seeds 3/4 and 4/4 -> 0.875; outcome_only: 1/4 and 0 -> 0.125; start 1/4
    assert acc["values"] == {"start": 0.25, "eg_grpo": 0.875, "outcome_only": 0.125}
    assert acc["majority"] == {"label": "REFUTED", "rate": 0.5, "claims": 4}  # a tie: the label sorted first
    d = acc["differences"]
    # paired by seed: 0.75 - 0.25 and 1 - 0 -> 0.5, 1.0; against the start: 0.5, 0.75
    assert d["outcome_only"]["per_seed"] == [0.5, 1.0] and d["outcome_only"]["diff"] == pytest.approx(0.75)
    assert d["start"]["per_seed"] == [0.5, 0.75] and d["start"]["diff"] == pytest.approx(0.625)
    assert (d["outcome_only"]["seeds"], d["outcome_only"]["claims"]) == (2, 4)
    # t(0.975, 1) = 12.706: 0.75 -+ 12.706 x 0.25 (sd 0.3536 / sqrt 2)
    assert (d["outcome_only"]["lo"], d["outcome_only"]["hi"]) == (pytest.approx(0.75 - 12.7062 * 0.25, rel=1e-4),
                                                                  pytest.approx(0.75 + 12.7062 * 0.25, rel=1e-4))
    assert [(m["b"], m["c"]) for m in d["outcome_only"]["mcnemar"]] == [(2, 0), (4, 0)]
    ehr = out["datasets"]["scifact"]["metrics"]["ehr"]
    assert ehr["values"] == {"start": 1.0, "eg_grpo": 0.0, "outcome_only": 0.5}
    assert ehr["differences"]["start"]["diff"] == pytest.approx(-1.0)
    assert "eg_grpo minus outcome_only" in d["outcome_only"]["sentence"] and "2 seeds x 4 claims" in d["outcome_only"]["sentence"]


def test_the_analysis_writes_metrics_report_plot_and_page(analyzed):
    params, out = analyzed
    cfg = study.study_config(params)
    metrics = json.loads(cfg.metrics_path.read_text())
    assert metrics["seeds"] == 2 and metrics["study"] == "hand"
    assert metrics["scifact"]["accuracy"]["differences"]["outcome_only"]["diff"] == pytest.approx(0.75)
    assert "sentence" not in json.dumps(metrics)  # numbers only: `dvc metrics show` / `diff`
    report = json.loads(cfg.report_path.read_text())
    assert report["size"] == {"seeds": 2, "variants": ["eg_grpo", "outcome_only"], "steps": cfg.steps,
                              "claims": {"scifact": 4}}
    assert set(report["units"]) == set(RIGHT) and report["units"]["eg_grpo-s1"]["step"] == 2
    funnels = report["datasets"]["scifact"]["funnel"]  # per unit: 4 claims retrieved, cited where right
    assert {u: (f["n"], f["steps"]["retrieved"]["count"], f["steps"]["cited"]["count"]) for u, f in funnels.items()} == {
        u: (4, 4, sum(r)) for u, r in RIGHT.items()}
    with (cfg.plots_dir / "forest.csv").open() as f:
        rows = list(csv.DictReader(f))
    # EHR is the same in both seeds of each variant: no spread, no interval, so it is not plotted (not as 0)
    assert [r["comparison"] for r in rows] == [f"scifact accuracy: eg_grpo - {o}" for o in ("outcome_only", "start")]
    assert float(rows[0]["diff"]) == pytest.approx(0.75) and float(rows[0]["lo"]) <= 0.75 <= float(rows[0]["hi"])
    page = (cfg.page_dir / "index.html").read_text()
    for r in out["datasets"]["scifact"]["metrics"]["accuracy"]["differences"].values():
        assert r["sentence"].replace("'", "&#39;") in page
    assert page.count('class="diff"') == 4 and "eg_grpo-s1" in page  # a dot per difference, a line where it has an interval
    assert 'id="funnel"' in page and "gold paper retrieved" in page
    assert "evaluation gallery" not in page  # none here to link to
    Path("reports/eval").mkdir(parents=True)
    Path("reports/eval/index.html").write_text("<html></html>")
    study.analyze_units(params)
    assert '<a href="../eval/index.html">evaluation gallery</a>' in (cfg.page_dir / "index.html").read_text()


def test_the_analysis_is_one_mlflow_run_under_the_study_parent(analyzed, tmp_path):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    [parent] = [r for r in runs if r.info.run_name == "study hand"]
    [analysis] = [r for r in runs if r.info.run_name == "analysis hand"]
    assert analysis.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert analysis.data.tags["study"] == parent.data.tags["study"] == "hand"
    assert analysis.data.metrics["scifact.accuracy.eg_grpo_minus_outcome_only.diff"] == pytest.approx(0.75)


def test_units_nest_under_one_study_parent_tagged_with_variant_and_seed(tmp_path, monkeypatch):
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("BIOCHECK_TRACKING", raising=False)
    cfg = study.study_config(_profile("quickstart"))
    for variant, seed in study.units(cfg):
        with study._tagged(cfg, study.unit_name(variant, seed), variant, seed), tracking.run(f"train@{variant}"):
            pass
    assert tracking.PIPELINE_ENV not in os.environ and tracking.RUN_TAGS_ENV not in os.environ  # restored
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("biocheck-train").experiment_id])
    [parent] = [r for r in runs if r.data.tags.get("kind") == "pipeline"]
    assert parent.info.run_name == f"study {cfg.name}"
    units = sorted((r.data.tags["variant"], r.data.tags["seed"], r.data.tags["mlflow.parentRunId"])
                   for r in runs if r is not parent and r.info.run_id != parent.info.run_id)
    assert units == sorted((v, str(s), parent.info.run_id) for v, s in study.units(cfg))


def test_units_that_answered_other_claims_are_not_paired_by_position(analyzed):
    params, _ = analyzed
    path = study.StudyConfig.eval_dir / "start" / "predictions" / "eg_grpo" / "scifact.jsonl"
    preds = [Prediction.model_validate_json(line) for line in path.read_text().splitlines()]
    preds[0] = preds[0].model_copy(update={"id": "99"})  # as many claims, one of them another
    path.write_text("".join(p.model_dump_json() + "\n" for p in preds))
    with pytest.raises(InputError, match="start scored other claims than eg_grpo"):
        study.analyze_units(params)


def test_a_missing_unit_names_the_stage_that_makes_it(analyzed):
    params, _ = analyzed
    (study.StudyConfig.eval_dir / "outcome_only-s1" / "predictions" / "eg_grpo" / "scifact.jsonl").unlink()
    with pytest.raises(InputError, match=r"dvc repro study/dvc.yaml:evaluate@outcome_only-1"):
        study.analyze_units(params)


# --- the command line -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "code", "message"), [
    (["study", "evaluate", "--variant", "eg_grpo"], 2, "--variant and --seed go together"),
    (["study", "train", "--variant", "eg_grpo", "--seed", "7"], 1, "not a unit of this study"),
    (["study", "evaluate", "--variant", "outcome_only", "--seed", "0"], 1, "no finished checkpoints"),
])
def test_study_commands_fail_in_one_line(args, code, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    r = CliRunner().invoke(app, args)
    assert r.exit_code == code, r.output
    assert message in r.output and "Traceback" not in r.output
    assert len([line for line in r.output.splitlines() if line.strip()]) <= 2  # Click may wrap the one line


def test_study_status_lists_every_stage_with_its_state(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = [(f"{study.STUDY_DVC}:train@eg_grpo-0", "done"), (f"{study.STUDY_DVC}:analyze", "stale")]
    monkeypatch.setattr(study, "unit_states", lambda root: rows)
    r = CliRunner().invoke(app, ["study", "status"])
    assert r.exit_code == 0, r.output
    assert "done    study/dvc.yaml:train@eg_grpo-0" in r.output and "stale   study/dvc.yaml:analyze" in r.output
    assert "1 of 2 stages done" in r.output
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)  # no DVC project here: one line
    r = CliRunner().invoke(app, ["study", "status"])
    assert r.exit_code == 1 and "not a DVC project" in r.output and "Traceback" not in r.output


# --- the Prefect flow -----------------------------------------------------------------------------------

class _Future:
    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


@pytest.fixture
def flow_project(tmp_path, monkeypatch):
    """A project for the study flow's body, its audit stage and gate stubbed (tests/study/test_gate.py has them)."""
    import flows.study as mod

    monkeypatch.setattr(mod, "run_stage", lambda stage, root: {"stage": stage, "ran": False})
    monkeypatch.setattr(mod, "check_gate", lambda params, root, ignore=False: {"passed": True})
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "dvc.yaml").write_text((REPO / "dvc.yaml").read_text())
    (tmp_path / "params.yaml").write_text((REPO / "params.yaml").read_text())
    return tmp_path.resolve()


def _with_deployments(root: Path, **orchestrate) -> None:
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["orchestrate"].update(orchestrate)
    (root / "params.yaml").write_text(yaml.safe_dump(params))


def test_the_flow_runs_every_unit_here_in_order_without_deployments(flow_project, monkeypatch):
    import flows.study as mod

    calls = []
    monkeypatch.setattr(mod, "unit_task", lambda stage, root, deployment: calls.append((stage, deployment)) or {})
    out = mod.study_flow.fn(root=str(flow_project))
    expected = study.stages(study.study_config(yaml.safe_load((flow_project / "params.yaml").read_text())))
    assert calls == [(s, None) for s in expected] and list(out) == expected


def test_the_flow_sends_each_unit_to_its_pool_and_evaluates_after_its_training(flow_project, monkeypatch):
    import flows.study as mod

    _with_deployments(flow_project, study_train_deployment="biocheck-study-unit/study-unit-gpu",
                      study_eval_deployment="biocheck-study-unit/study-unit-cpu")
    submitted, here = [], []

    class Task:
        def submit(self, stage, root, deployment, wait_for=()):
            submitted.append((stage, deployment, [f.value["stage"] for f in wait_for]))
            return _Future({"stage": stage})

        def __call__(self, stage, root, deployment):
            here.append((stage, deployment))
            return {"stage": stage}

    monkeypatch.setattr(mod, "unit_task", Task())
    mod.study_flow.fn(root=str(flow_project))
    gpu, cpu = "biocheck-study-unit/study-unit-gpu", "biocheck-study-unit/study-unit-cpu"
    trains = [(s, d, w) for s, d, w in submitted if ":train@" in s]
    evals = [(s, d, w) for s, d, w in submitted if ":evaluate" in s]
    assert len(trains) == 4 and all(d == gpu and w == [] for _, d, w in trains)
    assert len(evals) == 5 and all(d == cpu for _, d, _ in evals)
    for s, _, w in evals:  # each evaluation waits for its own training unit only (the start for none)
        assert w == ([] if s.endswith("evaluate_start") else [s.replace(":evaluate@", ":train@")])
    assert here == [(f"{study.STUDY_DVC}:analyze", None)]  # the analysis here, after every unit


def test_a_unit_sent_to_a_deployment_is_committed_here(flow_project, monkeypatch):
    import flows.study as mod

    state = type("S", (), {"is_completed": lambda self: True, "name": "Completed", "message": ""})()
    sent, committed, stale = [], [], {"x": True}
    monkeypatch.setattr(mod, "run_deployment", lambda name, parameters, timeout: sent.append((name, parameters))
                        or type("R", (), {"state": state, "id": "run-1"})())
    monkeypatch.setattr(mod.dvc, "status", lambda root, targets: {targets[0]: ["changed"]} if stale["x"] else {})
    monkeypatch.setattr(mod.dvc, "commit", lambda root, stage, logger=None: committed.append(stage) or stale.update(x=False))
    monkeypatch.setattr(mod.entry, "run_logger", lambda: None)
    stage = f"{study.STUDY_DVC}:train@eg_grpo-0"
    out = mod.unit_task.fn(stage, str(flow_project), "biocheck-study-unit/study-unit-gpu")
    assert sent == [("biocheck-study-unit/study-unit-gpu", {"stage": stage, "root": str(flow_project)})]
    assert committed == [stage] and out["deployment"] == "biocheck-study-unit/study-unit-gpu"
    # a worker that wrote elsewhere: committed, still not up to date here -> a clear error
    stale["x"] = True
    monkeypatch.setattr(mod.dvc, "commit", lambda root, stage, logger=None: committed.append(stage))
    with pytest.raises(InputError, match="shared file system"):
        mod.unit_task.fn(stage, str(flow_project), "biocheck-study-unit/study-unit-gpu")


def test_prefect_yaml_deploys_the_study_and_its_unit_pools():
    deployments = {d["name"]: d for d in yaml.safe_load((REPO / "prefect.yaml").read_text())["deployments"]}
    assert deployments["study"]["entrypoint"] == "flows/study.py:study_flow"
    assert deployments["study-unit-gpu"]["work_pool"]["name"] == "gpu"
    assert deployments["study-unit-cpu"]["work_pool"]["name"] == "cpu"
    assert {deployments[n]["entrypoint"] for n in ("study-unit-gpu", "study-unit-cpu")} == {
        "flows/study.py:study_unit_flow"}


# --- evaluation on the whole split ----------------------------------------------------------------------

def test_full_split_evaluates_the_whole_test_split_with_the_profiles_labels(tmp_path, monkeypatch):
    from biocheck.pipeline import evaluate_setup

    monkeypatch.chdir(tmp_path)
    full = tmp_path / "data" / "prepared" / "full"
    full.mkdir(parents=True)
    rows = [("1", "train", "SUPPORTED"), ("2", "test", "SUPPORTED"), ("3", "test", "NEI"), ("4", "test", "REFUTED"),
            ("5", "test", "SUPPORTED")]
    full.joinpath("scifact.jsonl").write_text("".join(json.dumps(
        {"id": i, "dataset": "scifact", "split": s, "claim": f"claim {i} is long enough.", "label": lab}) + "\n"
        for i, s, lab in rows))
    model = model_files(tmp_path / "m")
    params = copy.deepcopy(_profile("quickstart"))
    params["data"]["keep_labels"]["test"] = ["SUPPORTED", "REFUTED"]
    setup = evaluate_setup(params, out=tmp_path / "out", model=f"transformers:{model}", systems=["eg_grpo"],
                           datasets=["scifact"], limit=2, full_split=True)
    assert [c.id for c in setup.claims["scifact"]] == ["2", "4"]  # test only, NEI left out, the first 2


# --- the whole study through DVC, killed and resumed ------------------------------------------------------

def _git_project(tmp_path: Path, raw_dir: Path, tiny_model: Path) -> tuple[Path, dict]:
    """A copy of the repo as a DVC project whose upstream outputs (prepared data, index, models) are made here
    with the tiny model everywhere, and params for a study of 2 seeds x 2 variants of 2 steps each."""
    import shutil

    from biocheck.data.prepare import PrepareConfig, prepare
    from biocheck.evidence.build import EvidenceConfig, build_evidence
    from tests.helpers.projects import copy_repo

    work = tmp_path / "repo"
    copy_repo(work)
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    prepare(PrepareConfig(raw_dir=raw_dir, out_dir=work / "data" / "prepared", metrics_path=None,
                          subset={"val": 2, "test": 3}))
    build_evidence(EvidenceConfig(corpus=work / "data" / "prepared" / "corpus.jsonl",
                                  index_dir=work / "data" / "evidence" / "index",
                                  store=work / "data" / "evidence" / "evidence.sqlite", metrics_path=None, progress=False))
    for name in ("base", "sft", "judge", "judge_eqs"):
        shutil.copytree(tiny_model, work / "models" / name)
    params = yaml.safe_load((work / "params.yaml").read_text())
    params["reward"]["judge"] = "transformers:models/judge"
    params["train"].update(num_generations=2, per_device_train_batch_size=2, num_generations_eval=2,
                           per_device_eval_batch_size=4, max_completion_length=96)
    params["agent"].update(max_searches=1, max_new_tokens=24)
    params["evaluate"].update(workers=2)
    params["study"].update(name="e2e", seeds=[0, 1], steps=2, eval_steps=1, limit=2)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "DVC_NO_ANALYTICS": "1",
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    env.pop("BIOCHECK_TRACKING", None)
    return work, env


def _locked(work: Path) -> set[str]:
    """The stages study/dvc.lock records; none while DVC is still writing it (it rewrites the file in place,
    so a poll can read it empty or cut short)."""
    lock = work / "study" / "dvc.lock"
    try:
        data = yaml.safe_load(lock.read_text()) if lock.is_file() else None
    except yaml.YAMLError:
        return set()
    return set(data.get("stages") or {}) if isinstance(data, dict) else set()


@pytest.mark.slow  # ~3 min: 10 DVC stages, each a fresh `biocheck` process on the tiny model
def test_a_study_runs_through_dvc_and_a_killed_one_resumes_without_redoing_units(tmp_path, raw_dir, tiny_model):
    from mlflow import MlflowClient

    work, env = _git_project(tmp_path, raw_dir, tiny_model)
    cmd = [str(Path(sys.executable).parent / "biocheck"), "study", "run", "--no-upstream"]
    # SIGINT at its default, as in a terminal: a suite started in the background (`make test &`) ignores it,
    # and an ignored signal stays ignored in every child
    first = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 600
    while "train@eg_grpo-0" not in (locked := _locked(work)) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "train@eg_grpo-0" in locked, first.communicate()[0][-3000:]
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: DVC stops the unit it is running
    text = first.communicate(timeout=120)[0]
    # Ctrl-C: exit 130 and one line of its own (the lines DVC relays, logged as INFO, are the stage's output)
    own = [line for line in text.splitlines() if line.strip() and " INFO " not in line and " WARNING " not in line]
    assert first.returncode == 130 and "Traceback" not in "\n".join(own), text[-3000:]
    assert own[-1].startswith("error: interrupted; finished units are kept"), own
    states = dict(study.unit_states(work))
    assert states[f"{study.STUDY_DVC}:train@eg_grpo-0"] == "done"
    assert states[f"{study.STUDY_DVC}:analyze"] == "to run" and list(states.values()).count("done") < 10
    kept = work / "study" / "checkpoints" / "eg_grpo-s0"
    before = {p: p.stat().st_mtime_ns for p in kept.rglob("*") if p.is_file()}
    assert any(p.name == "model.safetensors" for p in before)

    second = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    said = second.stderr + second.stdout
    assert "[1/10] study/dvc.yaml:train@eg_grpo-0: up to date, skipped" in said  # not trained again
    assert "[10/10] study/dvc.yaml:analyze: ran" in said
    assert {p: p.stat().st_mtime_ns for p in kept.rglob("*") if p.is_file()} == before
    assert _locked(work) == {s.removeprefix(f"{study.STUDY_DVC}:") for s in
                             study.stages(study.study_config(yaml.safe_load((work / "params.yaml").read_text())))}

    metrics = json.loads((work / "metrics" / "study.json").read_text())
    assert metrics["seeds"] == 2 and set(metrics["scifact"]) == {"accuracy", "ehr", "eqs", "citing_rate", "grounded_rate"}
    report = json.loads((work / "reports" / "study.json").read_text())
    assert report["size"]["claims"] == {"scifact": 2} and len(report["units"]) == 5
    assert all(u["step"] in (1, 2) and Path(u["checkpoint"]).parent == work.joinpath("study/checkpoints", n).relative_to(work)
               for n, u in report["units"].items() if n != "start")  # each unit's own selection
    assert (work / "reports" / "study" / "index.html").is_file()
    measured = sum(d["lo"] is not None for r in report["datasets"].values() for e in r["metrics"].values()
                   for d in e["differences"].values())  # a difference without an interval is not plotted as 0
    assert (work / "metrics" / "study_plots" / "forest.csv").read_text().count("\n") == 1 + measured
    assert dvc.status(work, [study.STUDY_DVC]) == {}  # every unit recorded: a rerun would skip them all
    assert {state for _, state in study.unit_states(work)} == {"done"}

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.study = 'e2e'")
    parents = {r.info.run_id for r in runs if r.info.run_name == "study e2e"}
    trained = {(r.data.tags["variant"], r.data.tags["seed"]) for r in runs
               if r.data.tags.get("stage") == "train" and r.data.tags.get("mlflow.parentRunId") in parents}
    assert trained == {(v, str(s)) for v in ("eg_grpo", "outcome_only") for s in (0, 1)}


# --- reviewable results: export, and the analysis recomputed from the exported files alone ----------------

def test_an_export_recomputes_to_the_same_analysis_from_its_files_alone(analyzed, tmp_path, monkeypatch):
    params, _ = analyzed
    # a training unit's per-step log: the last checkpoint's log_history, only the reward's keys
    ckpt = study.StudyConfig.out_dir / "eg_grpo-s0" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    history = [{"step": 1, "loss": 0.1, "reward": 0.5, "rewards/evidence/mean": 0.2, "groups/evidence/varying": 0.5,
                "groups/evidence/std": 0.1, "funnel/retrieved": 0.75, "grad_norm": 3.0, "learning_rate": 1e-5},
               {"step": 2, "eval_reward": 0.4, "eval_groups/evidence/varying": 0.25}]
    (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": 2, "log_history": history}))
    from biocheck.pipeline import audit_config

    audit = {"groups_varying": {"SUPPORTED": {"groups": 4, "evidence": 0.75}}, "note": "the start's audit"}
    audit_config(params).report_path.parent.mkdir(parents=True, exist_ok=True)
    audit_config(params).report_path.write_text(json.dumps(audit))
    dest = study.export(params, tmp_path / "export")
    assert sorted(p.name for p in (dest / "units").iterdir()) == sorted(RIGHT)
    assert json.loads((dest / study.EXPORT_AUDIT).read_text()) == audit  # what the gate read, beside the units
    steps = [json.loads(x) for x in (dest / "units" / "eg_grpo-s0" / "steps.jsonl").read_text().splitlines()]
    assert steps == [{k: v for k, v in history[0].items() if k not in ("grad_norm", "learning_rate")}, history[1]]
    assert (dest / "units" / "eg_grpo-s1" / "steps.jsonl").read_text() == ""  # no checkpoint: no steps
    assert all(json.loads(x)["trace"] is None for x in (dest / "units" / "start" / "scifact.jsonl").read_text().splitlines())
    for folder in ("study", "reports", "metrics"):  # nothing of the project is read back
        shutil.rmtree(folder, ignore_errors=True)
    monkeypatch.chdir(tmp_path)
    out = study.recompute(dest)
    assert out["matches"] is True
    assert out["report"]["datasets"]["scifact"]["metrics"]["accuracy"]["differences"]["outcome_only"]["diff"] == \
        pytest.approx(0.75)
    # a changed prediction no longer matches the exported analysis: the command says so, exit 1
    f = dest / "units" / "eg_grpo-s0" / "scifact.jsonl"
    lines = f.read_text().splitlines()
    first = json.loads(lines[0])
    first["pred"] = "REFUTED" if first["pred"] == "SUPPORTED" else "SUPPORTED"
    f.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    r = CliRunner().invoke(app, ["study", "recompute", str(dest)])
    assert r.exit_code == 1 and "differs from" in r.output
    assert study.recompute(dest)["matches"] is False


def test_the_bench_tables_render_an_export_from_its_files_alone(analyzed, tmp_path, monkeypatch):
    """bench/study_tables.py (docs/results.md's tables of a study) reads an export and nothing else."""
    import importlib.util

    params, _ = analyzed
    dest = study.export(params, tmp_path / "export")
    for folder in ("study", "reports", "metrics"):
        shutil.rmtree(folder, ignore_errors=True)
    spec = importlib.util.spec_from_file_location("study_tables", REPO / "bench" / "study_tables.py")
    tables = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tables)
    report = study.recompute(dest)["report"]
    diffs = tables.differences(report, "scifact").splitlines()
    acc = next(x for x in diffs if x.startswith("| accuracy |"))
    # eg_grpo 0.875 (7 of 8 over two seeds) against outcome_only 0.125 and the start 0.25
    assert "| 0.250 | 0.875 | 0.125 |" in acc and "McNemar per seed" in acc
    assert "always SUPPORTED" in diffs[-1] or "always REFUTED" in diffs[-1]
    rows = tables.units(dest, report, "scifact").splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == ["| " + u for u in report["units"]]
    s1 = next(r for r in rows if r.startswith("| eg_grpo-s1 |"))
    assert "| 1.000 |" in s1 and "step 2" in s1  # all 4 right, and the selected step
    funnel = tables.funnel(report, "scifact")
    assert "Of the 4 claims" in funnel and "| start | 4 | 1 |" in funnel  # retrieved 4, cited where right: 1
