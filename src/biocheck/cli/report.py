"""`biocheck report pr`: the pull-request evaluation comment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from biocheck.cli.base import app
from biocheck.cli.console import _echo
from biocheck.cli.errors import _fail, _run
from biocheck.orchestration.pr_comment import Outcome, Remote

report_app = typer.Typer(help="Reports about the pipeline's results (the pull-request evaluation comment).",
                         no_args_is_help=True, rich_markup_mode=None)
app.add_typer(report_app, name="report")


@report_app.command("pr")
def report_pr(
    base: Annotated[str, typer.Option("--base", help="Git ref to compare against, e.g. main or origin/main.")],
    status: Annotated[Path | None, typer.Option(
        "--status", help="What `dvc status --json` printed before the run (which stages reran and why).")] = None,
    artifact_url: Annotated[str | None, typer.Option(
        "--artifact-url", help="Link to the uploaded evaluation gallery.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write the Markdown here (atomically) [default: stdout].")] = None,
    repro_outcome: Annotated[Outcome, typer.Option(
        "--repro-outcome", help="How `dvc repro` ended (GitHub's steps.<id>.outcome); not success: a comment "
                                "that names the failed stage and shows the end of --repro-log.")] = Outcome.SUCCESS,
    repro_log: Annotated[Path | None, typer.Option(
        "--repro-log", help="What `dvc repro` printed (the workflow tees it to a file).")] = None,
    remote: Annotated[Remote | None, typer.Option(
        help="What the DVC pull found: none (no remote: everything recomputed), pulled, failed; the stage list "
             "then leaves out the files that were merely missing [default: list every change].")] = None,
) -> None:
    """Write the pull-request evaluation comment (Markdown) comparing the working tree with --base.

    Holds: a hidden marker line (the workflow updates the comment carrying it), one row per system and
    dataset with accuracy, macro-F1, EQS and EHR and their signed change against reports/eval_metrics.json
    at --base (`git show`), the paired tests of reports/eval_paired.json, the stages --status says were out
    of date, the link --artifact-url, and `dvc metrics diff BASE --md` in a collapsed block. Run it after
    `dvc repro evaluate`. When the base ref does not exist or either side has no metrics, the comment is
    still written and says what is missing; the command then prints one error line and exits 1.
    """
    from biocheck.io import write_text_atomic
    from biocheck.orchestration.pr_comment import PrCommentConfig, build

    if out is not None:
        from biocheck.outputs import claim_file

        _run(claim_file, out, "--out")  # before the comment is built
    comment = build(PrCommentConfig(base=base, status_path=status, artifact_url=artifact_url,
                                    repro_outcome=repro_outcome, repro_log=repro_log, remote=remote))
    if out is None:
        _echo(comment.markdown, nl=False)
    else:
        try:
            write_text_atomic(out, comment.markdown)
        except OSError as e:
            _fail(f"--out {out}: cannot write the comment ({e.strerror or e}).")
    if comment.problems:
        where = f"{out} says so" if out is not None else "the comment says so"
        _fail(f"{'; '.join(comment.problems)} ({where}).")

