"""The package's layers (pyproject.toml, [tool.importlinter]) hold: `lint-imports` passes on the package, and
fails, naming the import, when a module imports upward or two sub-packages import each other."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def lint(src: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([str(LINT), "--config", str(REPO / "pyproject.toml"), "--no-cache"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_package_keeps_its_layers_and_has_no_cycles():
    r = lint(REPO / "src")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 kept, 0 broken" in r.stdout, r.stdout


def _copy(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(REPO / "src" / "biocheck", src / "biocheck", ignore=shutil.ignore_patterns("__pycache__"))
    return src


@pytest.mark.parametrize(("module", "line", "named"), [
    ("agent/tools.py", "from biocheck.rewards import components", "biocheck.agent.tools -> biocheck.rewards.components"),
    ("train/env.py", "import biocheck.pipeline", "biocheck.train.env -> biocheck.pipeline"),
    ("measures.py", "from biocheck.evaluate import ratios", "biocheck.measures -> biocheck.evaluate.ratios"),
    ("evaluate/shards.py", "from biocheck.train import select", "biocheck.evaluate.shards -> biocheck.train.select"),
    ("cli/training.py", "from biocheck.cli.check import _render", "biocheck.cli.training -> biocheck.cli.check"),
])
def test_a_wrong_way_import_breaks_the_layers(tmp_path, module, line, named):
    src = _copy(tmp_path)
    path = src / "biocheck" / module
    path.write_text(path.read_text() + f"\n{line}  # a wrong-way import\n")
    r = lint(src)
    assert r.returncode != 0 and "BROKEN" in r.stdout and named in r.stdout, r.stdout


def test_a_cycle_inside_a_layer_is_caught(tmp_path):
    """Two modules of one package that import each other (agent.prompts -> agent.episode -> agent.prompts)."""
    src = _copy(tmp_path)
    path = src / "biocheck" / "agent" / "prompts" / "__init__.py"
    path.write_text(path.read_text() + "\nfrom biocheck.agent import episode  # a cycle: episode imports prompts\n")
    r = lint(src)
    assert r.returncode != 0 and "No import cycle" in r.stdout and "BROKEN" in r.stdout, r.stdout


def test_no_source_file_is_ignored_by_git():
    """A package git ignores (a folder named `build/`, say) passes every local test and is missing from every
    clone: each module of the package must be one git would commit."""
    files = [str(p.relative_to(REPO)) for p in (REPO / "src" / "biocheck").rglob("*.py") if "__pycache__" not in p.parts]
    r = subprocess.run(["git", "check-ignore", "--no-index", "--stdin"], cwd=REPO, input="\n".join(files),
                       capture_output=True, text=True)
    if r.returncode == 128:
        pytest.skip("not a git checkout")
    assert r.stdout.split() == [], r.stdout
