"""`biocheck profile`: list, show, install and explain the parameter profiles of profiles/.

profiles/base.yaml states every key once (default and help); profiles/NAME.yaml holds what a profile changes.
`profile use NAME` writes the base with those values to params.yaml, the file DVC reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from biocheck.cli.base import app
from biocheck.cli.console import _echo, err
from biocheck.cli.errors import _fail, _run, _usage_file
from biocheck.cli.options import ParamsOpt
from biocheck.params import load_params

profile_app = typer.Typer(help="Parameter profiles: each is profiles/base.yaml (every key's default and help) with the "
                               "values of profiles/NAME.yaml. `biocheck profile list` names them and what each is for "
                               "(the first line of its file).",
                          no_args_is_help=True, rich_markup_mode=None)
app.add_typer(profile_app, name="profile")
PROFILES_DIR = Path("profiles")


def _profiles() -> dict[str, Path]:
    from biocheck import profiles

    return profiles.names(PROFILES_DIR)


def _renders(found: dict[str, Path]) -> set[str]:
    """The params.yaml each profile writes; one that does not render writes none (`profile use` names its error)."""
    from biocheck import profiles
    from biocheck.io import InputError

    out = set()
    for path in found.values():
        try:
            out.add(profiles.render(path))
        except InputError:
            pass
    return out


@profile_app.command("list")
def profile_list(params: ParamsOpt = Path("params.yaml")) -> None:
    """List the profiles in profiles/, each with what it is for (its file's first line); mark the one params.yaml holds."""
    from biocheck.io import InputError

    current = None
    if params.exists():
        try:
            current = load_params(params).get("profile")
        except InputError as e:  # a broken params.yaml must not hide the profiles that can replace it
            err.print(f"warning: {e}", markup=False, highlight=False)
    for name, path in _profiles().items():
        _echo(f"{'*' if name == current else ' '} {name}  ({path})  {_summary(path)}")


def _summary(path: Path) -> str:
    """What a profile is for: its file's first line, without the words every profile's first line shares."""
    from biocheck import profiles
    from biocheck.io import InputError

    try:
        first = next(iter(profiles.description(path.read_text(encoding="utf-8"))), "")
    except (OSError, UnicodeDecodeError, InputError):
        return ""
    return first.lstrip("# ").removeprefix("BioCheck pipeline parameters: ").rstrip(".")


@profile_app.command("use")
def profile_use(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Profile name: a file profiles/NAME.yaml.")],
    params: ParamsOpt = Path("params.yaml"),
    force: Annotated[bool, typer.Option(help="Replace a parameters file whose edits are in no profile.")] = False,
) -> None:
    """Make params.yaml the given profile (e.g. `biocheck profile use paper`); `dvc repro` then reruns what changed.

    It writes profiles/base.yaml with the values of profiles/NAME.yaml, the base's comments kept. A params.yaml
    that matches no profile holds your own edits: it is replaced only with --force (copy it first, e.g.
    `cp params.yaml my-params.yaml`).
    """
    from biocheck import profiles
    from biocheck.io import atomic_path
    from biocheck.pipeline import check_params

    found = _profiles()
    if name not in found:
        _fail(f"no profile {name!r}; available: {', '.join(found) or 'none (run from the repo root)'}.")
    _usage_file(params, "--params", "params.yaml")  # a folder, a device, a name too long, an immutable file
    text = _run(profiles.render, found[name])
    # refuse to install a file that does not parse, or whose values a stage would refuse (types, bounds, keys)
    _run(check_params, _run(load_params, found[name]))
    if params.is_file() and not force:
        try:
            current = params.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            current = None
        if current not in _renders(found):
            _fail(f"{params} holds edits that are in no profile; save them (cp {params} my-params.yaml), then "
                  f"rerun with --force to replace it with the '{name}' profile.")

    def install() -> None:  # verbatim: a parameters file is input, never redacted (its words are settings)
        with atomic_path(params) as tmp:
            tmp.write_text(text, encoding="utf-8")

    _run(install)
    err.print(f"{params} is now the '{name}' profile. Run `dvc repro` to rebuild what changed.", markup=False)


@profile_app.command("show")
def profile_show(params: ParamsOpt = Path("params.yaml")) -> None:
    """Print the active parameters as JSON (a profile's file, e.g. --params profiles/paper.yaml, as it installs)."""

    _echo(json.dumps(_run(load_params, params), indent=2))


@profile_app.command("explain")
def profile_explain(
    key: Annotated[str | None, typer.Argument(metavar="[KEY]", help="A key (agent.max_searches) or a section "
                                              "(agent); none: every key.")] = None,
) -> None:
    """Print what a parameter does (its comment in profiles/base.yaml), its default, and each profile's value and why."""
    from biocheck import profiles

    _echo(_run(profiles.explain, PROFILES_DIR, key), nl=False)


@profile_app.command("doc")
def profile_doc(
    out: Annotated[Path | None, typer.Option("--out", help="Write the page here (docs/parameters.md); "
                                             "none: print it.")] = None,
) -> None:
    """Write docs/parameters.md: every key's default, each profile's value and its help, from profiles/."""
    from biocheck import profiles
    from biocheck.io import atomic_path

    text = _run(profiles.markdown, PROFILES_DIR)
    if out is None:
        _echo(text, nl=False)
        return
    _usage_file(out, "--out", "docs/parameters.md")

    def write() -> None:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")

    _run(write)
    err.print(f"wrote {out}", markup=False)
