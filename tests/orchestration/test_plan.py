"""Which flow runs which DVC stage: read from dvc.yaml through DVC's own graph (biocheck/orchestration/plan.py).

- The areas on hand-made graphs: a stage added anywhere lands in exactly one area, each area closed under its
  dependencies, DVC's order kept; a missing anchor stage is one clear error.
- On the real dvc.yaml: the areas, run one after another, are every stage of dvc.yaml in `dvc repro`'s order.
- The flows themselves (their tasks recorded): the pipeline flow runs exactly that, and a stage added to a
  copy of dvc.yaml (and to no flow) is run, where DVC would run it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from biocheck.io import InputError
from biocheck.orchestration import dvc, plan
from biocheck.orchestration.plan import Pipeline
from tests.helpers.paths import REPO


def _pipeline(edges: dict[str, list[str]]) -> Pipeline:
    """A pipeline from {stage: its dependencies}, in a topological order."""
    from graphlib import TopologicalSorter

    order = tuple(TopologicalSorter(edges).static_order())
    return Pipeline(order=order, upstream={s: frozenset(edges.get(s, ())) for s in order})


BASE = {"fetch": [], "prepare": ["fetch"], "validate": ["prepare"], "evidence": ["prepare", "validate"],
        "model": ["prepare"], "judge": ["model"], "train": ["model", "judge", "evidence"], "evaluate": ["train", "judge"]}


def test_areas_on_a_small_graph():
    assert plan.areas(_pipeline(BASE)) == {"data": ["fetch", "prepare", "validate"], "evidence": ["evidence"],
                                           "train": ["model", "judge", "train"], "evaluate": ["evaluate"]}


@pytest.mark.parametrize(("stage", "deps", "dependents", "area"), [
    ("baseline", [], ["evidence"], "evidence"),  # a file the index reads: before evidence, not in data
    ("schema", [], ["validate"], "data"),
    ("judge2", ["model"], [], "train"),  # a second judge: upstream of nothing, like the audit
    ("audit", ["model", "judge"], [], "train"),
    ("gold", ["judge"], ["evaluate"], "train"),
    ("report", ["evaluate"], [], "evaluate"),  # downstream of the evaluation
    ("lonely", [], [], "train"),  # related to nothing: still run
])
def test_a_stage_added_anywhere_lands_in_one_area_after_its_dependencies(stage, deps, dependents, area):
    edges = {**BASE, stage: deps}
    for d in dependents:
        edges[d] = [*edges[d], stage]
    p = _pipeline(edges)
    found = plan.areas(p)
    assert stage in found[area]
    assert sorted(s for stages in found.values() for s in stages) == sorted(p.order)  # each stage exactly once
    ran: set[str] = set()
    for name in plan.AREAS:  # the areas one after another: every stage after all of its dependencies
        for s in found[name]:
            assert p.upstream[s] <= ran, (s, name)
            ran.add(s)


def test_the_training_of_chosen_variants_and_without_the_model():
    edges = {**BASE, "train@a": ["judge", "evidence"], "train@b": ["judge", "evidence"], "select@a": ["train@a"],
             "select@b": ["train@b"], "judge_eqs": ["model"]}
    edges["evaluate"] = ["select@a", "select@b", "judge_eqs"]
    del edges["train"]
    p = _pipeline(edges)
    assert set(plan.training(p)) == {"model", "judge", "judge_eqs", "train@a", "train@b", "select@a", "select@b"}
    assert plan.training(p, ["b"]) == p.ordered(["model", "judge", "train@b", "select@b"])
    assert plan.training(p, ["b"], init_model=False) == p.ordered(["judge", "train@b", "select@b"])


def test_a_missing_anchor_or_an_order_against_the_dependencies_is_an_error():
    edges = {k: v for k, v in BASE.items() if k != "evaluate"}
    with pytest.raises(InputError, match=r"^dvc.yaml has no stage 'evaluate': the Prefect flows' areas end at "
                                         r"validate, evidence, evaluate"):
        plan.areas(_pipeline(edges))
    with pytest.raises(ValueError, match=r"prepare comes before its dependencies \['fetch'\]"):
        Pipeline(order=("prepare", "fetch"), upstream={"prepare": frozenset({"fetch"})})


# --- the real dvc.yaml ----------------------------------------------------------------------------------

def _project(root: Path, dvc_yaml: str | None = None) -> Path:
    (root / ".dvc").mkdir(parents=True)
    (root / "dvc.yaml").write_text(dvc_yaml or (REPO / "dvc.yaml").read_text())
    shutil.copy2(REPO / "params.yaml", root / "params.yaml")
    return root.resolve()


def test_the_areas_of_dvc_yaml_are_every_stage_in_dvcs_order(tmp_path):
    p = dvc.pipeline(_project(tmp_path / "p"))
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    expanded = {f"{name}@{key}" if "foreach" in stage else name
                for name, stage in declared.items() for key in (stage.get("foreach") or [None])}
    assert set(p.order) == expanded  # foreach stages expanded as DVC names them
    found = plan.areas(p)
    assert [s for name in plan.AREAS for s in found[name]] == list(p.order)
    assert found["data"] == ["fetch", "prepare", "validate"]
    assert found["evaluate"] == ["evaluate", "narrative_passages", "narratives"]  # the passage benchmark too
    assert {"judge_eqs", "audit"} <= set(found["train"])  # the stages no flow ran (issue 47)


def test_dvc_yaml_that_dvc_cannot_read_is_one_clear_error(tmp_path):
    root = _project(tmp_path / "p", "stages:\n  a:\n    cmd: [unclosed\n")
    with pytest.raises(dvc.DvcError, match=r"dvc.yaml: .*fix it \(`dvc dag` shows the graph DVC reads\)$"):
        dvc.pipeline(root)


@pytest.fixture
def ran(monkeypatch):
    """Every flow's stage tasks and sub-flows run as plain functions, `dvc repro` recorded: (stage, root) calls."""
    import flows.pipeline as pipe
    import flows.tasks as tasks

    calls: list[str] = []
    monkeypatch.setattr(tasks, "task_for", lambda stage: lambda stage, root: calls.append(stage) or {})
    for name in ("data_flow", "evidence_flow", "train_flow"):
        monkeypatch.setattr(pipe, name, getattr(pipe, name).fn)
    return calls


def test_the_pipeline_flow_runs_every_stage_of_dvc_yaml_in_dvcs_order(ran, tmp_path):
    import flows.pipeline as pipe

    root = _project(tmp_path / "p")
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["orchestrate"]["dvc_remote"] = None
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    pipe.pipeline_flow.fn(root=str(root))
    assert ran == list(dvc.pipeline(root).order)


def test_a_stage_added_to_dvc_yaml_and_to_no_flow_is_run_where_dvc_runs_it(ran, tmp_path):
    import flows.pipeline as pipe

    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    stages = spec["stages"]
    # a gold-evidence check between the judges and the evaluation, and a summary after it
    stages["gold_check"] = {"cmd": "true", "deps": ["models/judge_eqs"], "outs": ["reports/gold_check.json"]}
    stages["evaluate"]["deps"].append("reports/gold_check.json")
    stages["summary"] = {"cmd": "true", "deps": ["reports/eval_metrics.json"], "outs": ["reports/summary.md"]}
    root = _project(tmp_path / "p", yaml.safe_dump(spec, sort_keys=False))
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["orchestrate"]["dvc_remote"] = None
    (root / "params.yaml").write_text(yaml.safe_dump(params))

    pipe.pipeline_flow.fn(root=str(root))
    assert "gold_check" in ran and "summary" in ran
    assert ran.index("judge_eqs") < ran.index("gold_check") < ran.index("evaluate") < ran.index("summary")
    assert ran == list(dvc.pipeline(root).order)
