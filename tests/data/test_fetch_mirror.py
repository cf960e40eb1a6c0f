"""A bad data mirror is named by where it came from: the environment variable or the --mirror option (issue 30)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.data.fetch import MIRROR_ENV, FetchConfig, FetchError, fetch
from tests.helpers.builders import write_raw
from tests.helpers.cli import error_lines
from tests.helpers.paths import REPO

runner = CliRunner()


def _fetch_cfg(tmp_path: Path, **kw) -> FetchConfig:
    return FetchConfig(raw_dir=tmp_path / "raw", progress=False, max_attempts=1, backoff_s=0, **kw)


def test_a_bad_mirror_from_the_environment_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path))
    msg = str(e.value)
    assert f"{MIRROR_ENV}={tmp_path / 'nowhere'}" in msg and "--mirror" not in msg
    assert not (tmp_path / "raw" / "scifact").exists()


@pytest.mark.parametrize("env", [False, True])
def test_a_bad_mirror_option_names_the_option_not_the_variable(tmp_path, monkeypatch, env):
    if env:  # a good mirror in the environment: --mirror still wins, and is the one named
        monkeypatch.setenv(MIRROR_ENV, str(write_raw(tmp_path / "good")))
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path, mirror=bad))
    msg = str(e.value)
    assert f"--mirror {bad}" in msg and MIRROR_ENV not in msg and "scifact/data.tar.gz" in msg


def test_a_damaged_file_in_a_mirror_option_names_the_option(tmp_path):
    mirror = write_raw(tmp_path / "mirror")
    tar = mirror / "scifact" / "data.tar.gz"
    tar.write_bytes(tar.read_bytes()[:-40])
    with pytest.raises(FetchError) as e:
        fetch(_fetch_cfg(tmp_path, mirror=mirror))
    msg = str(e.value)
    assert str(tar) in msg and "--mirror" in msg and MIRROR_ENV not in msg


def test_the_cli_names_the_mirror_option(tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(write_raw(tmp_path / "good")))
    r = runner.invoke(app, ["data", "fetch", "--params", str(REPO / "params.yaml"), "--raw-dir",
                            str(tmp_path / "raw"), "--mirror", str(tmp_path / "missing"), "--no-progress"])
    assert r.exit_code == 1, r.output
    line, = error_lines(r)
    assert f"--mirror {tmp_path / 'missing'}" in line.replace("\n", "") and MIRROR_ENV not in line
