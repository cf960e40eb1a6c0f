"""Profiles as overrides of profiles/base.yaml: every key, default and help stated once in the base; a profile's
file holds what it changes; `biocheck profile use` writes the render; the docs page and `profile explain` read
the same comments."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck import profiles
from biocheck.cli import app
from biocheck.io import InputError
from biocheck.params import load_params
from tests.helpers.paths import REPO

runner = CliRunner()
PROFILES = REPO / "profiles"
NAMES = sorted(profiles.names(PROFILES))


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    shutil.copytree(PROFILES, tmp_path / "profiles")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def error_line(r) -> str:
    """The command failed cleanly: exit 1, no traceback, one `error:` line; returns it."""
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.output, repr(r.exception))
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def key_paths(tree: dict, where: tuple = ()) -> set[tuple]:
    out = set()
    for k, v in tree.items():
        out.add((*where, k))
        if isinstance(v, dict):
            out |= key_paths(v, (*where, k))
    return out


def test_params_yaml_is_the_quickstart_render_byte_for_byte():
    assert (REPO / "params.yaml").read_text() == profiles.render(PROFILES / "quickstart.yaml")


def test_the_profiles_are_the_three_and_base_is_none_of_them():
    assert NAMES == ["paper", "quickstart", "smol"]


@pytest.mark.parametrize("name", NAMES)
def test_every_override_key_is_a_base_key_and_a_value_that_differs(name):
    base = yaml.safe_load((PROFILES / "base.yaml").read_text())
    own = yaml.safe_load((PROFILES / f"{name}.yaml").read_text())
    assert own["profile"] == name
    for key, value in profiles.values(PROFILES / f"{name}.yaml").items():
        node = base
        for k in key:
            assert isinstance(node, dict) and k in node, (name, key)
            node = node[k]
        assert node != value or key == ("profile",), f"{name}: {'.'.join(key)} repeats the base's value"


@pytest.mark.parametrize("name", NAMES)
def test_a_profile_file_loads_as_its_render_and_every_stage_accepts_it(name):
    from biocheck.pipeline import check_params

    params = load_params(PROFILES / f"{name}.yaml")
    assert params == yaml.safe_load(profiles.render(PROFILES / f"{name}.yaml"))
    assert params.path == PROFILES / f"{name}.yaml"  # errors name the profile's file
    check_params(params)


def test_an_optional_key_is_written_only_by_a_profile_that_sets_it():
    optional = {e.key for e in profiles.entries((PROFILES / "base.yaml").read_text()) if e.optional}
    assert ("data", "balanced") in optional and ("train", "sft", "demos") in optional
    quick = load_params(PROFILES / "quickstart.yaml")
    smol = load_params(PROFILES / "smol.yaml")
    assert "balanced" not in quick["data"] and "demos" not in quick["train"]["sft"]
    assert smol["data"]["balanced"] == ["val"] and smol["train"]["sft"]["demos"] == "citing"


def test_every_base_key_has_its_entry_and_the_help_is_its_comment():
    text = (PROFILES / "base.yaml").read_text()
    entries = {e.key: e for e in profiles.entries(text)}
    assert set(entries) == key_paths(yaml.safe_load(text)) - {("validate", "expected_rows", "scifact", "train+val"),
                                                               ("validate", "expected_rows", "scifact", "test"),
                                                               ("validate", "expected_rows", "healthfc", "test"),
                                                               *((("evaluate", s, k)) for s, ks in
                                                                 [("cer", ("retrieve", "sentences", "ranker")),
                                                                  ("fire", ("max_steps", "similarity", "max_retries"))]
                                                                 for k in ks)}
    assert entries[("agent", "max_searches")].help == "search budget; then the intervention forces the report"
    # comment lines under a key continue its help
    assert entries[("agent", "cache")].help.endswith('docs/benchmarks.md, "Seconds per episode")')


def test_profile_use_smol_then_quickstart_gives_params_yaml_back_byte_for_byte(workdir):
    before = (workdir / "params.yaml").read_bytes()
    assert runner.invoke(app, ["profile", "use", "smol"]).exit_code == 0
    smol = (workdir / "params.yaml").read_text()
    assert smol == profiles.render(workdir / "profiles" / "smol.yaml") and yaml.safe_load(smol)["profile"] == "smol"
    r = runner.invoke(app, ["profile", "use", "quickstart"])  # the smol render is a profile's: no --force
    assert r.exit_code == 0, r.output
    assert (workdir / "params.yaml").read_bytes() == before


def test_an_override_key_the_base_lacks_is_one_error_line_and_nothing_is_written(workdir):
    (workdir / "profiles" / "typo.yaml").write_text("profile: typo\n\nagent:\n  max_serches: 4\n")
    before = (workdir / "params.yaml").read_bytes()
    line = error_line(runner.invoke(app, ["profile", "use", "typo"]))
    assert "profiles/typo.yaml" in line and "agent.max_serches" in line and "base.yaml" in line
    assert (workdir / "params.yaml").read_bytes() == before
    with pytest.raises(InputError, match="agent.max_serches is not in profiles/base.yaml"):
        load_params(workdir / "profiles" / "typo.yaml")


def test_a_section_given_one_value_is_refused(workdir):
    (workdir / "profiles" / "flat.yaml").write_text("profile: flat\nagent: 3\n")
    line = error_line(runner.invoke(app, ["profile", "use", "flat"]))
    assert "profiles/flat.yaml" in line and "agent is a section" in line


def test_a_profile_that_does_not_parse_is_one_error_line(workdir):
    (workdir / "profiles" / "bad.yaml").write_text("profile: bad\nagent:\n  seed: 1\n  seed: 2\n")
    assert "profiles/bad.yaml" in error_line(runner.invoke(app, ["profile", "use", "bad"]))
    # a broken profile does not stop `profile use` of another, nor hide the others' renders from the --force rule
    assert runner.invoke(app, ["profile", "use", "smol"]).exit_code == 0


def test_explain_prints_the_base_comment_and_each_profiles_value_and_why(workdir):
    r = runner.invoke(app, ["profile", "explain", "agent.max_searches"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == ["agent.max_searches: 3", "    search budget; then the intervention forces the report",
                                     "    paper: 5  (the paper's search budget)"]
    section = runner.invoke(app, ["profile", "explain", "train.sft"]).stdout
    assert section.startswith("train.sft:\n") and "train.sft.epochs: 8" in section
    line = error_line(runner.invoke(app, ["profile", "explain", "agent.max_search"]))
    assert "no parameter 'agent.max_search'" in line and "agent.max_searches" in line


def test_docs_parameters_md_is_the_render_of_the_profiles():
    """docs/parameters.md is written by `biocheck profile doc`: a changed default or comment must rewrite it."""
    assert (REPO / "docs" / "parameters.md").read_text() == profiles.markdown(PROFILES), (
        f"docs/parameters.md is stale: run `{profiles.docs.DOC_COMMAND}`")


def test_profile_doc_writes_the_page(workdir):
    r = runner.invoke(app, ["profile", "doc", "--out", "docs/parameters.md"])
    assert r.exit_code == 0, r.output
    assert (workdir / "docs" / "parameters.md").read_text() == (REPO / "docs" / "parameters.md").read_text()
