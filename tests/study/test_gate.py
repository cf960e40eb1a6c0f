"""The study's gate (biocheck.study.units.check_gate): no training unit runs unless the reward audit of the start finds R_evidence
varying in at least study.min_evidence_signal of its SUPPORTED and of its REFUTED groups; --ignore-gate overrides
it with a warning. Checked on written audit reports, through `run_local` with DVC recorded, the CLI and the flow."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.orchestration import dvc
from biocheck.orchestration.dvc import StageRun
from biocheck.study import units as study
from tests.helpers.paths import REPO


def _project(root: Path, shares: dict[str, tuple[float | None, int]] | None, min_signal=0.5, variants=None) -> Path:
    """A project whose reward audit report gives each label (share of groups where R_evidence varies, groups)."""
    (root / ".dvc").mkdir(parents=True)
    for f in ("dvc.yaml", "params.yaml"):
        (root / f).write_text((REPO / f).read_text())
    (root / "study").mkdir()
    (root / "study" / "dvc.yaml").write_text((REPO / "study" / "dvc.yaml").read_text())
    params = yaml.safe_load((root / "params.yaml").read_text())
    params["study"]["min_evidence_signal"] = min_signal
    if variants:
        params["study"]["variants"] = variants
        params["study"]["reference"] = variants[0]
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    if shares is not None:
        report = root / "reports" / "reward_audit.json"
        report.parent.mkdir(parents=True)
        report.write_text(json.dumps({"groups_varying": {lab: {"groups": n, "evidence": share}
                                                         for lab, (share, n) in shares.items()}}))
    return root.resolve()


def _params(root: Path) -> dict:
    return yaml.safe_load((root / "params.yaml").read_text())


@pytest.mark.parametrize(("shares", "passed", "low"), [
    ({"SUPPORTED": (0.5, 4), "REFUTED": (0.75, 4)}, True, []),  # exactly at the threshold passes
    ({"SUPPORTED": (0.25, 4), "REFUTED": (0.75, 4)}, False, ["SUPPORTED"]),
    ({"SUPPORTED": (1.0, 4), "REFUTED": (0.0, 4)}, False, ["REFUTED"]),
    ({"SUPPORTED": (1.0, 4), "REFUTED": (None, 0)}, False, ["REFUTED"]),  # no group of a label: nothing to go on
])
def test_the_gate_reads_the_audit_per_label(tmp_path, shares, passed, low):
    root = _project(tmp_path / "p", shares)
    g = study.gate(_params(root), root)
    assert (g["passed"], g["low"]) == (passed, low)
    assert g["labels"]["SUPPORTED"]["varying"] == round((shares["SUPPORTED"][0] or 0) * shares["SUPPORTED"][1])


def test_the_message_gives_the_numbers_and_what_to_change(tmp_path):
    root = _project(tmp_path / "p", {"SUPPORTED": (0.25, 4), "REFUTED": (0.0, 4)})
    text = study.gate_message(study.gate(_params(root), root))
    assert text.startswith("study gate: R_evidence varies in 25% of SUPPORTED groups (1 of 4) and 0% of REFUTED "
                           "groups (0 of 4) of the start policy's episodes (reports/reward_audit.json), below "
                           "study.min_evidence_signal 0.5 for SUPPORTED, REFUTED")
    assert "warm start" in text and "--ignore-gate" in text and "\n" not in text


def test_no_gate_without_an_eg_grpo_unit_or_at_zero_and_no_audit_is_an_error(tmp_path):
    low = {"SUPPORTED": (0.0, 4), "REFUTED": (0.0, 4)}
    for name, kwargs in (("off", {"min_signal": 0}), ("outcome", {"variants": ["outcome_only"]})):
        root = _project(tmp_path / name, low, **kwargs)
        assert study.gate(_params(root), root)["passed"] is True
    root = _project(tmp_path / "none", None)
    with pytest.raises(study.InputError, match=r"reports/reward_audit.json: no reward audit of the start.*dvc repro audit"):
        study.gate(_params(root), root)


@pytest.fixture
def repro(monkeypatch):
    ran: list[str] = []
    monkeypatch.setattr(dvc, "repro", lambda stage, root, logger=None, force=False, single_item=True:
                        ran.append(stage) or StageRun(stage=stage, ran=True, seconds=0.1))
    return ran


def test_a_study_stops_before_any_training_unless_told_to_go_on(tmp_path, repro, caplog):
    root = _project(tmp_path / "p", {"SUPPORTED": (0.25, 4), "REFUTED": (0.5, 4)})
    with pytest.raises(study.GateError, match="25% of SUPPORTED groups"):
        study.run_local(root)
    assert repro == ["audit"]  # the audit ran (DVC brings it up to date), nothing else did
    repro.clear()
    with caplog.at_level(logging.WARNING):
        study.run_local(root, ignore_gate=True)
    assert repro[0] == "audit" and repro[1:] == study.stages(study.study_config(_params(root)))
    assert any("study gate" in r.getMessage() and "ignored: --ignore-gate" in r.getMessage() for r in caplog.records)


def test_a_passing_gate_runs_every_unit(tmp_path, repro):
    root = _project(tmp_path / "p", {"SUPPORTED": (0.75, 4), "REFUTED": (0.5, 4)})
    study.run_local(root)
    assert repro == ["audit", *study.stages(study.study_config(_params(root)))]


def test_the_command_stops_in_one_line(tmp_path, repro, monkeypatch):
    root = _project(tmp_path / "p", {"SUPPORTED": (0.0, 4), "REFUTED": (0.0, 4)})
    monkeypatch.chdir(root)
    r = CliRunner().invoke(app, ["study", "run"])
    assert r.exit_code == 1
    lines = [x for x in r.output.splitlines() if x.strip() and not x.startswith("[0/")]
    assert len(lines) == 1 and lines[0].startswith("error: study gate: R_evidence varies in 0% of SUPPORTED"), r.output
    assert repro == ["audit"]
    repro.clear()
    assert CliRunner().invoke(app, ["study", "run", "--ignore-gate"]).exit_code == 0 and len(repro) > 1


def test_the_flow_applies_the_same_gate(tmp_path, monkeypatch):
    import flows.study as mod

    root = _project(tmp_path / "p", {"SUPPORTED": (1.0, 4), "REFUTED": (0.25, 4)})
    stages, units = [], []
    monkeypatch.setattr(mod, "run_stage", lambda stage, root: stages.append(stage) or {"stage": stage, "ran": False})
    monkeypatch.setattr(mod, "unit_task", lambda stage, root, deployment: units.append(stage) or {})
    with pytest.raises(study.GateError, match="25% of REFUTED groups"):
        mod.study_flow.fn(root=str(root))
    assert stages == ["audit"] and units == []
    mod.study_flow.fn(root=str(root), ignore_gate=True)
    assert len(units) == len(study.stages(study.study_config(_params(root))))
