"""Every GitHub workflow is valid against GitHub's workflow schema and has zero zizmor findings (offline).

Both checkers install from PyPI wheels (the dev extra) and run without network. The checks are run once on a
deliberately bad workflow too, so a checker that silently accepted everything would fail here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import REPO

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: it is in the dev extra (make setup)")
    return path


def schema_errors(workflow: Path) -> str:
    """check-jsonschema's complaint about `workflow` ('' when it is a valid GitHub workflow)."""
    r = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
                       capture_output=True, text=True, timeout=120)
    return "" if r.returncode == 0 else (r.stdout + r.stderr).strip()


def zizmor_findings(path: Path) -> list[str]:
    """zizmor's findings (offline audits) for a workflow file or folder, one line each."""
    r = subprocess.run([_tool("zizmor"), "--offline", "--format", "json", str(path)],
                       capture_output=True, text=True, timeout=120)
    findings = json.loads(r.stdout or "[]")
    return [f"{f['ident']} ({f['determinations']['severity']}): {f['desc']}" for f in findings]


def test_there_are_workflows():
    assert [p.name for p in WORKFLOWS] and (REPO / ".github" / "workflows" / "ci.yml") in WORKFLOWS


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_each_workflow_is_valid_and_has_no_zizmor_findings(workflow):
    assert schema_errors(workflow) == ""
    assert zizmor_findings(workflow) == []


BAD = """\
name: bad
on: [push]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.head_commit.message }}"
"""


def test_the_checks_catch_a_bad_workflow(tmp_path):
    """Unpinned action, default permissions, persisted credentials, an injectable expression; a typo'd key."""
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(BAD)
    found = " ".join(zizmor_findings(bad))
    for ident in ("unpinned-uses", "excessive-permissions", "artipacked", "template-injection"):
        assert ident in found, found
    bad.write_text(BAD.replace("runs-on:", "runs_on:"))
    assert "runs_on" in schema_errors(bad) or "runs-on" in schema_errors(bad)


# --- the pull-request workflow: a comment also when the pipeline fails -----------------------------------

PR_EVAL = REPO / ".github" / "workflows" / "pr-eval.yml"


def steps_of(workflow: Path) -> list[dict]:
    return yaml.safe_load(workflow.read_text())["jobs"]["evaluate"]["steps"]


def step(steps: list[dict], step_id: str) -> dict:
    found = [s for s in steps if s.get("id") == step_id]
    assert len(found) == 1, f"no step with id {step_id!r}"
    return found[0]


def step_env(s: dict, values: dict[str, str]) -> dict[str, str]:
    """The step's `env:` with each `${{ expression }}` replaced from `values` (an unknown one fails the test)."""
    out = {}
    for name, value in s.get("env", {}).items():
        expr = str(value).removeprefix("${{").removesuffix("}}").strip()
        assert expr in values, f"{name}: {value} is not simulated here"
        out[name] = values[expr]
    return out


def run_step(s: dict, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """A `run:` step as GitHub runs one without `shell:` on Linux: `bash -e {0}`."""
    script = cwd / "step.sh"
    script.write_text(s["run"])
    return subprocess.run(["bash", "-e", str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


SECRET_URL = "https://ci:hunter2secret@dvc.example.org/store"
FAKE_DVC = f"""#!/bin/sh
echo "Stage 'prepare' didn't change, skipping"
echo "Running stage 'evaluate':"
echo "> biocheck evaluate"
for i in $(seq 1 80); do echo "claim $i of 80"; done
echo "error: the model failed: {SECRET_URL} refused the connection" >&2
echo "ERROR: failed to reproduce 'evaluate': failed to run: biocheck evaluate, exited with 1" >&2
exit 1
"""


def test_a_failed_repro_gets_a_comment_naming_the_stage_with_the_log_tail(tmp_path):
    """The workflow's own `dvc repro` and `biocheck report pr` steps, run with a dvc that fails in `evaluate`."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "dvc").write_text(FAKE_DVC)
    (fake_bin / "dvc").chmod(0o755)
    runner_temp = tmp_path / "runner_temp"
    runner_temp.mkdir()
    (runner_temp / "status.json").write_text(json.dumps({"evaluate": [{"changed outs": {"eval": "deleted"}}]}))
    base_env = {**os.environ, "RUNNER_TEMP": str(runner_temp),
                "PATH": os.pathsep.join([str(fake_bin), str(BIN), os.environ["PATH"]])}
    steps = steps_of(PR_EVAL)

    repro = run_step(step(steps, "repro"), base_env, tmp_path)
    assert repro.returncode != 0, "the repro step must fail when dvc does"
    assert "failed to reproduce 'evaluate'" in (runner_temp / "repro.log").read_text()

    values = {"github.base_ref": "main", "steps.gallery.outputs.artifact-url": "", "steps.repro.outcome": "failure",
              "steps.pull.outputs.remote": "none", "secrets.DVC_REMOTE_URL": SECRET_URL}
    report = step(steps, "report")
    r = run_step(report, {**base_env, **step_env(report, values)}, tmp_path)
    assert r.returncode == 0, r.stderr
    md = (runner_temp / "comment.md").read_text()
    assert md.startswith("<!-- biocheck-pr-eval -->\n")
    assert "`dvc repro` failed in stage **evaluate**" in md, md
    # the failing line is quoted as code (issue 50: never as Markdown that mentions or links)
    assert any(line.startswith("> `") and "the model failed" in line for line in md.splitlines()), md
    tail = md.split("```text\n", 1)[1].split("\n```", 1)[0].splitlines()
    assert tail[-1] == "ERROR: failed to reproduce 'evaluate': failed to run: biocheck evaluate, exited with 1"
    assert "claim 80 of 80" in tail and "claim 1 of 80" not in tail and len(tail) == 40
    assert "hunter2secret" not in md and "***" in md
    assert "No DVC remote: everything was recomputed." in md and "deleted" not in md


def test_the_comment_steps_run_when_the_pipeline_failed():
    steps = steps_of(PR_EVAL)
    after = steps[steps.index(step(steps, "repro")) + 1:]
    comment_steps = [s for s in after if s.get("id") != "gallery"]
    assert [s.get("name") for s in comment_steps] == ["biocheck report pr", "upload the comment",
                                                       "no comment on a fork's pull request",
                                                       "post or update the comment"]
    for s in comment_steps:  # not always(): a run cancelled by a newer push must not post over its comment
        assert "!cancelled()" in s["if"] and "always()" not in s["if"], s["name"]
        assert "steps.setup.outcome == 'success'" in s["if"], s["name"]  # biocheck is installed
    assert step(steps, "gallery")["if"] == "steps.repro.outcome == 'success'"
    report = step(steps, "report")
    assert report.get("continue-on-error") is True
    assert "--repro-outcome" in report["run"] and "--repro-log" in report["run"] and "--remote" in report["run"]
    # a hung pipeline fails its step before the job times out (a cancelled job skips every comment step)
    job = yaml.safe_load(PR_EVAL.read_text())["jobs"]["evaluate"]
    assert step(steps, "repro")["timeout-minutes"] < job["timeout-minutes"]


def test_docs_only_pull_requests_skip_the_evaluation_but_not_ci():
    on = yaml.safe_load(PR_EVAL.read_text())[True]  # YAML 1.1 reads the key `on` as True
    ignored = on["pull_request"]["paths-ignore"]
    assert "docs/**" in ignored and "*.md" in ignored
    # the prompts are Markdown stage inputs: a pattern reaching into src/ would skip their changes
    assert not any(p.startswith("**") or p.startswith("src") for p in ignored)
    ci_on = yaml.safe_load((REPO / ".github" / "workflows" / "ci.yml").read_text())[True]
    assert all("paths" not in str(v) for v in ci_on.values() if v)


USES = re.compile(r"uses:\s*([\w.-]+/[\w.-]+)(?:/[\w./-]+)?@([0-9a-f]{40})\s+#\s*v(\d+)\.\d+\.\d+\s*$")
NODE24 = {"actions/checkout": 5, "actions/setup-python": 6, "actions/cache": 5, "actions/upload-artifact": 6}


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_node24_releases(workflow):
    lines = [line for line in workflow.read_text().splitlines() if re.search(r"^\s*(-\s*)?uses:", line)]
    assert lines
    for line in lines:
        m = USES.search(line)
        assert m, f"not pinned by commit with its tag in a comment: {line.strip()}"
        action, _, major = m.groups()
        assert int(major) >= NODE24[action], f"{action} v{major} runs on Node 20: {line.strip()}"


def test_one_commit_per_action_across_workflows():
    pins: dict[str, set[str]] = {}
    for workflow in WORKFLOWS:
        for m in filter(None, map(USES.search, workflow.read_text().splitlines())):
            pins.setdefault(m.group(1), set()).add(m.group(2))  # actions/cache/restore and /save: one commit
    assert pins and all(len(shas) == 1 for shas in pins.values()), pins


# --- the venv cache: `make setup` keys on content, as the cache key does ---------------------------------

def _makefile_with_fake_install(tmp_path: Path) -> Path:
    """The project's Makefile with the install recipe replaced by a marker line (nothing is installed)."""
    out, skip = [], False
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("$(VENV)/.installed:"):
            out += [line, "\t@echo INSTALLED; touch $@"]
            skip = True
            continue
        if skip and not line.strip():
            skip = False
        if not skip:
            out.append(line)
    (tmp_path / "Makefile").write_text("\n".join(out) + "\n")
    return tmp_path


@pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")
def test_setup_reinstalls_on_changed_content_not_on_new_dates(tmp_path):
    root = _makefile_with_fake_install(tmp_path)
    (root / "requirements").mkdir()
    for name in ("requirements/cpu.txt", "requirements/pip.txt", "pyproject.toml"):
        (root / name).write_text(f"{name}\n")

    def setup() -> bool:
        r = subprocess.run(["make", "-s", "setup", f"PYTHON={sys.executable}"], cwd=root, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return "INSTALLED" in r.stdout

    assert setup() is True  # a new venv
    assert setup() is False
    for name in ("requirements/cpu.txt", "requirements/pip.txt", "pyproject.toml"):
        os.utime(root / name)  # what a fresh checkout or a restored cache does: new dates, same content
    assert setup() is False
    (root / "pyproject.toml").write_text("changed\n")
    assert setup() is True
    assert setup() is False


def test_the_venv_cache_key_hashes_what_make_setup_hashes():
    key = step(steps_of(PR_EVAL), "venv")["with"]["key"]
    hashed = set(re.findall(r"'([^']+)'", key.split("hashFiles(", 1)[1]))
    inputs = re.search(r"^SETUP_INPUTS := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1).split()
    assert hashed == {"requirements/cpu.txt" if i == "$(LOCK)" else i for i in inputs}
