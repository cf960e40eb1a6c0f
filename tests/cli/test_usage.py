"""Every command's --help: an example to copy, the choices of a fixed-value option, no template left unfilled.

The walk covers every command and subcommand the app has, so a command added later is held to the same."""

from __future__ import annotations

import re
import shlex
from typing import get_args

import pytest
import typer
from typer.testing import CliRunner

from biocheck.cli import app, options
from tests.helpers.paths import REPO

runner = CliRunner()


def _walk(command, path: tuple[str, ...] = ()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _walk(sub, (*path, name))


COMMANDS = list(_walk(typer.main.get_command(app)))
LEAVES = [(path, c) for path, c in COMMANDS if not hasattr(c, "commands")]


def help_of(path: tuple[str, ...]) -> str:
    r = runner.invoke(app, [*path, "--help"], prog_name="biocheck", terminal_width=200)
    assert r.exit_code == 0, r.output
    return r.output


def examples(text: str) -> list[str]:
    """The command lines under the `Example:` heading at the end of a help text."""
    block = re.split(r"\n\s*Examples?:\n", text, maxsplit=1)[1] if re.search(r"\n\s*Examples?:\n", text) else ""
    return [line.strip() for line in block.splitlines() if line.strip().startswith("biocheck")]


def test_the_walk_finds_the_commands():
    names = {" ".join(path) for path, _ in LEAVES}
    assert {"check", "evaluate", "profile use", "report pr", "data fetch", "reward audit"} <= names


@pytest.mark.parametrize(("path", "command"), [((), None), *LEAVES], ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_each_command_shows_a_runnable_example(path, command):
    text = help_of(path)
    lines = examples(text)
    assert lines, f"no example in `biocheck {' '.join(path)} --help`"
    for line in lines:  # one per line, as printed (Click must not have re-wrapped them into one paragraph)
        words = shlex.split(line.split(" #", 1)[0])
        assert words[0] == "biocheck" and words[1:1 + len(path)] == list(path), line
        if command is not None:  # every option the example uses is one of the command's
            known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
            used = {w.split("=", 1)[0] for w in words if w.startswith("-")}
            assert used <= known, f"{line}: unknown {sorted(used - known)}"


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_no_template_placeholder_is_printed(path, command):
    text = help_of(path)
    assert not re.search(r"\{\w+\}", text), text  # e.g. a usage line `biocheck profile use [OPTIONS] {name}`


FIXED = {  # option -> the values it takes, for every command that has it
    "--variant": {"eg_grpo", "outcome_only"}, "--backend": {"local", "entrez", "replay"},
    "--search": {"local", "entrez", "replay"}, "--mode": {"boolean", "bm25"}, "--format": {"md", "html", "json"},
    "--gold": {"SUPPORTED", "REFUTED", "NEI"}, "--repro-outcome": {"success", "failure", "cancelled", "skipped"},
    "--remote": {"none", "pulled", "failed"},
}


@pytest.mark.parametrize(("path", "command"), LEAVES, ids=lambda x: " ".join(x) if isinstance(x, tuple) else "")
def test_fixed_value_options_list_their_choices(path, command):
    text = help_of(path)
    for option, values in FIXED.items():
        line = next((x for x in text.splitlines() if re.match(rf"\s+{re.escape(option)}\b", x)), None)
        if line is None:
            continue
        shown = re.match(rf"\s+{re.escape(option)}\s+<?([\w|]+)>?", line)  # `<a|b>` (a Choice) or `a|b`
        assert shown and set(shown.group(1).split("|")) == values, line


def test_the_choices_agree_with_their_modules():
    from biocheck.evidence.search import BACKENDS
    from biocheck.labels import Label
    from biocheck.rewards.components import Variant

    assert get_args(Variant) == options.VARIANTS
    assert sorted(options.BACKENDS) == sorted(BACKENDS)
    assert tuple(Label.__members__) == options.GOLD_LABELS


def test_the_texts_the_issue_found_wrong():
    train = next(line for line in help_of(()).splitlines() if line.strip().startswith("train "))
    assert "models/sft" in train and "models/base" not in train  # it starts from the SFT warm start
    profile = help_of(("profile",))
    assert "min" not in profile and "profile list" in profile  # no time of its own: each profile's file says it


def test_profile_list_says_what_each_profile_is_for_in_its_files_words(monkeypatch):
    from biocheck.profiles import description

    monkeypatch.chdir(REPO)
    r = runner.invoke(app, ["profile", "list", "--params", str(REPO / "params.yaml")])
    assert r.exit_code == 0, r.output
    for name in ("quickstart", "smol", "paper"):
        first = description((REPO / "profiles" / f"{name}.yaml").read_text())[0]
        line, = (line for line in r.output.splitlines() if f" {name}  (" in line)
        assert first.removeprefix("# BioCheck pipeline parameters: ").rstrip(".") in line


def test_the_commands_keep_their_order():
    """`biocheck --help` lists the commands in the order biocheck/cli/__init__.py imports their modules."""
    block = help_of(()).split("Commands:\n", 1)[1].split("\n\n", 1)[0]
    assert [line.split()[0] for line in block.splitlines()] == [
        "version", "search", "check", "score", "sft", "train", "select", "evaluate",
        "data", "evidence", "model", "judge", "profile", "reward", "narratives", "study", "report"]
