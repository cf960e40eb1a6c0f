"""What `dvc metrics show` and `dvc plots show` print, on the committed metrics and on what the code writes.

`dvc metrics show` prints one column per flattened key of every metrics file, so a file holds headline
numbers only (at most MAX_HEADLINE_KEYS); the details are plain outputs. `dvc plots show` draws only data that
exists (no empty CSV cell, which DVC's templates draw as 0), and its page works offline (vega inline).
"""

from __future__ import annotations

import csv
import json
import random
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml

from biocheck.evaluate import compare, evaluation
from biocheck.evaluate.audit import headline as audit_headline
from biocheck.evaluate.config import SYSTEMS, EvaluateConfig
from biocheck.evaluate.headline import MAX_HEADLINE_KEYS
from biocheck.evaluate.systems.base import Prediction
from biocheck.io import write_json_atomic
from biocheck.labels import Label
from biocheck.train.select import SelectConfig, select
from tests.helpers.paths import REPO

DVC = shutil.which("dvc", path=str(Path(REPO / ".venv" / "bin"))) or shutil.which("dvc")
pytestmark = pytest.mark.skipif(DVC is None, reason="dvc is not installed")
DATASETS = ("scifact", "healthfc")
# The stages' own numbers: plain outputs (not DVC metrics), one JSON file each, shown when named.
STAGE_FILES = tuple(f"metrics/{f}.json" for f in (
    "data", "validation", "evidence", "model", "judge", "judge_eqs", "reward_audit", "train", "train_outcome_only",
    "selection", "selection_outcome_only"))
# How wide a plain `dvc metrics show` may print: the path and the headline's columns (295 characters with all
# of them; 2,847 when every stage's file was a DVC metric, one column per key of them all).
MAX_SHOW_WIDTH = 320
REPORT_SYSTEMS = {"base", "eg_grpo", "outcome_only", "fire"}  # the agent's systems write a report


def dvc(root: Path, *args: str) -> str:
    r = subprocess.run([DVC, *args], cwd=root, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"dvc {' '.join(args)}: {r.stderr[-2000:]}"
    return r.stdout


def columns(data: object, prefix: str = "") -> Iterator[str]:
    """The columns `dvc metrics show` prints for a file: its flattened keys (a list is not shown)."""
    if isinstance(data, Mapping):
        for k, v in data.items():
            yield from columns(v, f"{prefix}{k}.")
    elif not isinstance(data, list):
        yield prefix.rstrip(".")


def shown(root: Path, *targets: str) -> dict[str, dict]:
    """{path: data} of `dvc metrics show --json [targets]` in `root` (files that could not be read are left out)."""
    out = json.loads(dvc(root, "metrics", "show", "--json", *targets))
    files = next(iter(out.values()))["data"]
    return {path: f["data"] for path, f in files.items() if "data" in f}


def plot_files(root: Path) -> list[Path]:
    """Every data file dvc.yaml's plots draw: the top-level definitions and the stages' `plots:`."""
    spec = yaml.safe_load((root / "dvc.yaml").read_text())
    files = []
    for definition in spec.get("plots") or []:
        (name, props), = definition.items() if isinstance(definition, dict) else ((definition, {}),)
        y = (props or {}).get("y")
        files += list(y) if isinstance(y, dict) else [name]
    for body in spec["stages"].values():
        items = body.get("foreach", {"": {}}) if "do" in body else {"": {}}
        for item in items.values():
            for entry in (body.get("do") or body).get("plots") or []:
                path = next(iter(entry)) if isinstance(entry, dict) else entry
                files += [path.replace("${item.curve}", str(item.get("curve", "")))]
    paths = [root / f for f in files]
    return sorted({q for p in paths for q in (sorted(p.rglob("*.csv")) if p.is_dir() else [p])})


def empty_cells(path: Path) -> list[tuple[int, str]]:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return [(i, ",".join(row)) for i, row in enumerate(rows) if any(cell.strip() == "" for cell in row)]


# --- fixture outputs, written by the project's own code --------------------------------------------------

def predictions(system: str, dataset: str, n: int = 12) -> list[Prediction]:
    rnd = random.Random(f"{system}/{dataset}")
    labels = [Label.SUPPORTED, Label.REFUTED, Label.NEI]
    out = []
    for i in range(n):
        gold = labels[i % 3]
        pred = rnd.choice([*labels, None]) if rnd.random() < 0.5 else gold
        report = system in REPORT_SYSTEMS
        out.append(Prediction(id=f"c{i}", dataset=dataset, system=system, fingerprint="f" * 16, gold=gold, pred=pred,
                              writes_report=report, parseable=report, cited=2 if report else None,
                              hallucinated=i % 2 if report else None, ehr=(i % 2) / 2 if report else None,
                              eqs=rnd.random() if report else None, searches=2, tokens=100, seconds=0.5))
    return out


def write_select_curve(root: Path, tmp: Path, curve: str) -> None:
    from tests.helpers.checkpoints import fake_checkpoints

    ckpts = fake_checkpoints(tmp / curve, {10: 0.25, 20: 0.5})
    select(SelectConfig(checkpoints=ckpts, out_dir=tmp / f"{curve}_selected", metrics_path=tmp / f"{curve}.json",
                        curve_path=root / curve, register=False))


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A DVC project with this repository's dvc.yaml, params.yaml and .dvc/ (templates, config), and the
    metrics and plot files of a full evaluation (every system on both datasets) written by the evaluate code,
    the reward curves written by `select`, the audit's headline, and the committed other metrics."""
    root, tmp = tmp_path_factory.mktemp("dvc_project"), tmp_path_factory.mktemp("work")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    dvc(root, "init", "-q")
    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy(REPO / name, root / name)
    shutil.copy(REPO / ".dvc" / "config", root / ".dvc" / "config")
    shutil.copytree(REPO / ".dvc" / "plots", root / ".dvc" / "plots", dirs_exist_ok=True)
    cfg = EvaluateConfig()
    metrics = {s: {d: {**compare.system_metrics(predictions(s, d), 50, 0), "about": {"role": "held-out test"}}
                   for d in DATASETS} for s in SYSTEMS}
    write_json_atomic(root / cfg.metrics_path, metrics)
    evaluation.write_headline(metrics, root / cfg.headline_dir)
    compare.plot_data(metrics, root / cfg.plots_dir)
    for curve in ("metrics/reward_curve.csv", "metrics/reward_curve_outcome_only.csv"):
        write_select_curve(root, tmp, curve)
    summary = next(json.loads(p.read_text()) for p in (REPO / "reports" / "reward_audit.json",
                                                       REPO / "metrics" / "reward_audit.json")  # before the split
                   if p.is_file() and "judge_credit" in json.loads(p.read_text()))
    write_json_atomic(root / "metrics" / "reward_audit.json", audit_headline(summary))
    for f in STAGE_FILES:
        if f != "metrics/reward_audit.json":
            shutil.copy(REPO / f, root / f)
    return root


# --- dvc metrics show ------------------------------------------------------------------------------------

def test_every_metrics_file_the_code_writes_fits_in_40_columns(project):
    files = {**shown(project), **shown(project, *STAGE_FILES)}  # the stages' files as `dvc metrics show FILE` shows them
    eval_files = sorted(p for p in files if p.startswith("metrics/eval/"))
    assert eval_files == sorted(f"metrics/eval/{d}/{s}.json" for d in DATASETS for s in SYSTEMS)  # one row each
    assert set(STAGE_FILES) <= set(files)
    wide = {p: len(list(columns(d))) for p, d in files.items() if len(list(columns(d))) > MAX_HEADLINE_KEYS}
    assert wide == {}, f"metrics files wider than {MAX_HEADLINE_KEYS} columns: {wide}"
    row = files["metrics/eval/scifact/eg_grpo.json"]
    assert {"n", "accuracy", "macro_f1", "eqs", "eqs_n", "ehr", "ehr_n", "citing_rate"} <= set(row)
    assert not {"ci", "confusion", "2way", "3way", "seconds_total", "about"} & set(row)  # details are not metrics
    union = {c for p in eval_files for c in columns(files[p])}
    assert len(union) <= MAX_HEADLINE_KEYS  # the evaluation's rows line up in one narrow table


def show_width(root: Path) -> tuple[int, list[str]]:
    """The widest line of a plain `dvc metrics show` in `root`, and the paths of its rows."""
    lines = dvc(root, "metrics", "show").splitlines()
    return max(map(len, lines)), [line.split()[0] for line in lines[1:] if line.strip()]


def test_a_plain_dvc_metrics_show_prints_the_evaluations_headline_only(project):
    """The DVC metrics are the evaluation's headline files: a plain `dvc metrics show` is one narrow table, a row
    per system and dataset; every other stage's numbers are plain outputs, printed when named."""
    width, rows = show_width(project)
    assert sorted(rows) == sorted(f"metrics/eval/{d}/{s}.json" for d in DATASETS for s in SYSTEMS)
    assert width <= MAX_SHOW_WIDTH, width
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    declared = {name for name, body in spec["stages"].items() if (body.get("do") or body).get("metrics")}
    assert declared == {"evaluate"}
    outs = {next(iter(o)) if isinstance(o, dict) else o
            for body in spec["stages"].values() for o in (body.get("do") or body).get("outs") or []}
    assert {"metrics/reward_audit.json", "${item.metrics}"} <= outs  # still outputs of their stages, in git
    assert shown(project, "metrics/judge.json")["metrics/judge.json"] == json.loads((REPO / "metrics/judge.json").read_text())


def test_the_committed_metrics_show_narrow():
    """The committed results, as a fresh clone's plain `dvc metrics show` prints them."""
    width, rows = show_width(REPO)
    assert rows and all(r.startswith("metrics/eval/") for r in rows), rows
    assert width <= MAX_SHOW_WIDTH, width


def test_the_details_are_plain_outputs_that_nobody_reads_as_metrics():
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    ev = spec["stages"]["evaluate"]
    cfg = EvaluateConfig()
    outs = [next(iter(o)) if isinstance(o, dict) else o for o in ev["outs"]]
    metrics = [next(iter(o)) if isinstance(o, dict) else o for o in ev["metrics"]]
    assert metrics == [cfg.headline_dir.as_posix()]
    assert {cfg.metrics_path.as_posix(), cfg.paired_path.as_posix(), cfg.plots_dir.as_posix()} <= set(outs)
    # not inside the gallery's folder, which `biocheck evaluate` replaces as a whole
    assert not cfg.metrics_path.is_relative_to(cfg.report_dir) and not cfg.paired_path.is_relative_to(cfg.report_dir)


def test_the_committed_metrics_fit_in_40_columns():
    """The quickstart's committed metrics (regenerated by `make quickstart`): `dvc metrics show` stays narrow."""
    files = shown(REPO)
    assert files, "dvc metrics show found no metrics in the repository"
    wide = {p: len(list(columns(d))) for p, d in files.items() if len(list(columns(d))) > MAX_HEADLINE_KEYS}
    assert wide == {}, f"metrics files wider than {MAX_HEADLINE_KEYS} columns (rerun `make quickstart`): {wide}"


def test_metrics_show_warns_about_nothing_after_a_quickstart():
    """The committed results are a quickstart's: no study ran, and no declared metrics file is missing (DVC would
    print "failed to load some metrics" above the table)."""
    assert not (REPO / "metrics" / "study.json").exists(), "a study's metrics are committed: this check needs none"
    r = subprocess.run([DVC, "metrics", "show"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr
    assert "failed to load" not in (r.stdout + r.stderr).lower(), r.stdout[:300] + r.stderr


def test_no_stale_file_in_metrics():
    """Every committed file under metrics/ is an output of a stage: an old file a stage no longer writes (say
    metrics/eval.json) would be read as current by whoever opens it."""
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    declared = []
    for body in spec["stages"].values():
        items = body["foreach"].values() if "foreach" in body else [{}]
        for item in items:
            stage_body = body.get("do", body)
            for kind in ("outs", "metrics", "plots"):
                for entry in stage_body.get(kind) or []:
                    path = next(iter(entry)) if isinstance(entry, dict) else entry
                    for field, value in item.items():
                        path = path.replace(f"${{item.{field}}}", str(value))
                    declared.append(path)
    stale = [p.relative_to(REPO).as_posix() for p in sorted((REPO / "metrics").rglob("*")) if p.is_file()
             and not any(p.relative_to(REPO).as_posix() == d or p.relative_to(REPO).is_relative_to(d) for d in declared)]
    assert stale == [], f"files under metrics/ that no stage writes (git rm them): {stale}"


# --- dvc plots show --------------------------------------------------------------------------------------

def test_no_plotted_csv_has_an_empty_cell(project):
    files = plot_files(project)
    names = {p.relative_to(project).as_posix() for p in files}
    assert {"metrics/eval_plots/confusion.csv", "metrics/eval_plots/scores.csv", "metrics/reward_curve.csv",
            "metrics/reward_curve_outcome_only.csv"} <= names
    assert {p: empty_cells(p) for p in files if empty_cells(p)} == {}
    with open(project / "metrics" / "reward_curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["curve"] for r in rows} == {"train", "validation"}
    assert [r["step"] for r in rows if r["curve"] == "validation"] == ["0", "10", "20"]  # only where it was measured


def test_the_committed_plot_files_have_no_empty_cell():
    files = [p for p in plot_files(REPO) if p.is_file()]
    assert {p: empty_cells(p)[:3] for p in files if empty_cells(p)} == {}, "rerun `make quickstart`"


def test_each_curve_is_drawn_once_and_the_confusion_matrices_are_few():
    spec = yaml.safe_load((REPO / "dvc.yaml").read_text())
    drawn = [f for p in plot_files(REPO) for f in [p.relative_to(REPO).as_posix()]]
    assert len(drawn) == len(set(drawn))
    stage_plots = [b for b in spec["stages"].values() if (b.get("do") or b).get("plots")]
    assert stage_plots == []  # every plot is a top-level definition: none drawn twice
    confusion = [d for d in spec["plots"] if "confusion" in json.dumps(d)]
    assert len(confusion) == 1 and compare.CONFUSION_SYSTEMS == ("eg_grpo", "outcome_only")


@pytest.fixture(scope="module")
def page(project) -> Path:
    dvc(project, "plots", "show", "-o", "plots_out")
    return project / "plots_out" / "index.html"


def test_dvc_plots_show_needs_no_network(page):
    import re

    html = page.read_text()
    scripts = re.findall(r"<script\b[^>]*>", html, flags=re.IGNORECASE)
    assert scripts and not [s for s in scripts if "src=" in s.lower()]  # every library inline, none fetched
    assert not re.search(r"""src\s*=\s*["']?(https?:)?//""", html, flags=re.IGNORECASE)
    assert html.count("vegaEmbed(") >= 5 and "{plot_divs}" not in html
    for title in ("Confusion matrices", "Accuracy per system and dataset", "Macro-F1 per system and dataset",
                  "EG-GRPO reward per step", "Outcome-only GRPO reward per step"):
        assert title in html
    assert '"curve": "validation"' in html and '"system": "outcome_only"' in html and '"actual": "NEI"' in html


def test_dvc_plots_show_draws_every_plot_offline(page):
    """Opened in Chromium with every network request refused: each plot renders (vega-embed adds its
    canvas or SVG), without a script error."""
    from tests.helpers.browser import chromium

    with chromium("the plots' browser test") as browser:
        ctx = browser.new_context()
        asked: list[str] = []
        ctx.route("**/*", lambda route: (asked.append(route.request.url), route.abort())
                  if not route.request.url.startswith("file:") else route.continue_())
        tab = ctx.new_page()
        errors: list[str] = []
        tab.on("pageerror", lambda e: errors.append(str(e)))
        tab.goto(page.as_uri())
        tab.wait_for_function("document.querySelectorAll('div[id] canvas, div[id] svg.marks').length >= 5",
                              timeout=30_000)
        drawn = tab.evaluate("document.querySelectorAll('div[id] canvas, div[id] svg.marks').length")
    assert drawn >= 5 and errors == [] and asked == []


# --- the headline folder ---------------------------------------------------------------------------------

def test_headline_files_are_replaced_as_a_whole_and_a_foreign_folder_is_refused(tmp_path):
    from biocheck.io import InputError

    row = {**compare.system_metrics(predictions("eg_grpo", "scifact"), 0, 0), "about": {}}
    dest = tmp_path / "metrics" / "eval"
    evaluation.write_headline({"eg_grpo": {"scifact": row}, "cer": {"scifact": row}}, dest)
    evaluation.write_headline({"eg_grpo": {"healthfc": row}}, dest)  # a narrower run: no stale row stays for DVC
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == ["healthfc/eg_grpo.json"]
    assert json.loads((dest / "healthfc" / "eg_grpo.json").read_text())["accuracy"] == row["accuracy"]
    other = tmp_path / "notes"
    (other / "x").mkdir(parents=True)
    (other / "x" / "todo.txt").write_text("mine")
    with pytest.raises(InputError, match=r"^evaluate.headline_dir .*notes: holds .*todo.txt, which biocheck "
                                         r"evaluate did not write"):
        evaluation.write_headline({"eg_grpo": {"scifact": row}}, other)
    assert (other / "x" / "todo.txt").read_text() == "mine" and not (other / "scifact").exists()
