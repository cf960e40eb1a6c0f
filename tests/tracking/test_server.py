"""The documented way to compare runs (docs/mlflow.md), against a real `mlflow server`: the evaluation stage logs
into it over HTTP, the REST API finds one run per system and dataset with the same metric keys and tags, and
headless Chromium shows the runs table with metric columns and the compare view of EG-GRPO, outcome-only and
the base model.

BIOCHECK_MLFLOW_DB=path/to/mlflow.db serves a copy of that database (e.g. the quickstart's) instead of a fresh
evaluation's, checked the same way (its latest `evaluate` run); BIOCHECK_DOCS_SCREENSHOTS=1 also writes the two
screenshots to docs/img/ (`BIOCHECK_MLFLOW_DB=mlflow.db BIOCHECK_DOCS_SCREENSHOTS=1 pytest
tests/tracking/test_server.py` refreshes the docs' pictures). The browser tests need Playwright and a Chromium
binary (`apt-get install chromium`, or BIOCHECK_CHROMIUM), and are skipped without them.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from biocheck import pipeline, wiring
from biocheck.io import atomic_path
from tests.helpers.browser import chromium
from tests.helpers.builders import write_test_splits
from tests.helpers.eval_project import REPORT
from tests.helpers.mlflow_server import MlflowServer, mlflow_server
from tests.helpers.paths import REPO

pytestmark = pytest.mark.slow  # one server start (15-40 s) and one small evaluation for the whole module

SYSTEMS = ("base", "eg_grpo", "outcome_only", "no_retrieval")
COMPARED = ("eg_grpo", "outcome_only", "base")  # the compare view the docs show, on COMPARE_ON
COMPARE_ON = "scifact"
HEADLINE = ("accuracy", "macro_f1", "eqs", "ehr")  # the metric columns docs/mlflow.md tells a reader to add
SCOPE_PARAMS = ("system", "dataset", "model_alias")  # each eval run's own params (compare-view axes)
# REFUTED-heavy claims: eg_grpo (scripted to search, then say REFUTED) scores apart from the systems saying SUPPORTED
CLAIMS = {"scifact": [("1", "Vitamin D prevents fractures.", "SUPPORTED"), ("2", "Aspirin causes bleeding.", "REFUTED"),
                      ("3", "Statins impair memory.", "REFUTED")],
          "healthfc": [("1", "Zinc shortens colds.", "SUPPORTED"), ("7", "Coffee causes arrhythmia.", "REFUTED")]}
EXTERNAL_DB = os.environ.get("BIOCHECK_MLFLOW_DB", "").strip()
DOCS_IMG = REPO / "docs" / "img"


def tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def params(run: dict[str, Any]) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def metrics(run: dict[str, Any]) -> dict[str, float]:
    return {m["key"]: float(m["value"]) for m in run["data"].get("metrics", [])}


@dataclass
class Evaluation:
    """What one `evaluate` run left on the server: its experiment, the parent run and its children."""
    experiment_id: str
    parent: dict[str, Any]
    children: list[dict[str, Any]]
    ancestors: list[str]  # run ids above the parent, outermost first (a pipeline run), to unfold in the UI
    scope: str  # a filter clause limiting a search to this evaluation ("" when the server holds nothing else)
    systems: tuple[str, ...]
    datasets: tuple[str, ...]
    git_commit: str | None  # the commit the project was at (None: unknown, an external database)

    def child(self, system: str, dataset: str) -> dict[str, Any]:
        [run] = [r for r in self.children if (tags(r).get("system"), tags(r).get("dataset")) == (system, dataset)]
        return run


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("mlflow-server")
    db = None
    if EXTERNAL_DB:  # a copy: the server may migrate the schema, and the tests must not touch the original
        if not Path(EXTERNAL_DB).is_file():
            pytest.fail(f"BIOCHECK_MLFLOW_DB={EXTERNAL_DB}: no such file (give the path of an mlflow.db)")
        db = home / "served.db"
        shutil.copyfile(EXTERNAL_DB, db)
    with mlflow_server(home, db=db) as s:
        yield s
    assert s.survivors() == [], f"processes of the MLflow server still running after stop(): {s.survivors()}"


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def _project(root: Path) -> str:
    """A tiny project under git (so the runs carry a real commit): the test corpus's index, the CLAIMS test
    splits, and a scripted model per system; returns the commit."""
    from biocheck.evidence.build import EvidenceConfig, build_evidence
    from tests.helpers.builders import CORPUS

    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(d["doc_id"]), "title": d["title"], "abstract": d["abstract"],
                                          "structured": d["structured"]}) + "\n" for d in CORPUS))
    evidence = EvidenceConfig(corpus=corpus, index_dir=root / "index", store=root / "ev.sqlite",
                              metrics_path=root / "evidence.json", progress=False)
    build_evidence(evidence)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"].update(index_dir=str(evidence.index_dir), store=str(evidence.store))
    params["agent"]["llm"] = "scripted:supports.json"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None  # EQS by the (absent) training judge
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    write_test_splits(root, CLAIMS)
    (root / "supports.json").write_text(json.dumps([{"content": REPORT}]))
    (root / "refutes.json").write_text(json.dumps([
        {"tool_calls": [{"name": "search_pubmed", "arguments": {"query": "aspirin bleeding"}}]},
        {"content": REPORT.replace("\nSUPPORTED", "\nREFUTED")}]))
    _git(root, "init", "-q")
    _git(root, "add", "params.yaml", "supports.json", "refutes.json")
    _git(root, "commit", "-q", "-m", "tiny project")
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def evaluation(server: MlflowServer, tmp_path_factory) -> Evaluation:
    """The real evaluation stage (pipeline.evaluate_stage, what `dvc repro evaluate` runs) on a tiny project,
    tracking to the server over HTTP; with BIOCHECK_MLFLOW_DB, that database's latest evaluation instead."""
    commit = None
    if not EXTERNAL_DB:
        project = tmp_path_factory.mktemp("project")
        commit = _project(project)
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(project)
            mp.setenv("MLFLOW_TRACKING_URI", server.url)
            mp.delenv("BIOCHECK_TRACKING", raising=False)
            result = pipeline.evaluate_stage(project / "params.yaml", progress=False, systems=list(SYSTEMS),
                                             model="scripted:refutes.json")
        assert "mlflow" not in result["skipped"], f"the evaluation did not reach MLflow: {result['skipped']}"
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    name = wiring.tracking_config(params).experiments["eval"]  # params.yaml tracking.experiments.eval
    exp = server.get("experiments/get-by-name", experiment_name=name)["experiment"]
    parents = server.search_runs(exp["experiment_id"], "attributes.run_name = 'evaluate'")
    assert parents, f"no run named 'evaluate' in experiment {exp['name']}"
    parent = parents[0]  # the newest
    pid = parent["info"]["run_id"]
    children = server.search_runs(exp["experiment_id"], f"tags.`mlflow.parentRunId` = '{pid}'")
    ancestors, up = [], tags(parent).get("mlflow.parentRunId")
    while up:
        ancestors.insert(0, up)
        up = tags(server.get("runs/get", run_id=up)["run"]).get("mlflow.parentRunId")
    if EXTERNAL_DB:
        systems = tuple(dict.fromkeys(tags(r).get("system", "") for r in children))
        datasets = tuple(dict.fromkeys(tags(r).get("dataset", "") for r in children))
    else:
        systems, datasets = SYSTEMS, tuple(params["evaluate"]["datasets"])
    return Evaluation(exp["experiment_id"], parent, children, ancestors,
                      scope=f" and tags.`mlflow.parentRunId` = '{pid}'" if EXTERNAL_DB else "",
                      systems=systems, datasets=datasets, git_commit=commit)


# -- the REST API -----------------------------------------------------------------------------------------


def test_searching_by_system_finds_one_run_per_dataset(server, evaluation):
    ev = evaluation
    assert set(COMPARED) <= set(ev.systems) and COMPARE_ON in ev.datasets
    for system in ev.systems:
        found = server.search_runs(ev.experiment_id, f"tags.system = '{system}'{ev.scope}")
        assert sorted(tags(r)["dataset"] for r in found) == sorted(ev.datasets), system
        assert {tags(r)["system"] for r in found} == {system}
        assert all(r["info"]["status"] == "FINISHED" for r in found)
    for dataset in ev.datasets:
        found = server.search_runs(ev.experiment_id, f"tags.dataset = '{dataset}'{ev.scope}")
        assert sorted(tags(r)["system"] for r in found) == sorted(ev.systems), dataset
    pairs = Counter((tags(r).get("system"), tags(r).get("dataset")) for r in ev.children)
    assert pairs == Counter((s, d) for s in ev.systems for d in ev.datasets)  # each pair once, nothing else
    if not EXTERNAL_DB:  # the fresh server holds this evaluation and nothing else: no stray runs
        every = server.search_runs(ev.experiment_id)
        assert len(every) == 1 + len(ev.systems) * len(ev.datasets)
        assert {r["info"]["run_id"] for r in every} == {ev.parent["info"]["run_id"]} | {
            r["info"]["run_id"] for r in ev.children}


def test_every_evaluation_run_has_the_same_metric_keys_and_the_shared_tags(evaluation):
    ev = evaluation
    keys = {frozenset(metrics(r)) for r in ev.children}
    assert len(keys) == 1, "the children's metric keys differ: the compare view would misalign"
    assert set(HEADLINE) <= next(iter(keys))
    for run in [ev.parent, *ev.children]:
        t = tags(run)
        assert {"profile", "git_commit", "git_dirty", "dvc_stage"} <= t.keys(), run["info"]["run_name"]
        assert t["dvc_stage"] == "evaluate" and t["git_dirty"] in ("true", "false")
        if ev.git_commit is not None:  # the tiny project: committed, its outputs untracked
            assert (t["git_commit"], t["git_dirty"], t["profile"]) == (ev.git_commit, "false", "quickstart")
    assert ev.parent["info"]["run_name"] == "evaluate"
    for run in ev.children:
        t = tags(run)
        assert run["info"]["run_name"] == f"eval {t['system']} {t['dataset']}"
        p = params(run)  # its own system and dataset, not the lists of every system and dataset
        assert {k: p[k] for k in SCOPE_PARAMS} == {k: t[k] for k in SCOPE_PARAMS}
        assert (p["system"], p["dataset"]) == (t["system"], t["dataset"]) and "systems" not in p
        if not EXTERNAL_DB:  # eg_grpo ran a model given as a spec (no alias); base the base model
            assert p["model_alias"] == {"eg_grpo": "none", "outcome_only": "outcome_only", "base": "base"}.get(
                p["system"], "none")
        assert t["model_fingerprint"] not in ("", "unknown") and t["prompt_hash"] not in ("", "unknown")


def test_every_evaluation_run_names_the_split_it_read(evaluation):
    for run in evaluation.children:
        dataset = tags(run)["dataset"]
        inputs = [(i["dataset"]["name"], {t["key"]: t["value"] for t in i.get("tags", [])})
                  for i in run.get("inputs", {}).get("dataset_inputs", [])]
        assert [name for name, t in inputs if t.get("mlflow.data.context") == "evaluation"] == [f"{dataset}/test"], (
            run["info"]["run_name"], inputs)


def test_the_scripted_systems_score_apart(evaluation):
    """The fixture is what it claims: eg_grpo answered differently from the base model, so a test that mixed up
    two runs' values would notice."""
    if EXTERNAL_DB:
        pytest.skip("a served database: its scores are whatever its models did")
    eg, base = (metrics(evaluation.child(s, COMPARE_ON)) for s in ("eg_grpo", "base"))
    assert eg["accuracy"] == pytest.approx(2 / 3) and base["accuracy"] == pytest.approx(1 / 3)
    assert eg["searches"] == 1 and base["searches"] == 0


# -- the UI in a real browser ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def expect():
    return pytest.importorskip("playwright.sync_api").expect


@pytest.fixture(scope="module")
def browser():
    with chromium("the MLflow UI tests") as b:
        yield b


@pytest.fixture()
def page(browser):
    ctx = browser.new_context(viewport={"width": 1920, "height": 900})
    pg = ctx.new_page()
    pg.set_default_timeout(60_000)  # a React app on 2 busy cores: waits are on elements, never on the clock
    yield pg
    ctx.close()


def _screenshot(page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=shot)
    assert shot.stat().st_size > 10_000, "an (almost) empty screenshot"
    if os.environ.get("BIOCHECK_DOCS_SCREENSHOTS") == "1":
        with atomic_path(DOCS_IMG / name) as tmp:
            shutil.copyfile(shot, tmp)
            tmp.chmod(0o644)  # a picture anyone may read, not a private temporary file
    return shot


def _value(text: str) -> float:
    return math.nan if text.strip() == "NaN" else float(text)


def _js_number(x: float) -> str:
    """A number as the UI prints it (JavaScript's String(x)): 1 not 1.0, NaN, 0.000001 not 1e-06, 1e-7."""
    if math.isnan(x):
        return "NaN"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    return str(Decimal(repr(x))).replace("E", "e")  # shortest digits; exponent below 1e-6, as in JavaScript


def _close_assistant(page) -> None:
    """MLflow 3 opens its chat assistant beside the table on a first visit (before the runs arrive); it takes
    half the width, and the table draws only the columns that fit."""
    close = page.get_by_role("button", name="Close", exact=True)
    if close.count() == 1 and close.is_visible():
        close.click()
        close.wait_for(state="hidden")


def _run_row(page, run_id: str):
    """The runs table's row for a run (its pinned part: checkbox and name), found by the link to the run."""
    return page.get_by_role("row").filter(has=page.locator(f'a[href$="/runs/{run_id}"]'))


def _open_runs_table(page, server: MlflowServer, ev: Evaluation) -> None:
    """The experiment's runs table with the evaluation's runs unfolded and the HEADLINE metric columns shown,
    as docs/mlflow.md walks through it."""
    # workflowType: MLflow 3 opens an experiment without runs of a model type on its GenAI pages
    page.goto(f"{server.url}/#/experiments/{ev.experiment_id}/runs?workflowType=machine_learning")
    _run_row(page, ev.ancestors[0] if ev.ancestors else ev.parent["info"]["run_id"]).wait_for()
    _close_assistant(page)
    for run_id in [*ev.ancestors, ev.parent["info"]["run_id"]]:  # nested runs start folded under their parent
        _run_row(page, run_id).locator('[col-id="attributes.`Run Name`"] button').click()
    _run_row(page, ev.children[-1]["info"]["run_id"]).wait_for()
    _widen(page, "attributes.`Run Name`", 100)  # "eval outcome_only healthfc" in full
    page.get_by_role("button", name="Columns", exact=True).click()
    picker = page.get_by_role("dialog")
    for key in HEADLINE:
        picker.get_by_placeholder("Search columns").fill(key)
        picker.locator("span[class*=tree-title]").filter(has_text=re.compile(rf"^{re.escape(key)}$")).click()
    page.keyboard.press("Escape")


def _widen(page, col_id: str, px: int) -> None:
    """Drag a column's resize handle `px` to the right (grabbed at its left end: its middle sits on the next
    column's header, where a press would sort the table instead)."""
    header = page.locator(f'.ag-header-cell[col-id="{col_id}"]')
    before = header.bounding_box()["width"]
    box = header.locator(".ag-header-cell-resize").bounding_box()
    x, y = box["x"] + 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + px, y, steps=10)
    page.mouse.up()
    assert header.bounding_box()["width"] >= before + px / 2, f"column {col_id} did not widen"


def test_the_runs_table_lists_the_evaluation_runs_with_their_metrics(page, server, evaluation, tmp_path, expect):
    ev = evaluation
    _open_runs_table(page, server, ev)
    for run in ev.children:
        row = _run_row(page, run["info"]["run_id"])
        row.wait_for()
        assert row.get_by_role("link", name=run["info"]["run_name"], exact=True).is_visible()
        index = row.get_attribute("aria-rowindex")  # the metric cells sit in the same row of the scrolled part
        for key in HEADLINE:
            cell = page.locator(f'[role=row][aria-rowindex="{index}"] [col-id="metrics.`{key}`"]')
            expect(cell).to_have_text(_js_number(metrics(run)[key]))  # retried: the table redraws as it settles
    _screenshot(page, tmp_path, "mlflow-runs.png")


def test_the_compare_view_shows_eg_grpo_outcome_only_and_base_side_by_side(page, server, evaluation, tmp_path):
    ev = evaluation
    runs = {ev.child(s, COMPARE_ON)["info"]["run_id"]: ev.child(s, COMPARE_ON) for s in COMPARED}
    _open_runs_table(page, server, ev)
    for run_id in runs:  # tick the three runs, then Compare: the way a reader gets there
        _run_row(page, run_id).get_by_role("checkbox").first.check()
    page.get_by_role("button", name="Compare", exact=True).click()
    page.get_by_text(f"Comparing {len(runs)} Runs", exact=False).wait_for()
    details = page.get_by_role("table").first  # Run details: a header cell, then one cell per run

    def row(title: str) -> list[str]:
        found = details.get_by_role("row").filter(has_text=title)
        found.wait_for()
        return [c.strip() for c in found.locator(":scope > *").all_inner_texts()[1:]]

    ids = row("Run ID:")
    assert sorted(ids) == sorted(runs)
    assert row("Run Name:") == [runs[i]["info"]["run_name"] for i in ids]
    # the Parameters section (a table: a header cell, then one cell per run, in `ids` order): each run's own
    # `system`, `dataset` and `model_alias`, the params the parallel-coordinates plot offers as axes
    section = page.locator(".du-bois-light-collapse-item").filter(
        has=page.get_by_role("button", name="Parameters", exact=True))
    for key in SCOPE_PARAMS:
        found = section.get_by_role("row").filter(has=page.locator("th", has_text=re.compile(rf"^{key}$")))
        found.wait_for()
        cells = [c.strip() for c in found.locator("td").all_inner_texts()]
        assert cells == [params(runs[i])[key] for i in ids], key
    assert [params(runs[i])["system"] for i in ids] == [tags(runs[i])["system"] for i in ids]
    # the Metrics section: a grid of metric names beside a grid of values, one column per run (in `ids` order)
    page.get_by_role("button", name="Parameters", exact=True).click()  # folded: Metrics comes up under the names
    names_grid, values_grid = page.get_by_role("grid").nth(0), page.get_by_role("grid").nth(1)
    first = names_grid.get_by_role("link").first.inner_text().strip()
    assert first in metrics(next(iter(runs.values())))
    values_grid.locator("span").nth(len(ids) - 1).wait_for()
    shown = values_grid.locator("span").all_inner_texts()[: len(ids)]  # rounded to 3 decimals
    assert [_value(v) for v in shown] == pytest.approx([metrics(runs[i])[first] for i in ids], nan_ok=True, abs=1e-3)
    # the picture for the docs: the metrics that differ, and the headline metrics on the parallel-coordinates
    # plot (those with a number for all three: a NaN drops a run's line)
    page.get_by_role("switch", name="Metrics - Show diff only").click()
    page.get_by_role("button", name="Clear All").click()
    pick = page.get_by_role("combobox").nth(1)  # Parameters, then Metrics
    plotted = [k for k in HEADLINE if not any(math.isnan(metrics(r)[k]) for r in runs.values())]
    for key in plotted:
        pick.click()
        pick.fill(key)
        page.locator(f'[title="{key}"]:visible').click()
    page.keyboard.press("Escape")
    for key in plotted:  # the plot's axis titles
        page.locator("svg text", has_text=re.compile(rf"^{re.escape(key)}$")).first.wait_for()
    page.set_viewport_size({"width": 1920, "height": 1400})
    _screenshot(page, tmp_path, "mlflow-compare.png")
