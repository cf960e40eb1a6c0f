"""Same inputs, same bytes (issue 49): the outputs of the cheap stages (fetch, prepare, validate, evidence) hold no
absolute path, timestamp or duration, so a run in another folder or on another machine gives byte-identical files
and DVC hashes: what dvc.lock records, and what a `dvc pull` brings, is current wherever the pipeline ran."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import yaml

from biocheck import pipeline
from biocheck.data.fetch import MIRROR_ENV
from tests.builders import write_raw
from tests.conftest import REPO

STAGES = ("fetch", "prepare", "validate", "evidence")


def _outputs() -> list[str]:
    """Every output (outs and metrics) dvc.yaml declares for STAGES."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    entries = [e for s in STAGES for key in ("outs", "metrics") for e in stages[s].get(key) or []]
    return [e if isinstance(e, str) else next(iter(e)) for e in entries]


def _run(work: Path, mirror: Path, monkeypatch) -> dict[str, str]:
    """The stages as `dvc repro evidence` runs them, in `work` from its own copy of the mirror: path -> sha256."""
    shutil.copytree(mirror, work / "mirror")
    work.joinpath("run").mkdir()
    monkeypatch.chdir(work / "run")
    # an absolute mirror path, as a user sets it: each folder's is another
    monkeypatch.setenv(MIRROR_ENV, str((work / "mirror").resolve()))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # the tiny release's sizes (params.yaml expects the official release's)
    params["validate"]["expected_rows"] = {"scifact": {"train+val": 23, "test": 4}, "healthfc": {"test": 7}}
    pipeline.fetch_stage(params, progress=False)
    pipeline.prepare_stage(params)
    assert pipeline.validate_stage(params).success
    pipeline.evidence_stage(params, progress=False)
    hashes = {}
    for out in _outputs():
        path = Path(out)
        assert path.exists(), f"{out}: declared in dvc.yaml, not written"
        for f in sorted([path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())):
            hashes[f.as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return hashes


def test_the_early_stages_give_the_same_bytes_in_another_folder(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "release")
    first = _run(tmp_path / "a", mirror, monkeypatch)
    second = _run(tmp_path / "elsewhere" / "b", mirror, monkeypatch)
    # the files in one run only, or with other bytes (a segment file named by chance is both)
    differ = sorted(f for f in first.keys() | second.keys() if first.get(f) != second.get(f))
    assert not differ, "not the same in both folders:\n" + "\n".join(differ)
