"""Bad input on the command line or in a parameters file: one clear line, a non-zero exit, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.agent.episode import Episode
from biocheck.agent.report.schema import Report
from biocheck.cli import app
from tests.helpers.cli import one_error_line
from tests.helpers.paths import REPO

runner = CliRunner()


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write_params(path: Path, edit) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    edit(params)
    path.write_text(yaml.safe_dump(params))
    return path


def a_trace(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(Episode(claim="Aspirin prevents colds.", messages=[], report=Report()).model_dump_json())
    return path


# --- score ---------------------------------------------------------------------------------------

def test_score_with_a_bad_judge_spec(workdir):
    one_error_line(runner.invoke(app, ["score", str(a_trace(workdir / "t.json")), "--judge", "foo:bar"]),
                   "bad judge spec 'foo:bar'", "openai:<model>")


def test_score_given_a_folder_as_the_trace(workdir):
    a_trace(workdir / "runs" / "a.json")
    one_error_line(runner.invoke(app, ["score", "runs", "--judge", "none"]), "runs: is a folder", "--traces runs")


def test_score_out_is_a_folder(workdir):
    a_trace(workdir / "runs" / "a.json")
    line = one_error_line(runner.invoke(app, ["score", "--traces", "runs", "--judge", "none", "--out", "runs"]),
                          "--out runs", "is a folder")
    assert "scores.json" in line  # how to fix: name a file


# --- the parameters file -------------------------------------------------------------------------

@pytest.mark.parametrize("args, section, value", [
    (["search", "x"], "search", [1, 2]),
    (["check", "x", "--llm", "scripted:s.json"], "agent", "x"),
    (["score", "t.json"], "reward", "x"),
])
def test_a_section_that_is_not_a_mapping(workdir, args, section, value):
    write_params(workdir / "params.yaml", lambda p: p.update({section: value}))
    one_error_line(runner.invoke(app, args), "params.yaml", f"section '{section}' must be a mapping", repr(value))


@pytest.mark.parametrize("content, needle", [
    (b"search:\n  backend: \xff\xfelocal\n", "not UTF-8 text"),
    (b"search: {backend: local\nagent: [\n", "not valid YAML (line"),
])
def test_a_broken_params_file(workdir, content, needle):
    (workdir / "params.yaml").write_bytes(content)
    one_error_line(runner.invoke(app, ["search", "x"]), "params.yaml", needle)
    # `profile list` still shows the profiles that can replace it, with a warning
    r = runner.invoke(app, ["profile", "list"])
    assert r.exit_code == 0 and "warning:" in r.output and needle in r.output
    assert "quickstart  (profiles/quickstart.yaml)" in r.output and "paper  (profiles/paper.yaml)" in r.output


def test_a_value_of_the_wrong_type_is_named_with_its_key_and_file(workdir):
    write_params(workdir / "params.yaml", lambda p: p["validate"].update(claim_max_chars="lots"))
    one_error_line(runner.invoke(app, ["data", "validate"]), "params.yaml", "validate", "claim_max_chars", "'lots'",
                   "must be an int")


def test_a_missing_params_file(workdir):
    one_error_line(runner.invoke(app, ["search", "x", "--params", "nope.yaml"]), "nope.yaml: no such parameters file")


# --- who said it: an option, or which file --------------------------------------------------------

@pytest.mark.parametrize("args, needle", [
    (["search", "x", "-n", "0"], "-n 0: "),
    (["search", "x", "-n", "0", "--params", "other.yaml"], "-n 0: "),
    # a value not among an option's choices: Click's usage error, as one line (exit 2)
    (["search", "x", "--mode", "fuzzy"], ("'--mode'", "'fuzzy' is not one of 'boolean', 'bm25'")),
    (["check", "x", "--llm", "scripted:s.json", "--max-searches", "-1"], "--max-searches -1: "),
    (["search", "x", "--backend", "nope", "--params", "other.yaml"], ("'--backend'", "'nope' is not one of")),
])
def test_an_error_caused_by_an_option_names_the_option(workdir, args, needle):
    shutil.copy(workdir / "params.yaml", workdir / "other.yaml")
    line = one_error_line(runner.invoke(app, args), *([needle] if isinstance(needle, str) else needle))
    assert "params.yaml" not in line and "other.yaml" not in line


@pytest.mark.parametrize("edit, args, needle", [
    (lambda p: p["search"].update(max_results=0), ["search", "x"], "search.max_results"),
    (lambda p: p["agent"].update(max_searches=-1), ["check", "x", "--llm", "scripted:s.json"], "agent.max_searches"),
    (lambda p: p.update(serach={}), ["search", "x"], "serach"),
    (lambda p: p["reward"].update(judge_batch_size=0), ["score", "t.json"], "judge_batch_size"),
])
def test_an_error_in_a_params_file_names_that_file(workdir, edit, args, needle):
    write_params(workdir / "mine.yaml", edit)
    line = one_error_line(runner.invoke(app, [*args, "--params", "mine.yaml"]), "mine.yaml", needle)
    assert "params.yaml" not in line


@pytest.mark.parametrize("args, needle, command", [
    (["train", "--nosuch"], "No such option: --nosuch", "biocheck train"),
    (["nosuch"], "No such command 'nosuch'", "biocheck"),
    (["data", "frob"], "No such command 'frob'", "biocheck data"),
    (["profile", "use"], "Missing argument 'NAME'", "biocheck profile use"),
    (["check", "x", "--format", "pdf"], "'pdf' is not one of 'md', 'html', 'json'", "biocheck check"),
])
def test_a_usage_error_is_one_line_that_points_to_the_commands_help(args, needle, command):
    """Unknown options and commands, a missing argument and a value not among an option's choices: one line,
    exit 2, instead of Click's usage block."""
    r = runner.invoke(app, args, prog_name="biocheck")
    assert r.exit_code == 2
    line = one_error_line(r, needle, f"(see `{command} --help`)")
    assert "Usage:" not in r.output and "Try '" not in line


def test_a_ctrl_c_before_the_command_starts_is_one_line_and_exit_130(monkeypatch, capsys):
    """Typer builds the command line (and a command imports its stage) before the command's own Ctrl-C
    handling: the console entry point turns an interrupt there into one line, not a traceback."""
    from biocheck import cli

    def interrupted(**_):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "app", interrupted)
    with pytest.raises(SystemExit) as e:
        cli.entry()
    assert e.value.code == 130
    assert capsys.readouterr().err == "error: interrupted before the command started; nothing was written\n"


@pytest.mark.parametrize("exc", [
    OSError(28, "No space left on device"),
    RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"),  # safetensors' text
])
def test_a_full_disk_is_one_line_not_a_traceback(exc, capsys):
    """A stage that fills the device mid-write (a checkpoint) ends in one line saying what to do, exit 1."""
    import typer

    from biocheck.cli.errors import _run

    def stage():
        raise exc

    with pytest.raises(typer.Exit) as e:
        _run(stage)
    assert e.value.exit_code == 1
    err = capsys.readouterr().err
    assert "no space left on the device" in err and "rerun" in err and "Traceback" not in err


def test_other_errors_are_not_taken_for_a_full_disk():
    from biocheck.cli.errors import _run
    from biocheck.io import disk_full

    def stage():
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        _run(stage)
    full = OSError(28, "No space left on device")
    try:
        raise RuntimeError("file write failed") from full
    except RuntimeError as wrapped:
        assert disk_full(wrapped)  # through the chain of causes
    assert not disk_full(OSError(13, "Permission denied"))


LIBRARY_BAR = """
import sys
if sys.argv[1] == "cli":
    from biocheck.cli import app
    try:
        app(["version"])
    except SystemExit:
        pass
from tqdm import tqdm  # a library's bar, as transformers or the hub draw one, imported after the command began
for _ in tqdm(range(3), desc="library bar"):
    pass
"""


@pytest.mark.parametrize("cli", [True, False], ids=["after-biocheck", "without-biocheck"])
def test_no_library_progress_bar_when_stderr_is_not_a_terminal(cli):
    """tqdm's and the hub's bars (a download, transformers' loading bar) read their switches when imported:
    any biocheck command sets them first when stderr is not a terminal (a log, CI, DVC's output)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    p = subprocess.run([sys.executable, "-c", LIBRARY_BAR, "cli" if cli else "plain"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert ("library bar" in p.stderr) is not cli, p.stderr  # without biocheck: the bar is there (the check works)
