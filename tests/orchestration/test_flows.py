"""The `biocheck-pipeline` flow's wiring, and what it shows in Prefect's UI.

The flow body runs as a plain function (`.fn`) with its sub-flows and tasks replaced by recorders (no
Prefect server, no DVC): the order pull -> data -> evidence -> train -> evaluate -> push, push only after
success, a missing remote failing before anything runs, and the training deployment branch. The artifact
builders (validation markdown, metric table rows) are checked on real validation and metric output.
(Which stages each area runs, read from dvc.yaml: tests/orchestration/test_plan.py; the flows running real DVC
stages under Prefect: tests/test_flow.py and tests/orchestration/test_flows_e2e.py.)
"""

from __future__ import annotations

from pathlib import Path

import flows.pipeline as pipe
import pytest
from prefect.states import Completed, Failed

from biocheck.io import InputError
from biocheck.orchestration.artifacts import metric_rows, validation_markdown, validation_summary
from biocheck.orchestration.dvc import DvcError
from tests.helpers.paths import REPO
from tests.helpers.projects import flow_project

DEPLOYMENT = "biocheck-train/train-gpu"


def _names(steps) -> list[str]:
    return [c[0] for c in steps.calls]


def test_the_pipeline_pulls_runs_every_area_in_order_and_pushes(steps, tmp_path):
    root = flow_project(tmp_path / "p", dvc_remote="local")
    out = pipe.pipeline_flow.fn(root=str(root))
    assert _names(steps) == ["pull", "data", "evidence", "train", "evaluate", "push"]
    params, where = str(root.resolve() / "params.yaml"), str(root.resolve())
    assert steps.calls[0][1] == (where, "local") and steps.calls[-1][1] == (where, "local")
    assert steps.calls[1][2] == {"params": params, "root": where}  # sub-flows get absolute paths
    assert steps.calls[3][2] == {"params": params, "root": where}
    # the evaluate area: `evaluate`, the passage benchmark and what follows them
    assert steps.calls[4][1] == (["evaluate", "narrative_passages", "narratives"], where)
    assert out["push"] == "local" and out["evaluate"] == {"step": "evaluate"}


def test_no_remote_no_pull_no_push_and_each_can_be_turned_off(steps, tmp_path):
    pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "a", dvc_remote=None)))
    assert _names(steps) == ["data", "evidence", "train", "evaluate"]
    steps.calls.clear()
    pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "b", dvc_remote="local")), pull=False)
    assert _names(steps) == ["data", "evidence", "train", "evaluate", "push"]
    steps.calls.clear()
    pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "c", dvc_remote="local")), push=False)
    assert _names(steps) == ["pull", "data", "evidence", "train", "evaluate"]


@pytest.mark.parametrize("failing", ["data", "evidence", "train", "evaluate"])
def test_a_failing_step_stops_the_run_and_nothing_is_pushed(steps, tmp_path, failing):
    steps.fail = failing
    with pytest.raises(RuntimeError, match=f"{failing} broke"):
        pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "p", dvc_remote="local")))
    order = ["pull", "data", "evidence", "train", "evaluate"]
    assert _names(steps) == order[: order.index(failing) + 1]


def test_a_missing_remote_fails_before_anything_runs(steps, tmp_path):
    steps.remotes = {}
    with pytest.raises(DvcError, match=r"^no DVC remote named 'local' .*this project has none.*"
                                       r"orchestrate.dvc_remote: null"):
        pipe.pipeline_flow.fn(root=str(flow_project(tmp_path / "p", dvc_remote="local")))
    assert steps.calls == []


def test_training_runs_as_the_deployment_when_one_is_set(steps, tmp_path):
    root = flow_project(tmp_path / "p", dvc_remote=None, train_deployment=DEPLOYMENT).resolve()
    out = pipe.pipeline_flow.fn(root=str(root))
    assert _names(steps) == ["data", "evidence", "deployment", "status", "evaluate"]  # no in-process training
    _, (name,), kw = steps.calls[2]
    assert kw["parameters"].pop("pipeline_id")  # the deployment's MLflow runs nest under this pipeline's parents
    assert name == DEPLOYMENT and kw == {"parameters": {"params": str(root / "params.yaml"), "root": str(root)},
                                         "timeout": None}  # waits until the run ends
    targets = steps.calls[3][1][1]  # the whole train area must be up to date here afterwards
    assert list(targets) == ["model", "judge", "judge_eqs", "sft", "audit", "train@eg_grpo", "train@outcome_only",
                             "select@eg_grpo", "select@outcome_only"]
    assert out["train"]["deployment"] == DEPLOYMENT and out["train"]["state"] == "Completed"


def test_a_failed_or_missing_deployment_or_one_that_ran_elsewhere_is_a_clear_error(steps, tmp_path):
    root = str(flow_project(tmp_path / "p", dvc_remote="local", train_deployment=DEPLOYMENT))
    steps.state = Failed(message="CUDA out of memory")
    with pytest.raises(InputError, match=rf"^training deployment {DEPLOYMENT} ended Failed .*CUDA out of memory"):
        pipe.pipeline_flow.fn(root=root)
    assert "push" not in _names(steps) and "evaluate" not in _names(steps)

    steps.state, steps.stale = Completed(), {"train@eg_grpo": [{"changed outs": {"models/checkpoints": "deleted"}}]}
    with pytest.raises(InputError, match=r"train@eg_grpo are not up to date in .*shared file system"):
        pipe.pipeline_flow.fn(root=root)

    steps.fail = "deployment-missing"
    with pytest.raises(InputError, match=rf"^orchestrate.train_deployment: no Prefect deployment '{DEPLOYMENT}'"):
        pipe.pipeline_flow.fn(root=root)
    assert "push" not in _names(steps)


def test_the_flow_names_and_the_params_file_check(tmp_path):
    import flows.data
    import flows.evidence
    import flows.train

    assert [f.name for f in (pipe.pipeline_flow, flows.data.data_flow, flows.evidence.evidence_flow,
                             flows.train.train_flow)] == ["biocheck-pipeline", "biocheck-data",
                                                          "biocheck-evidence", "biocheck-train"]
    root = flow_project(tmp_path / "p")
    with pytest.raises(DvcError, match=r"DVC stages read .*/p/params\.yaml, not .*/other\.yaml"):
        pipe.pipeline_flow.fn(params="other.yaml", root=str(root))


# --- artifacts ----------------------------------------------------------------------------------------

def test_metric_rows_one_per_system_and_dataset_with_intervals():
    from biocheck.evaluate.compare import system_metrics
    from biocheck.evaluate.systems.base import Prediction
    from biocheck.labels import Label

    def preds(system, dataset, report, right):
        gold = [Label.SUPPORTED, Label.REFUTED, Label.NEI, Label.SUPPORTED]
        return [Prediction(id=f"c{i}", dataset=dataset, system=system, fingerprint="f", gold=g,
                           pred=g if i < right else Label.REFUTED if g != Label.REFUTED else Label.SUPPORTED,
                           writes_report=report, parseable=report or None, eqs=0.6 if report else None,
                           ehr=0.25 * i if report else None, cited=4 if report else None,
                           hallucinated=i if report else None)
                for i, g in enumerate(gold)]

    metrics = {s: {d: system_metrics(preds(s, d, s == "eg_grpo", 3 if d == "scifact" else 2), 200, 0)
                   for d in ("scifact", "healthfc")} for s in ("eg_grpo", "cer")}
    rows = metric_rows(metrics)
    assert [(r["system"], r["dataset"]) for r in rows] == [
        ("eg_grpo", "scifact"), ("eg_grpo", "healthfc"), ("cer", "scifact"), ("cer", "healthfc")]
    for row in rows:
        m = metrics[row["system"]][row["dataset"]]
        assert row["n"] == m["n"] == 4
        for name in ("accuracy", "macro_f1"):
            assert row[name] == pytest.approx(m[name], abs=1e-4)
            assert row[f"{name}_lo"] <= row[name] <= row[f"{name}_hi"]
    eg, cer = rows[0], rows[2]
    assert eg["accuracy"] == 0.75 and rows[1]["accuracy"] == 0.5
    assert eg["eqs"] == 0.6 and eg["ehr"] == pytest.approx(0.375)
    assert eg["ehr_micro"] == pytest.approx(6 / 16) and eg["ehr_n"] == 4 and eg["citing_rate"] == 1.0
    assert cer["eqs"] is None and cer["ehr"] is None and cer["eqs_lo"] is None  # no reports, no evidence scores
    shown = ("accuracy", "macro_f1", "citing_rate", "ehr", "ehr_micro", "eqs", "rationale_f1")
    counted = ("citing_rate", "ehr", "ehr_micro", "eqs", "rationale_f1")  # their n: what each counts
    assert set(eg) == {"system", "dataset", "n", *(f"{m}{x}" for m in shown for x in ("", "_lo", "_hi")),
                       *(f"{m}_n" for m in counted)}


def test_validation_markdown_carries_the_summary_biocheck_prints():
    checks = [{"table": "healthfc/full[test]", "dataset": "healthfc", "column": None, "rule": "expect_table_row_count_to_equal",
               "args": "value=750", "success": False, "detail": "observed 7"},
              {"table": "corpus", "dataset": "scifact", "column": "id", "rule": "expect_column_values_to_be_unique",
               "args": "", "success": True, "element_count": 3, "unexpected_count": 0}]
    report = {"success": False, "n_checks": 2, "n_failed": 1, "checks": checks}
    summary = validation_summary(report)
    assert summary.startswith("1 of 2 data checks FAILED:") and "healthfc/full[test]" in summary
    assert "observed 7" in summary
    page = validation_markdown(report, "reports/validation.json")
    assert page.startswith("# Data validation FAILED") and "1 of 2 checks failed" in page
    assert f"```text\n{summary}\n```" in page
    ok = validation_markdown({**report, "success": True, "checks": checks[1:]})
    assert ok.startswith("# Data validation passed") and "All 1 data checks passed." in ok


# --- `python flows/<flow>.py` -------------------------------------------------------------------------

def _script(flow: str, cwd: Path, *args: str, **env: str):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, str(REPO / "flows" / f"{flow}.py"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


@pytest.mark.parametrize("flow", ["pipeline", "train"])
def test_scripts_fail_in_one_line_on_another_params_file_or_an_unreachable_server(tmp_path, flow):
    root = flow_project(tmp_path / "p", dvc_remote=None)
    p = _script(flow, root, "other.yaml")
    assert p.returncode == 1
    assert p.stderr.strip().splitlines() == [
        f"error: params other.yaml: DVC stages read {root.resolve() / 'params.yaml'}, not "
        f"{root.resolve() / 'other.yaml'}; edit that file (e.g. `biocheck profile use ...`) or pass "
        "root=<the project holding other.yaml>"]

    p = _script(flow, root, "params.yaml", PREFECT_API_URL="http://127.0.0.1:9/api")  # nothing listens on 9
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "error: no Prefect server answers at PREFECT_API_URL=http://127.0.0.1:9/api: start it (`prefect server "
        "start`), fix the URL, or unset PREFECT_API_URL to run with a temporary local server")
