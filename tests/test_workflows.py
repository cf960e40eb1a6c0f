"""Every GitHub workflow is valid against GitHub's workflow schema and has zero zizmor findings (offline).

Both checkers install from PyPI wheels (the dev extra) and run without network. The checks are run once on a
deliberately bad workflow too, so a checker that silently accepted everything would fail here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

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
