"""`biocheck data`: fetch the official releases, prepare the splits, validate them."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from biocheck.cli.base import app
from biocheck.cli.console import err
from biocheck.cli.errors import _fail, _run
from biocheck.cli.options import ParamsOpt

data_app = typer.Typer(help="Datasets: fetch the official releases, prepare the splits, validate them.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(data_app, name="data")


@data_app.command("fetch")
def data_fetch(
    params: ParamsOpt = Path("params.yaml"),
    raw_dir: Annotated[Path | None, typer.Option(help="Output folder [default: data.raw_dir, data/raw].")] = None,
    mirror: Annotated[Path | None, typer.Option(
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
    from biocheck.pipeline import fetch_stage

    manifest = _run(fetch_stage, params, raw_dir=raw_dir, mirror=mirror, force=force or None,
                    progress=progress and sys.stderr.isatty())
    for name, f in manifest["files"].items():
        err.print(f"{name}: {f['bytes']:,} bytes  sha256 {f['sha256']}  from {f['origin']}", highlight=False, markup=False)


@data_app.command("prepare")
def data_prepare(
    params: ParamsOpt = Path("params.yaml"),
    raw_dir: Annotated[Path | None, typer.Option(help="Raw releases [default: data.raw_dir, data/raw].")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Output folder [default: data.out_dir, data/prepared].")] = None,
) -> None:
    """Normalise SciFact + HealthFC into one record schema and write the splits.

    Labels: SciFact SUPPORT/CONTRADICT/no evidence -> SUPPORTED/REFUTED/NEI; HealthFC 0/1/2 ->
    SUPPORTED/NEI/REFUTED. SciFact train is split into train/val (stratified; data.val_fraction,
    data.seed), SciFact dev becomes test, HealthFC is test only. data.keep_labels and data.subset pick
    the labels and (seeded, stratified) subset size of each working split.

    Writes data/prepared/ (full/<dataset>.jsonl, <dataset>/<split>.jsonl, corpus.jsonl, manifest.json)
    as a whole or not at all, and dataset counts to metrics/data.json. Logs the counts to MLflow.
    """
    from biocheck.pipeline import prepare_stage

    overrides = {"raw_dir": raw_dir, "out_dir": out_dir}
    stats = _run(prepare_stage, params, **overrides)
    for ds, splits in stats["working"].items():
        for split, c in splits.items():
            err.print(f"{ds}/{split}: {c['total']} claims (S {c['SUPPORTED']} / R {c['REFUTED']} / NEI {c['NEI']})", markup=False)


@data_app.command("validate")
def data_validate(
    params: ParamsOpt = Path("params.yaml"),
    prepared_dir: Annotated[Path | None, typer.Option(help="Prepared data [default: data.out_dir, data/prepared].")] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", help="JSON report of every check [default: reports/validation.json].")] = None,
) -> None:
    """Check the prepared data with Great Expectations suites; exit 1 if any check fails.

    Checks: required columns, non-null/non-empty claims within validate.claim_min_chars..max_chars,
    unique ids per dataset, known labels and splits, every gold/cited doc id present in the corpus,
    evidence entries well formed (label, sentence indices inside the abstract), the official row
    counts (validate.expected_rows), and every working split present, in its own file, with only the
    labels data.keep_labels kept, each record an exact copy of its record in full/, and every file
    holding, split by split, the records manifest.json counted. The report is written in every case; on failure a summary names the
    dataset, column, rule and offending ids/values.
    """
    from biocheck.outputs import claim_file
    from biocheck.pipeline import validate_stage

    if report is not None:
        _run(claim_file, report, "--report")
    result = _run(validate_stage, params, prepared_dir=prepared_dir, report_path=report)
    if result.success:
        err.print(f"[green]{escape(result.summary())}[/]")
    else:
        _fail(result.summary())

