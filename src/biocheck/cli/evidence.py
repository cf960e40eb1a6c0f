"""`biocheck evidence` (build, stats, refresh) and `biocheck search`: the local index, the evidence store and
searching them as the agent does."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console

from biocheck.cli.base import app
from biocheck.cli.console import _echo, _Redacting, err
from biocheck.cli.errors import _fail, _run
from biocheck.cli.options import BACKENDS, SEARCH_MODES, ParamsOpt
from biocheck.secrets import redact
from biocheck.terminal import inert, json_inert

evidence_app = typer.Typer(help="Evidence layer: the local search index and the evidence store.",
                           no_args_is_help=True, rich_markup_mode=None)
app.add_typer(evidence_app, name="evidence")


@evidence_app.command("build")
def evidence_build(
    params: ParamsOpt = Path("params.yaml"),
    baseline: Annotated[list[str] | None, typer.Option(
        help="PubMed baseline/update XML file or glob to ingest (repeatable) [default: evidence.baseline].")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Index the abstract corpus for local search; create the evidence store.

    Reads data/prepared/corpus.jsonl (evidence.corpus; the 5,183 SciFact abstracts in the
    quickstart) and any NCBI PubMed baseline/update files (PubmedArticleSet XML, gzipped or
    not, streamed; also stored in the evidence store). Writes the index to data/evidence/index
    (evidence.index_dir, replaced as a whole), creates data/evidence/evidence.sqlite if missing
    (evidence.store; never emptied) and statistics to metrics/evidence.json; logs them to MLflow.
    """
    from biocheck.pipeline import evidence_stage

    overrides = {"progress": progress and sys.stderr.isatty(), "baseline": baseline or None}
    stats = _run(evidence_stage, params, **overrides)
    idx, store = stats["index"], stats["store"]
    err.print(f"index: {idx['docs']:,} articles, {idx.get('size_bytes') or 0:,} bytes, "
              f"built in {idx.get('build_seconds', 0):.1f}s; store: {store.get('queries', 0):,} queries, "
              f"{store.get('articles', 0):,} articles", markup=False, highlight=False)


@evidence_app.command("stats")
def evidence_stats(params: ParamsOpt = Path("params.yaml")) -> None:
    """Print the local index and evidence store statistics as JSON."""
    from biocheck.evidence.build import evidence_stats as stats
    from biocheck.wiring import params_of, search_config

    cfg = _run(search_config, _run(params_of, params))
    _echo(json.dumps(_run(stats, cfg.index_dir, cfg.store), indent=2, default=str))


@evidence_app.command("refresh")
def evidence_refresh(
    params: ParamsOpt = Path("params.yaml"),
    limit: Annotated[int | None, typer.Option(help="Refresh only the first N recorded queries (oldest first).")] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Re-run the PubMed queries recorded in the evidence store through live NCBI E-utilities.

    Replay (and a repeated entrez search) answers from the store, so it never sees papers published
    since a query was first asked; a refresh brings the store up to date. Every query recorded by
    the entrez backend is sent to PubMed again (never answered from the store) with the settings in
    `search:` (timeout_s, max_attempts; at least as many papers as before) and its new answer
    replaces the old one in evidence.store, whatever search.backend says. Requests keep NCBI's rate
    limit (3/s, 10/s with NCBI_API_KEY) across all of the user's processes on this machine.

    A query that fails keeps its old answer and is reported; the others go on. If none can be
    refreshed (NCBI unreachable) it is an error and nothing changes. Writes
    reports/evidence_refresh.json (per query: old and new ids, added, removed, hit counts, error)
    and metrics/evidence_refresh.json, and logs them to MLflow. Prefect: flows/refresh.py (the
    evidence-refresh-nightly deployment) runs the same refresh in shards on Dask.
    """
    from biocheck.pipeline import refresh_stage

    report = _run(refresh_stage, params, progress=progress and sys.stderr.isatty(), limit=limit)
    s = report["summary"]
    err.print(f"refreshed {s['refreshed']:,} of {s['queries']:,} PubMed queries: {s['changed']:,} changed "
              f"(+{s['added']:,} / -{s['removed']:,} papers, {s['new_papers']:,} new), {s['errors']:,} failed; "
              f"details in {report['report_path']}", markup=False, highlight=False)


def _print_results(out) -> None:
    from rich.markup import escape as esc

    if out.error:  # on stderr, one `error:` line (stdout keeps only results); a batch goes on to the next query
        err.print(f"[bold red]error:[/] {esc(inert(redact(f'search {out.query!r}: {out.error}')))}", highlight=False,
                  soft_wrap=True)
        return
    con = Console(emoji=False)  # titles and queries are data: no ":name:" -> emoji
    con.push_render_hook(_Redacting())
    head = f"[bold]{esc(out.query)}[/]"
    if out.translation and out.translation != out.query:
        head += f"  [dim]({esc(out.translation)})[/]"
    con.print(head)
    if not out.results:
        con.print("  [yellow]no results[/]")
    for i, r in enumerate(out.results, 1):
        meta = ", ".join(str(x) for x in (r.get("journal"), r.get("year")) if x)
        con.print(f"  {i}. [cyan]{esc(r['pmid'])}[/] {esc(r['title'])}" + (f" [dim]({esc(meta)})[/]" if meta else ""))
        abstract = r["abstract"]
        con.print(f"     [dim]{esc(abstract[:240] + ('...' if len(abstract) > 240 else ''))}[/]")


@app.command()
def search(
    query: Annotated[str | None, typer.Argument(
        help="PubMed query, e.g. '(aspirin OR ibuprofen) AND \"heart attack\"[tiab]'.")] = None,
    batch: Annotated[Path | None, typer.Option(
        "--batch", help="Read one query per line from this file ('-' for stdin); one result per line out.")] = None,
    backend: Annotated[Literal[BACKENDS] | None, typer.Option(
        help="local (the built index), entrez (live PubMed), replay (recorded answers only) [default: "
             "search.backend].")] = None,
    n: Annotated[int | None, typer.Option("-n", help="Papers per query, 1-10000 [default: search.max_results].")] = None,
    mode: Annotated[Literal[SEARCH_MODES] | None, typer.Option(
        help="boolean (PubMed syntax) or bm25 (free text, no Boolean filter) [default: search.mode].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output: one object per query, one per line.")] = False,
    deadline: Annotated[float | None, typer.Option(
        min=0.001, metavar="<seconds>",
        help="The most the searches may take, every query of a --batch together: the request in flight is "
             "cut there, the queries left are not run, exit 1 [default: none; search.deadline_s bounds each "
             "search].")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Search the literature exactly as the agent's search_pubmed tool does.

    Backends: local (the index built by `biocheck evidence build`), entrez (live PubMed through
    NCBI E-utilities; NCBI_API_KEY / NCBI_EMAIL from the environment; answers are recorded in the
    evidence store and a repeated query makes no request), replay (the evidence store only, never
    the network). Query syntax: AND / OR / NOT (left to right), parentheses, "phrases", field tags
    [tiab] [ti] [ab] [mh] [all], truncation term*; see docs/search.md.

    With --json each query prints {"query", "results": [{"pmid", "title", "abstract", ...}],
    "error"}. A bad query is reported in "error" (exit code 1 for a single query).
    """
    from biocheck.wiring import make_search_tool, params_of, search_config

    if (query is None) == (batch is None):
        _fail("give either a QUERY or --batch FILE (see `biocheck search --help`).", code=2)
    overrides = {"backend": backend, "mode": mode, "max_results": n}
    cfg = _run(search_config, _run(params_of, params), options={"max_results": "-n"}, **overrides)
    tool = _run(make_search_tool, cfg)
    if batch is not None:
        try:
            text = sys.stdin.read() if str(batch) == "-" else batch.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            _fail(f"{batch}: cannot read the batch file ({e}).")
        queries = text.splitlines()
    else:
        queries = [query]
    from biocheck.evidence.transport import CommandDeadline, command_deadline

    def one(i: int, q: str):
        if until is not None and time.monotonic() >= until:
            raise CommandDeadline(f"--deadline {deadline:g} s passed{left(i)}")
        try:
            return tool.run(q)
        except CommandDeadline as e:  # cut in flight: say what was done
            raise CommandDeadline(f"{e}{left(i)}") from None

    def left(i: int) -> str:
        return (f"; {i} of {len(queries)} queries answered, the other {len(queries) - i} not run (rerun them, or "
                "raise --deadline)") if batch is not None else ""

    failed = False
    with (command_deadline(deadline, f"--deadline {deadline:g} s") if deadline is not None
          else contextlib.nullcontext()) as until:
        for i, q in enumerate(queries):
            out = _run(one, i, q)  # a backend that cannot answer (down, refused redirect, deadline): one line
            failed |= out.error is not None
            if as_json:
                # data, not text: control characters escaped (\u007f), so the line is inert and still the query
                _echo(json_inert(json.dumps({"query": out.query, "results": out.results, "error": out.error},
                                            ensure_ascii=False)))
            else:
                _print_results(out)
    if failed and batch is None:
        raise typer.Exit(1)

