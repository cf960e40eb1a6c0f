"""The `biocheck` command: every pipeline step is a subcommand (DVC stages and Prefect flows call the same functions)."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape

from biocheck import __version__

app = typer.Typer(
    help="BioCheck: fact-check biomedical claims with an LLM search agent trained by EG-GRPO.\n\n"
    "Every pipeline step is a subcommand; `dvc repro` runs them in order with the values in params.yaml.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # plain Click help: paragraphs re-wrapped, "[default: ...]" shown verbatim
)
data_app = typer.Typer(help="Datasets: fetch the official releases, prepare the splits, validate them.",
                       no_args_is_help=True, rich_markup_mode=None)
profile_app = typer.Typer(help="Parameter profiles: quickstart (CPU, minutes) and paper (GPU, full data).",
                          no_args_is_help=True, rich_markup_mode=None)
app.add_typer(data_app, name="data")
app.add_typer(profile_app, name="profile")

err = Console(stderr=True)
PROFILES_DIR = Path("profiles")

ParamsOpt = Annotated[Path, typer.Option("--params", help="Parameters file (one section per stage).")]


def _fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _run(fn, *args, **kwargs):
    """Run a stage; turn expected failures (bad input, config, network) into a clean message + exit 1."""
    from biocheck.data.fetch import FetchError
    from biocheck.io import InputError

    try:
        return fn(*args, **kwargs)
    except (InputError, FetchError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail("interrupted; no partial output was kept.", code=130)


@app.callback()
def main(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings and errors only.")] = False,
) -> None:
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = RichHandler(console=err, show_path=False, rich_tracebacks=False)
    # Our own INFO lines are progress a user wants; other libraries' (GX, MLflow, httpx) are noise
    # unless --verbose.
    handler.addFilter(lambda r: verbose or r.name.startswith("biocheck") or r.levelno >= logging.WARNING)
    logging.basicConfig(level=level, format="%(message)s", datefmt="[%X]", handlers=[handler])
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")


@app.command()
def version() -> None:
    """Print the BioCheck version."""
    typer.echo(__version__)


# --- data ----------------------------------------------------------------------------------------

@data_app.command("fetch")
def data_fetch(
    params: ParamsOpt = Path("params.yaml"),
    raw_dir: Annotated[Optional[Path], typer.Option(help="Output folder [default: data.raw_dir, data/raw].")] = None,
    mirror: Annotated[Optional[Path], typer.Option(
        help="Copy from this local mirror instead of downloading [default: $BIOCHECK_DATA_MIRROR].")] = None,
    force: Annotated[bool, typer.Option(help="Fetch again even if the files are present and intact.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Download SciFact and HealthFC (official URLs) into data/raw/.

    Writes data/raw/scifact/data.tar.gz, data/raw/healthfc/Datensatz.csv and data/raw/manifest.json
    (sha256, size and origin of each file). Downloads use timeouts, bounded retries with backoff and
    atomic writes: an interrupted download leaves no partial file. With BIOCHECK_DATA_MIRROR=DIR the
    files are copied from DIR/scifact/data.tar.gz and DIR/healthfc/Datensatz.csv instead.
    """
    from biocheck.data.stages import fetch_stage

    manifest = _run(fetch_stage, params, raw_dir=raw_dir, mirror=mirror, force=force or None,
                    progress=progress and sys.stderr.isatty())
    for name, f in manifest["files"].items():
        err.print(f"{name}: {f['bytes']:,} bytes  sha256 {f['sha256']}  from {f['origin']}", highlight=False, markup=False)


@data_app.command("prepare")
def data_prepare(
    params: ParamsOpt = Path("params.yaml"),
    raw_dir: Annotated[Optional[Path], typer.Option(help="Raw releases [default: data.raw_dir, data/raw].")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(help="Output folder [default: data.out_dir, data/prepared].")] = None,
) -> None:
    """Normalise SciFact + HealthFC into one record schema and write the splits.

    Labels: SciFact SUPPORT/CONTRADICT/no evidence -> SUPPORTED/REFUTED/NEI; HealthFC 0/1/2 ->
    SUPPORTED/NEI/REFUTED. SciFact train is split into train/val (stratified; data.val_fraction,
    data.seed), SciFact dev becomes test, HealthFC is test only. data.keep_labels and data.subset pick
    the labels and (seeded, stratified) subset size of each working split.

    Writes data/prepared/ (full/<dataset>.jsonl, <dataset>/<split>.jsonl, corpus.jsonl, manifest.json)
    as a whole or not at all, and dataset counts to metrics/data.json. Logs the counts to MLflow.
    """
    from biocheck.data.stages import prepare_stage

    overrides = {"raw_dir": raw_dir, "out_dir": out_dir}
    stats = _run(prepare_stage, params, **overrides)
    for ds, splits in stats["working"].items():
        for split, c in splits.items():
            err.print(f"{ds}/{split}: {c['total']} claims (S {c['SUPPORTED']} / R {c['REFUTED']} / NEI {c['NEI']})", markup=False)


@data_app.command("validate")
def data_validate(
    params: ParamsOpt = Path("params.yaml"),
    prepared_dir: Annotated[Optional[Path], typer.Option(help="Prepared data [default: data.out_dir, data/prepared].")] = None,
    report: Annotated[Optional[Path], typer.Option(
        "--report", help="JSON report of every check [default: reports/validation.json].")] = None,
) -> None:
    """Check the prepared data with Great Expectations suites; exit 1 if any check fails.

    Checks: required columns, non-null/non-empty claims within validate.claim_min_chars..max_chars,
    unique ids per dataset, known labels and splits, every gold/cited doc id present in the corpus,
    working splits disjoint and drawn from the full data, and the official row counts
    (validate.expected_rows). The report is written in every case; on failure a summary names the
    dataset, column, rule and offending ids/values.
    """
    from biocheck.data.stages import validate_stage

    result = _run(validate_stage, params, prepared_dir=prepared_dir, report_path=report)
    if result.success:
        err.print(f"[green]{escape(result.summary())}[/]")
    else:
        _fail(result.summary())


# --- profiles ------------------------------------------------------------------------------------

def _profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.yaml"))}


@profile_app.command("list")
def profile_list(params: ParamsOpt = Path("params.yaml")) -> None:
    """List the profiles in profiles/ and mark the one params.yaml holds."""
    from biocheck.config import load_params

    current = load_params(params).get("profile") if params.exists() else None
    for name, path in _profiles().items():
        typer.echo(f"{'*' if name == current else ' '} {name}  ({path})")


@profile_app.command("use")
def profile_use(
    name: Annotated[str, typer.Argument(help="Profile name: a file profiles/NAME.yaml.")],
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Make params.yaml the given profile (e.g. `biocheck profile use paper`); `dvc repro` then reruns what changed."""
    from biocheck.config import load_params
    from biocheck.io import write_text_atomic

    profiles = _profiles()
    if name not in profiles:
        _fail(f"no profile {name!r}; available: {', '.join(profiles) or 'none (run from the repo root)'}.")
    _run(load_params, profiles[name])  # refuse to install a file that does not parse
    write_text_atomic(params, profiles[name].read_text(encoding="utf-8"))
    err.print(f"{params} is now the '{name}' profile. Run `dvc repro` to rebuild what changed.", markup=False)


@profile_app.command("show")
def profile_show(params: ParamsOpt = Path("params.yaml")) -> None:
    """Print the active parameters as JSON."""
    from biocheck.config import load_params

    typer.echo(json.dumps(_run(load_params, params), indent=2))


if __name__ == "__main__":
    app()
