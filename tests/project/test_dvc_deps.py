"""Every stage names the modules that write its outputs as deps: a change to how JSON is escaped once rewrote
data/prepared without `prepare` rerunning, so the committed dvc.lock was not what a fresh clone builds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.paths import REPO

WRITERS = ("src/biocheck/io.py", "src/biocheck/terminal.py", "src/biocheck/secrets.py")


def _stages(path: Path):
    for name, stage in yaml.safe_load(path.read_text())["stages"].items():
        body = stage.get("do", stage)  # foreach stages keep theirs under `do:`
        if body.get("cmd"):  # every stage runs a biocheck command (directly or through orchestrate.train_launcher)
            yield f"{path.relative_to(REPO)}:{name}", body.get("deps", [])


@pytest.mark.parametrize("dvc_yaml", ["dvc.yaml", "study/dvc.yaml"])
def test_every_biocheck_stage_depends_on_the_modules_that_write_its_outputs(dvc_yaml):
    stages = list(_stages(REPO / dvc_yaml))
    assert stages, f"{dvc_yaml}: no biocheck stage found"
    missing = {name: [w for w in WRITERS if w not in deps] for name, deps in stages}
    assert not {k: v for k, v in missing.items() if v}, missing
