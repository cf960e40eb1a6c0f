"""A project the evaluate stage can run: prepared test splits, a scripted model for every system, no judge
(`project`); claim records with known gold labels; a lock-holding check (`held`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

import pytest
import yaml

from biocheck.data.schema import ClaimRecord
from biocheck.labels import Label
from tests.helpers.builders import write_test_splits

CLAIMS = {"scifact": [("1", "Vitamin D prevents fractures.", "SUPPORTED"), ("2", "Aspirin causes bleeding.", "REFUTED"),
                      ("3", "Coffee shortens sleep.", "NEI")],
          "healthfc": [("1", "Zinc shortens colds.", "SUPPORTED"), ("7", "Statins cause myalgia.", "REFUTED")]}


REPORT = "## Supporting evidence\nNone\n## Refuting evidence\nNone\n## Summary\nJustification: x\n## Conclusion\nSUPPORTED"


@pytest.fixture
def project(evidence_workdir: Path) -> Path:
    """A project folder: prepared test splits, a scripted model for every system, no judge."""
    write_test_splits(evidence_workdir, CLAIMS)
    (evidence_workdir / "script.json").write_text(json.dumps([{"content": REPORT}]))
    params = yaml.safe_load((evidence_workdir / "params.yaml").read_text())
    params["agent"]["llm"] = "scripted:script.json"
    params["reward"]["judge"] = None
    params["evaluate"]["eqs_judge"] = None  # EQS by the (absent) training judge
    (evidence_workdir / "params.yaml").write_text(yaml.safe_dump(params))
    return evidence_workdir


@contextlib.contextmanager
def held(folder: Path):
    """The folder locked as a running writer in another process holds it (outputs.one_writer)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


GOLD = [Label.SUPPORTED, Label.REFUTED, Label.SUPPORTED, Label.NEI]  # REPORT concludes SUPPORTED: 2 of 4 right


def claims(n=4, dataset="scifact", prefix="Vitamin D prevents fractures, claim") -> list[ClaimRecord]:
    return [ClaimRecord(id=f"c/{i}" if i % 2 else str(i), dataset=dataset, split="test", claim=f"{prefix} {i}.",
                        label=GOLD[i % len(GOLD)]) for i in range(n)]
