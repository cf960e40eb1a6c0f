"""`biocheck report pr`: the pull-request evaluation comment, checked on a temporary git + DVC repo with two
commits whose evaluation metrics differ (the base) and the working tree (the pull request)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.evaluate.headline import headline_row
from biocheck.orchestration import pr_comment
from biocheck.orchestration.pr_comment import MARKER, cell
from tests.helpers.cli import one_error_line

runner = CliRunner()
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}


ABOUT = {"role": "held-out test", "evidence_corpus": "local index of the SciFact corpus", "caveat": None,
         "eqs_judge": "transformers:models/judge", "reward_judge": "transformers:models/judge",
         "eqs_by_training_judge": True}


def metrics(accuracy: float, macro_f1: float, eqs: float | None, ehr: float | None, n: int = 8) -> dict:
    """The headline keys of compare.system_metrics, plus nested ones as the stage writes them."""
    report = eqs is not None
    return {"n": n, "accuracy": accuracy, "macro_precision": 0.5, "macro_recall": 0.5, "macro_f1": macro_f1,
            "ci": {"accuracy": {"lo": accuracy - 0.1, "hi": accuracy + 0.1}}, "writes_report": report,
            "citing_rate": 0.5 if report else None, "ehr_micro": ehr, "rationale_f1": 0.2 if report else None,
            "eqs": eqs, "eqs_n": None if eqs is None else n, "ehr": ehr, "ehr_n": None if ehr is None else n,
            "about": ABOUT}


BASE = {
    "eg_grpo": {"scifact": metrics(0.5, 0.45, 0.6, 0.2), "healthfc": metrics(0.25, 0.2, 0.5, 0.1)},
    "cer": {"scifact": metrics(0.375, 0.3, None, None)},  # removed by the pull request
    "no_retrieval": {"scifact": metrics(0.25, 0.2, None, None)},
}
HEAD = {
    "eg_grpo": {"scifact": metrics(0.625, 0.4, 0.6, 0.25), "healthfc": metrics(0.25, 0.2, 0.5, 0.1)},
    "no_retrieval": {"scifact": metrics(0.25, 0.2, None, None)},
    "fire": {"scifact": metrics(0.125, 0.1, None, None)},  # added by the pull request
}


def paired(diff: float, p: float) -> dict:
    stat = {"reference": 0.625, "other": 0.625 - diff, "diff": diff, "mean": diff, "lo": diff - 0.25,
            "hi": diff + 0.25, "p": p, "mdd": 0.4}
    return {"reference": "eg_grpo", "n": 8, "only_reference": 0, "only_other": 0, "accuracy": stat,
            "macro_f1": {**stat, "diff": -0.05, "lo": -0.3, "hi": 0.2, "p": 0.8, "mdd": None},
            "ehr": {**stat, "diff": None}, "mcnemar": {"b": 4, "c": 1, "p": 0.375}}


PAIRED = {"scifact": {"no_retrieval": paired(0.375, 0.012), "fire": paired(0.5, 0.0004)}}
# Where the evaluate stage writes the files the comment reads (EvaluateConfig, through the comment's defaults).
_CFG = pr_comment.PrCommentConfig(base="main")
EVAL_JSON, PAIRED_JSON = _CFG.metrics_path.as_posix(), _CFG.paired_path.as_posix()
HEADLINE_DIR = _CFG.headline_dir.as_posix()  # DVC's metrics: one headline file per dataset and system
DVC_YAML = {"stages": {"evaluate": {"cmd": "true", "metrics": [{HEADLINE_DIR: {"cache": False}}],
                                    "outs": [{EVAL_JSON: {"cache": False}}, {PAIRED_JSON: {"cache": False}}]}}}
STATUS = {"evaluate": [{"changed deps": {"params.yaml": {"evaluate": "modified"},
                                         "src/biocheck/evaluate": "modified"}}, "changed command"],
          "train@eg_grpo": [{"changed outs": {"models/checkpoints": "deleted"}}]}


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, env={**os.environ, **GIT_ENV}, capture_output=True, text=True,
                          check=True).stdout


def write_eval(root: Path, eval_json: dict, paired_json: dict) -> None:
    files = {EVAL_JSON: eval_json, PAIRED_JSON: paired_json}
    files |= {f"{HEADLINE_DIR}/{dataset}/{system}.json": headline_row(m)  # as the evaluate stage writes them
              for system, by_dataset in eval_json.items() for dataset, m in by_dataset.items()}
    shutil.rmtree(root / HEADLINE_DIR, ignore_errors=True)
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(json.dumps(data, indent=2))


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """Commit 1: a DVC project without evaluation; commit 2 (HEAD): the base's metrics; working tree: the PR's."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".dvc").mkdir()  # what `dvc init` writes, without a DVC start
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n")
    (root / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    (root / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "no evaluation yet")
    write_eval(root, BASE, {"scifact": {"no_retrieval": paired(0.25, 0.2)}})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base evaluation")
    write_eval(root, HEAD, PAIRED)
    monkeypatch.chdir(root)
    return root


def table_rows(md: str) -> dict[tuple[str, str], list[str]]:
    """The metric table: {(system, dataset): [n, accuracy, macro-F1, EQS, EHR, vs base]} (the columns this test
    reads, picked by header; citing rate must sit beside EHR so that abstention is visible)."""
    section = md.split("### Metrics per system and dataset", 1)[1].split("###", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]
    header = rows[0]
    assert header[:2] == ["system", "dataset"] and header[-1] == "vs base", header
    assert {"citing rate", "micro-EHR", "rationale F1"} <= set(header)
    assert header.index("citing rate") + 1 == header.index("EHR (citing)")
    cols = [header.index(h) for h in ("n", "accuracy", "macro-F1", "EQS", "EHR (citing)", "vs base")]
    return {(r[0], r[1]): [r[i] for i in cols] for r in rows[1:]}


def test_the_comment_compares_the_pull_request_with_the_base(repo, tmp_path):
    status = tmp_path / "status.json"
    status.write_text(json.dumps(STATUS))
    out = tmp_path / "out" / "comment.md"
    url = "https://github.com/o/r/actions/runs/1/artifacts/2"
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--status", str(status), "--artifact-url", url,
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = out.read_text()
    assert md.splitlines()[0] == MARKER
    assert f"]({url})" in md

    rows = table_rows(md)
    assert list(rows) == [("eg_grpo", "scifact"), ("eg_grpo", "healthfc"), ("no_retrieval", "scifact"),
                          ("fire", "scifact"), ("cer", "scifact")]  # one per system and dataset, removed last
    acc, f1, eqs, ehr = rows[("eg_grpo", "scifact")][1:5]
    assert acc == "0.625 (+0.125)" and f1 == "0.400 (−0.050)" and ehr == "0.250 (+0.050)"
    assert eqs == "0.600 (unchanged)" and rows[("eg_grpo", "scifact")][-1] == "changed"
    assert rows[("eg_grpo", "healthfc")][-1] == "unchanged"
    assert all("(unchanged)" in c for c in rows[("eg_grpo", "healthfc")][:5])
    assert rows[("no_retrieval", "scifact")][3:6] == ["n/a", "n/a", "unchanged"]  # label-only: no EQS / EHR
    assert rows[("fire", "scifact")] == ["8", "0.125", "0.100", "n/a", "n/a", "new"]
    assert rows[("cer", "scifact")][1] == "~~0.375~~" and rows[("cer", "scifact")][-1] == "removed"

    paired_section = md.split("### Paired tests", 1)[1].split("###", 1)[0]
    fire = [[c.strip() for c in line.strip("|").split("|")] for line in paired_section.splitlines()
            if "eg_grpo vs fire" in line]
    # accuracy's p is McNemar's exact one (4 / 1 discordant claims: 0.375), not the bootstrap's 0.0004
    assert fire[0] == ["scifact", "eg_grpo vs fire", "8", "accuracy", "+0.500 [0.250, 0.750]", "0.375 (McNemar 4 / 1)",
                       "0.400"]
    assert fire[1] == ["scifact", "eg_grpo vs fire", "8", "macro-F1", "−0.050 [−0.300, 0.200]", "0.800", "n/a"]
    assert len(fire) == 2  # EHR has no difference to show (a label-only system): no row
    assert "| scifact | eg_grpo vs no_retrieval | 8 | accuracy | +0.375 [0.125, 0.625] | 0.375 (McNemar 4 / 1) |" \
        in paired_section
    notes = md.split("### What the numbers can mean", 1)[1].split("###", 1)[0]
    assert "searched in: local index of the SciFact corpus" in notes and "EQS scored by the training judge" in notes

    stages = md.split("### Stages that were out of date", 1)[1].split("<details>", 1)[0]
    assert "- **evaluate**: deps: `params.yaml`: `evaluate` (modified), `src/biocheck/evaluate` (modified); " \
           "changed command" in stages
    assert "- **train@eg_grpo**: outs: `models/checkpoints` (deleted)" in stages

    # dvc's own table, collapsed: the changed metrics only, base (main) against the working tree
    details = md.split("<details>", 1)[1]
    assert details.rstrip().endswith("</details>")
    assert re.search(re.escape(f"{HEADLINE_DIR}/scifact/eg_grpo.json") + r"\s+\| accuracy\s+\| 0\.5\s+\| 0\.625\s+\| 0\.125", details)
    assert "healthfc/eg_grpo.json" not in details


def test_stdout_and_status_cases(repo, tmp_path):
    r = runner.invoke(app, ["report", "pr", "--base", "HEAD"])  # HEAD: the base commit; no --status
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(MARKER + "\n") and "Not provided" in r.stdout and "download the artifact" not in r.stdout
    clean = tmp_path / "clean.json"
    clean.write_text("{}\n")  # what `dvc status --json` prints when nothing changed
    r = runner.invoke(app, ["report", "pr", "--base", "HEAD", "--status", str(clean)])
    assert "Everything was up to date: no stage reran." in r.stdout
    r = runner.invoke(app, ["report", "pr", "--base", "HEAD", "--status", str(tmp_path / "absent.json")])
    assert r.exit_code == 0 and "could not be read" in r.stdout


def test_a_base_ref_that_does_not_exist(repo, tmp_path):
    out = tmp_path / "comment.md"
    r = runner.invoke(app, ["report", "pr", "--base", "origin/nope", "--out", str(out)])
    line = one_error_line(r, "base ref 'origin/nope' does not exist", "git fetch", str(out))
    assert "Traceback" not in r.output and line.count("error") == 1
    md = out.read_text()  # still written, and it says what is missing
    assert md.startswith(MARKER) and "**Missing:** base ref 'origin/nope' does not exist" in md
    assert table_rows(md)[("eg_grpo", "scifact")] == ["8", "0.625", "0.400", "0.600", "0.250", "no base"]
    assert "dvc metrics diff</code>" in md and "Not run: the base ref is not available." in md


def test_no_metrics_at_the_base(repo, tmp_path):
    out = tmp_path / "comment.md"
    r = runner.invoke(app, ["report", "pr", "--base", "HEAD~1", "--out", str(out)])
    one_error_line(r, f"no {EVAL_JSON} at HEAD~1")
    md = out.read_text()
    assert f"**Missing:** no {EVAL_JSON} at HEAD~1" in md
    assert {row[-1] for row in table_rows(md).values()} == {"no base"}


def test_no_metrics_in_the_working_tree(repo, tmp_path):
    (repo / EVAL_JSON).unlink()
    (repo / PAIRED_JSON).unlink()
    out = tmp_path / "comment.md"
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--out", str(out)])
    one_error_line(r, f"no {EVAL_JSON} in the working tree", "dvc repro evaluate")
    md = out.read_text()
    assert md.startswith(MARKER) and f"**Missing:** no {EVAL_JSON} in the working tree" in md
    assert {row[-1] for row in table_rows(md).values()} == {"removed"}
    assert f"Not available: no {PAIRED_JSON} in the working tree" in md


def test_dvc_failing_is_said_in_the_comment(repo, tmp_path):
    (repo / ".dvc" / "config").write_text("[core]\n    no_such_option = 1\n")  # DVC refuses to start
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    assert r.exit_code == 0, r.output  # the comparison is complete; only dvc's own table is missing
    assert re.search(r"`dvc metrics diff` failed \(exit \d+\): .*no_such_option", r.stdout)


@pytest.mark.parametrize(("new", "old", "shown"), [
    (0.625, 0.5, "0.625 (+0.125)"), (0.45, 0.5, "0.450 (−0.050)"), (0.5, 0.5, "0.500 (unchanged)"),
    (0.5001, 0.5, "0.500 (+<0.001)"), (None, 0.3, "n/a (was 0.300)"), (0.3, None, "0.300 (was n/a)"),
    (None, None, "n/a"), (True, 0.5, "n/a (was 0.500)"),
])
def test_a_cell_shows_the_new_value_and_the_signed_change(new, old, shown):
    assert cell(new, old) == shown


def test_a_long_dvc_table_is_cut_to_fit_a_comment(repo, monkeypatch):
    monkeypatch.setattr(pr_comment, "MAX_CHARS", 3_000)  # GitHub's limit is 65,536 characters
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    assert r.exit_code == 0, r.output
    assert len(r.stdout) < 3_000 and re.search(r"… \d+ more rows: run `dvc metrics diff BASE --md` locally", r.stdout)
    assert r.stdout.rstrip().endswith("</details>")


@pytest.mark.parametrize("cmd", [["report"], ["report", "pr"]])
def test_the_command_explains_itself(cmd):
    r = runner.invoke(app, [*cmd, "--help"], prog_name="biocheck")
    assert r.exit_code == 0 and "Usage: biocheck report" in r.output, r.output
    assert "pull-request" in r.output.split("Options:")[0]


# --- a failed pipeline, no DVC remote, timing rows ------------------------------------------------------

def repro_log(n_before: int = 60) -> str:
    """What `dvc repro evaluate` prints when its `evaluate` stage fails (DVC 3's own wording)."""
    lines = ["Stage 'prepare' didn't change, skipping", "Running stage 'evaluate':", "> biocheck evaluate"]
    lines += [f"progress line {i}" for i in range(n_before)]
    lines += ["error: the model failed: https://user:hunter2secret@example.org/v1 refused the connection",
              "ERROR: failed to reproduce 'evaluate': failed to run: biocheck evaluate, exited with 1"]
    return "\n".join(lines) + "\n"


def test_a_failed_pipeline_gets_a_comment_naming_the_stage_and_the_log_tail(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("DVC_REMOTE_URL", "https://user:hunter2secret@example.org/v1")  # the secret to blank
    log = tmp_path / "repro.log"
    log.write_text(repro_log())
    out = tmp_path / "comment.md"
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--repro-outcome", "failure", "--repro-log", str(log),
                            "--out", str(out)])
    assert r.exit_code == 0, r.output  # the comment is complete: it is a failure report
    md = out.read_text()
    assert md.splitlines()[0] == MARKER
    failed = md.split("### The pipeline failed", 1)[1].split("###", 1)[0]
    assert "`dvc repro` failed in stage **evaluate**" in failed
    assert "the model failed" in failed.split("```", 1)[0]  # the stage's own error line, above the log
    tail = failed.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert len(tail) == pr_comment.LOG_TAIL_LINES
    assert tail[-1].startswith("ERROR: failed to reproduce 'evaluate'")
    assert "progress line 59" in tail and "progress line 10" not in tail and "Running stage" not in tail
    assert "hunter2secret" not in md
    # this branch's committed metrics are not this run's: no comparison table is shown as if they were
    assert "### Metrics per system and dataset" not in md and "0.625" not in md
    assert "not this run's" in md


def test_the_stage_is_found_without_dvcs_error_line_and_a_missing_log_is_said(repo, tmp_path):
    log = tmp_path / "repro.log"
    log.write_text("Running stage 'prepare':\n> biocheck data prepare\nRunning stage 'train@eg_grpo':\nKilled\n")
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--repro-outcome", "failure", "--repro-log", str(log)])
    assert "failed in stage **train@eg_grpo**" in r.stdout and "Killed" in r.stdout
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--repro-outcome", "failure",
                            "--repro-log", str(tmp_path / "absent.log")])
    assert "### The pipeline failed" in r.stdout and "no log" in r.stdout.split("### The pipeline failed", 1)[1]


def test_a_successful_run_has_no_failure_section(repo, tmp_path):
    log = tmp_path / "repro.log"
    log.write_text("Running stage 'evaluate':\nUpdating lock file 'dvc.lock'\n")
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--repro-outcome", "success", "--repro-log", str(log)])
    assert r.exit_code == 0 and "The pipeline failed" not in r.stdout and "### Metrics per system" in r.stdout


FRESH = {  # `dvc status --json` on a fresh clone with nothing pulled: every output is missing
    "prepare": [{"changed outs": {"data/prepared": "deleted"}}],
    "train@eg_grpo": [{"changed deps": {"models/sft": "deleted"}}, {"changed outs": {"models/checkpoints": "deleted"}}],
    "evaluate": [{"changed deps": {"models/selected": "deleted", "params.yaml": {"evaluate.limit": "modified"}}},
                 {"changed outs": {"eval/predictions": "deleted"}}],
}


def test_without_a_remote_the_status_says_so_instead_of_listing_deletions(repo, tmp_path):
    status = tmp_path / "status.json"
    status.write_text(json.dumps(FRESH))
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--status", str(status), "--remote", "none"])
    assert r.exit_code == 0, r.output
    stages = r.stdout.split("### Stages that were out of date", 1)[1].split("<details>", 1)[0]
    assert "No DVC remote: everything was recomputed." in stages
    assert "deleted" not in stages and "**prepare**" not in stages  # nothing but missing files: not listed
    assert "- **evaluate**: deps: `params.yaml`: `evaluate.limit` (modified)" in stages  # what the PR changed stays


def test_a_remote_that_lacked_some_stages_lists_them_on_one_line(repo, tmp_path):
    status = tmp_path / "status.json"
    status.write_text(json.dumps(FRESH))
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--status", str(status), "--remote", "pulled"])
    stages = r.stdout.split("### Stages that were out of date", 1)[1].split("<details>", 1)[0]
    assert "Not in the DVC remote (recomputed): prepare, train@eg_grpo." in stages
    assert "deleted" not in stages and "- **evaluate**: deps: `params.yaml`" in stages


def test_the_dvc_table_leaves_out_timing_rows(repo, tmp_path):
    headline = repo / HEADLINE_DIR / "scifact" / "eg_grpo.json"
    row = json.loads(headline.read_text())
    headline.write_text(json.dumps({**row, "seconds_total": 99.5, "seconds_mean": 12.25}))  # new: dvc lists them
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    details = r.stdout.split("<details>", 1)[1]
    assert "| accuracy " in details and "seconds" not in details


@pytest.mark.parametrize(("option", "value"), [("--repro-outcome", "failed"), ("--remote", "s3")])
def test_the_choices_are_checked(repo, option, value):
    r = runner.invoke(app, ["report", "pr", "--base", "main", option, value])
    assert r.exit_code == 2 and "Invalid value" in r.output


def test_a_base_from_before_the_metrics_moved_still_compares(repo, tmp_path):
    """The full metrics moved from metrics/eval.json to reports/ (issue 31): the first pull request after the move
    compares against the base's metrics/eval.json."""
    assert pr_comment.OLD_METRICS_PATH.as_posix() != EVAL_JSON
    git(repo, "checkout", "-q", "-f", "-b", "old-base", "HEAD~1")
    old = repo / pr_comment.OLD_METRICS_PATH
    old.parent.mkdir(parents=True, exist_ok=True)
    old.write_text(json.dumps(BASE))
    git(repo, "add", pr_comment.OLD_METRICS_PATH.as_posix())
    git(repo, "commit", "-q", "-m", "an evaluation committed before the move")
    git(repo, "checkout", "-q", "-f", "main")
    write_eval(repo, HEAD, PAIRED)
    out = tmp_path / "comment.md"
    r = runner.invoke(app, ["report", "pr", "--base", "old-base", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = table_rows(out.read_text())
    assert rows[("eg_grpo", "scifact")][-1] != "no base"


# --- what a few claims can say (issue 49, item 7) ------------------------------------------------------

def flipped(n: int, report: bool = False) -> dict:
    """paired_tests itself on n claims that both flip from wrong (no_retrieval) to right (eg_grpo); with
    `report`, eg_grpo cites on every claim and no_retrieval on none."""
    from biocheck.evaluate.compare import paired_tests
    from biocheck.evaluate.systems.base import Prediction
    from biocheck.labels import Label

    def preds(system: str, right: bool) -> list[Prediction]:
        gold = [Label.SUPPORTED, Label.REFUTED] * n
        return [Prediction(id=f"c{i}", dataset="scifact", system=system, fingerprint="fp", gold=gold[i],
                           pred=gold[i] if right else gold[i + 1], writes_report=report,
                           **({"parseable": True, "cited": int(right), "hallucinated": 0} if report else {}))
                for i in range(n)]

    return {"scifact": paired_tests({"eg_grpo": preds("eg_grpo", True), "no_retrieval": preds("no_retrieval", False)},
                                    n_resamples=1000)}


def paired_rows(md: str) -> dict[str, list[str]]:
    """The paired table's rows by metric: [n, Δ, p, MDD]."""
    section = md.split("### Paired tests", 1)[1].split("###", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| scifact |")]
    return {r[3]: [r[2], *r[4:]] for r in rows}


def test_two_flipped_claims_give_mcnemars_half_and_nothing_bold(repo):
    """2 claims, both wrong -> right: b = 2, c = 0, and the exact two-sided p is 2 x 0.5^2 = 0.5 (the bootstrap
    said 0.002, which the comment used to print bold)."""
    paired = flipped(2)
    assert paired["scifact"]["no_retrieval"]["accuracy"]["p"] < 0.01  # the bootstrap's p, which overstates
    write_eval(repo, {"eg_grpo": {"scifact": metrics(1.0, 1.0, None, None, n=2)},
                      "no_retrieval": {"scifact": metrics(0.0, 0.0, None, None, n=2)}}, paired)
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    assert r.exit_code == 0, r.output
    rows = paired_rows(r.stdout)
    assert rows["accuracy"] == ["2", "+1.000 (no interval: every resample the same)", "0.500 (McNemar 2 / 0)", "n/a"]
    assert rows["macro-F1"][0] == "2" and rows["macro-F1"][2] == "≥0.500"  # a bootstrap p raised to what 2 claims allow
    table = r.stdout.split("### Paired tests", 1)[1].split("###", 1)[0].split("\n\n", 1)[1]
    assert "**" not in table and "<0.001" not in table  # no significance that 2 claims cannot reach


def test_enough_discordant_claims_reach_significance(repo):
    """8 claims, all flipped: McNemar 8 / 0, p = 2 x 0.5^8 = 0.0078125, below 0.05 and marked; the same for
    the citing rate (eg_grpo cites on all 8, no_retrieval on none)."""
    write_eval(repo, {"eg_grpo": {"scifact": metrics(1.0, 1.0, 0.5, 0.0)},
                      "no_retrieval": {"scifact": metrics(0.0, 0.0, None, None)}}, flipped(8, report=True))
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    rows = paired_rows(r.stdout)
    assert rows["accuracy"][2] == "**0.008** (McNemar 8 / 0)"
    assert rows["citing rate"][2] == "**0.008** (McNemar 8 / 0)"


def test_a_mcnemar_p_is_floored_by_its_own_discordant_claims(repo):
    """The floor of a McNemar p is 2 x 0.5^(b + c), its own discordant claims, not the comparison's n: 2 / 0 of 20
    claims can give no p below 0.5 (a file claiming 0.001, e.g. from an asymptotic test, is raised), 3 / 1 none
    below 2 x 0.5^4 = 0.125, and a p above its floor is shown as it is."""
    t = paired(0.1, 0.3)
    t.update(n=20, mcnemar_by_metric={"accuracy": {"b": 2, "c": 0, "p": 0.001},
                                      "citing_rate": {"b": 3, "c": 1, "p": 0.01},
                                      "grounded_rate": {"b": 1, "c": 1, "p": 1.0}})
    t["citing_rate"] = t["grounded_rate"] = t["accuracy"]
    write_eval(repo, HEAD, {"scifact": {"no_retrieval": t}})
    rows = paired_rows(runner.invoke(app, ["report", "pr", "--base", "main"]).stdout)
    assert rows["accuracy"][0] == "20"
    assert rows["accuracy"][2] == "≥0.500 (McNemar 2 / 0)"
    assert rows["citing rate"][2] == "≥0.125 (McNemar 3 / 1)"
    assert rows["grounded rate"][2] == "1.000 (McNemar 1 / 1)"


def test_a_bootstrap_p_is_floored_by_the_claims_its_metric_counts(repo):
    """EHR counts only the claims where a system cites: its bootstrap p over 2 such claims of 20 is shown no lower
    than 2 x 0.5^2 = 0.5 (with the comparison's 20 it would print a bold <0.001), over 3 claims no lower than 0.25;
    an evaluation from before the metrics carried their own n falls back to the comparison's."""
    t = paired(0.1, 0.3)
    t.update(n=20, ehr={**t["accuracy"], "diff": -0.5, "p": 0.0004, "n": 2},
             ehr_micro={**t["accuracy"], "diff": -0.5, "p": 0.002, "n": 3},
             eqs={**t["accuracy"], "diff": 0.2, "p": 0.0004})  # no own n: the comparison's 20
    write_eval(repo, HEAD, {"scifact": {"no_retrieval": t}})
    rows = paired_rows(runner.invoke(app, ["report", "pr", "--base", "main"]).stdout)
    assert rows["EHR (citing reports)"][2] == "≥0.500"
    assert rows["micro-EHR"][2] == "≥0.250"
    assert rows["EQS"][2] == "**<0.001**"  # 2 x 0.5^20: 20 claims can reach it


def test_paired_tests_give_each_metric_the_claims_it_counts():
    """10 claims; the reference cites on claims 0 and 1, the other on 1 and 2: EHR's paired test has 3 claims (those
    where either cites), the proportions all 10, macro-F1 the claims with gold in its label set (all 10 here)."""
    from biocheck.evaluate.compare import paired_tests
    from biocheck.evaluate.systems.base import Prediction
    from biocheck.labels import Label

    def preds(system: str, citing: set[int], ehr: float) -> list[Prediction]:
        return [Prediction(id=f"c{i}", dataset="scifact", system=system, fingerprint="fp", gold=Label.SUPPORTED,
                           pred=Label.SUPPORTED if i % 2 else Label.REFUTED, writes_report=True, parseable=True,
                           cited=int(i in citing), hallucinated=int(i in citing and ehr > 0),
                           ehr=ehr if i in citing else None) for i in range(10)]

    t = paired_tests({"eg_grpo": preds("eg_grpo", {0, 1}, 0.0), "other": preds("other", {1, 2}, 1.0)})["other"]
    assert t["n"] == 10
    assert (t["ehr"]["n"], t["ehr_micro"]["n"]) == (3, 3)
    assert t["accuracy"]["n"] == t["citing_rate"]["n"] == t["macro_f1"]["n"] == 10
    assert t["ehr"]["diff"] == -1.0 and t["mcnemar_by_metric"]["citing_rate"] == {"b": 1, "c": 1, "p": 1.0}


def test_each_metric_counted_over_fewer_claims_shows_its_n(repo):
    m = {**metrics(0.5, 0.5, 0.75, 0.0), "ehr_n": 1, "eqs_n": 3}  # EHR of 1 citing report, EQS of 3 judged, of 8
    write_eval(repo, {"eg_grpo": {"scifact": m}}, {})
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    n, acc, _, eqs, ehr, _ = table_rows(r.stdout)[("eg_grpo", "scifact")]
    assert (n, acc, ehr, eqs) == ("8 (unchanged)", "0.500 (unchanged)", "0.000 (−0.200), n=1", "0.750 (+0.150), n=3")


@pytest.mark.parametrize(("profile", "caveat"), [("quickstart", True), ("smol", False), (None, False)])
def test_the_quickstart_says_its_scores_are_not_meaningful(repo, profile, caveat):
    line = ("> **quickstart profile: a tiny model on a few claims; these scores prove the pipeline runs, they are "
            "not meaningful.**")
    if profile:
        (repo / "params.yaml").write_text(f"profile: {profile}\nevaluate:\n  limit: 4\n")
    r = runner.invoke(app, ["report", "pr", "--base", "main"])
    assert r.exit_code == 0, r.output
    assert (line in r.stdout.splitlines()) is caveat


@pytest.mark.parametrize("last", ["> @everyone look here", "error: see [this](https://example.org) @maintainers",
                                  "`@everyone` in ticks ``", "<img src=x> @everyone"])
def test_the_failing_logs_last_line_is_quoted_as_code_never_as_markdown(repo, tmp_path, last):
    """The reason above the log was quoted as Markdown: `> @everyone` as a log's last line reached the PR as a
    mention (GitHub makes no mention, link or tag inside code)."""
    log = tmp_path / "repro.log"
    log.write_text(f"Running stage 'evaluate':\n> biocheck evaluate\n{last}\n")
    r = runner.invoke(app, ["report", "pr", "--base", "main", "--repro-outcome", "failure", "--repro-log", str(log)])
    assert r.exit_code == 0, r.output
    failed = r.stdout.split("### The pipeline failed", 1)[1].split("The last", 1)[0]
    quoted = [line for line in failed.splitlines() if line.startswith(">")]
    assert len(quoted) == 1, failed
    span = quoted[0].removeprefix("> ")
    ticks = re.match(r"`+", span)
    assert ticks and span.endswith(ticks.group()) and last.removeprefix("error: ") in span  # in one code span
    assert ticks.group() not in span[len(ticks.group()):-len(ticks.group())]  # the span is not closed early
