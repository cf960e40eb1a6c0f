"""A project the passage benchmark's stages can run (`bench_project`): SciFact held-out claims, a scripted model
whose every answer concludes SUPPORTED, no judge, 2 passages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from biocheck.data.schema import ClaimRecord
from tests.helpers.eval_project import REPORT

HELD_OUT = [("11", "Vitamin D supplementation prevents hip fractures in older adults.", "SUPPORTED"),
            ("12", "Aspirin increases the risk of gastrointestinal bleeding.", "REFUTED"),
            ("13", "Metformin lowers fasting blood glucose in type 2 diabetes.", "SUPPORTED"),
            ("14", "Statins reduce cardiovascular mortality in elderly women.", "NEI"),
            ("15", "Zinc lozenges shorten the duration of common colds.", "REFUTED"),
            ("16", "Regular coffee intake raises systolic blood pressure.", "SUPPORTED"),
            ("17", "Omega-3 fatty acids prevent recurrent atrial fibrillation.", "REFUTED"),
            ("18", "Melatonin improves sleep onset in shift workers.", "SUPPORTED")]


@pytest.fixture
def bench_project(evidence_workdir: Path) -> Path:
    """A project with SciFact held-out claims, a scripted model (every answer: REPORT, concluding SUPPORTED), no
    judge, and 2 benchmark passages."""
    full = evidence_workdir / "data" / "prepared" / "full"
    full.mkdir(parents=True)
    full.joinpath("scifact.jsonl").write_text("".join(
        ClaimRecord(id=i, dataset="scifact", split="test", claim=c, label=g).model_dump_json() + "\n"
        for i, c, g in HELD_OUT))
    (evidence_workdir / "script.json").write_text(json.dumps([{"content": REPORT}]))
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"]["llm"] = "scripted:script.json"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None
    params["narratives"].update(passages=2, workers=2, bootstrap=50)
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return evidence_workdir


def set_narratives(project: Path, **values) -> None:
    """Change keys of params.yaml's `narratives:` in `project`."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["narratives"].update(values)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
