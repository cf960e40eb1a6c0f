from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.params import load_params
from tests.helpers.paths import REPO

runner = CliRunner()

COMMANDS = [[], ["data"], ["data", "fetch"], ["data", "prepare"], ["data", "validate"], ["profile"],
            ["profile", "use"], ["profile", "list"], ["version"], ["evidence"], ["evidence", "build"],
            ["evidence", "stats"], ["search"], ["model"], ["model", "init"], ["check"], ["score"], ["train"],
            ["select"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "biocheck")
def test_every_command_explains_itself(cmd):
    result = runner.invoke(app, [*cmd, "--help"], prog_name="biocheck")
    assert result.exit_code == 0, result.output
    assert "Usage: biocheck" in result.output
    description = result.output.split("Options:")[0].split("\n", 1)[1]
    assert len(description.split()) >= 4, result.output  # a real description, not just the usage line


def test_fetch_help_names_outputs_and_mirror():
    out = runner.invoke(app, ["data", "fetch", "--help"]).output
    assert "data/raw" in out and "BIOCHECK_DATA_MIRROR" in out and "sha256" in out


def test_prepare_and_validate_through_the_cli(workdir):
    r = runner.invoke(app, ["data", "prepare"])
    assert r.exit_code == 0, r.output
    assert "scifact/train: 4 claims" in r.output
    r = runner.invoke(app, ["data", "validate"])
    assert r.exit_code == 0, r.output
    assert json.loads((workdir / "reports" / "validation.json").read_text())["success"] is True
    assert json.loads((workdir / "metrics" / "data.json").read_text())["working"]["scifact"]["train"]["total"] == 4


def test_validation_failure_exits_nonzero_with_summary(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["validate"]["expected_rows"]["healthfc"]["test"] = 750
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    assert runner.invoke(app, ["data", "prepare"]).exit_code == 0
    r = runner.invoke(app, ["data", "validate"])
    assert r.exit_code == 1
    assert "healthfc/full[test]: expect_table_row_count_to_equal (value=750): observed 7" in r.output


def test_bad_input_exits_1_with_a_message_not_a_traceback(workdir, raw_dir):
    (raw_dir / "healthfc" / "Datensatz.csv").write_bytes(b"")
    r = runner.invoke(app, ["data", "prepare"])
    assert r.exit_code == 1
    assert "error:" in r.output and "Datensatz.csv: the file is empty" in r.output
    assert "Traceback" not in r.output
    assert not (workdir / "data" / "prepared").exists()


def test_unknown_param_key_is_named(workdir):
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    params["data"]["subsett"] = 3
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    r = runner.invoke(app, ["data", "prepare"])
    assert r.exit_code == 1 and "data.subsett" in r.output


def test_profile_use_switches_params(workdir):
    # --force: this params.yaml points at the test data, an edit in no profile (test_output_guard.py)
    r = runner.invoke(app, ["profile", "use", "paper", "--force"])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load((workdir / "params.yaml").read_text())["profile"] == "paper"
    assert runner.invoke(app, ["profile", "use", "nope"]).exit_code == 1


def test_params_is_the_quickstart_profile_and_profiles_share_keys():
    quick = load_params(REPO / "profiles" / "quickstart.yaml")  # base.yaml with the profile's values
    paper = load_params(REPO / "profiles" / "paper.yaml")
    assert yaml.safe_load((REPO / "params.yaml").read_text()) == quick

    def keys(d, prefix=""):
        return {prefix + k for k in d} | {x for k, v in d.items() if isinstance(v, dict) for x in keys(v, f"{prefix}{k}.")}
    assert keys(quick) == keys(paper)
    assert paper["data"]["subset"] == {"train": None, "val": None, "test": None}


@pytest.mark.parametrize(("start", "shown"), [(0.6908994913101196, "start 0.6909)"), (None, "start not measured)")])
def test_select_prints_the_start_reward_rounded_or_says_it_was_not_measured(monkeypatch, tmp_path, start, shown):
    import biocheck.pipeline as pipeline
    import biocheck.wiring as wiring

    monkeypatch.setattr(wiring, "params_of", lambda params: {})
    monkeypatch.setattr(pipeline, "select_config", lambda params, variant=None: type("C", (), {"out_dir": tmp_path})())
    monkeypatch.setattr(pipeline, "select_stage", lambda params, register=None, variant="eg_grpo": {
        "selected_step": 2, "selected_eval_reward": 1.0529, "start_eval_reward": start})
    result = runner.invoke(app, ["select"])
    assert result.exit_code == 0, result.output
    assert f"selected step 2 (validation reward 1.0529; {shown}" in result.output
