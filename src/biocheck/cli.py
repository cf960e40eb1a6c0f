"""The `biocheck` command: every pipeline step is a subcommand (DVC stages and Prefect flows call the same functions)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console, ConsoleRenderable, RenderHook
from rich.logging import RichHandler
from rich.markup import escape
from rich.text import Text
from typer._click.exceptions import UsageError as ClickUsageError  # typer vendors Click: its usage errors

from biocheck import __version__
from biocheck.aliases import CHALLENGER, CHAMPION
from biocheck.orchestration.pr_comment import Outcome, Remote
from biocheck.params import load_params, plain
from biocheck.secrets import redact, redact_logs
from biocheck.terminal import inert, json_inert

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
profile_app = typer.Typer(help="Parameter profiles: quickstart (CPU, minutes), smol (CPU, a real small model: about 80 min on 2 "
                               "cores, the README's 59 min plus the judge_eqs and audit stages, before issue 48's groups of 8 "
                               "and 16 validation claims; longer now, not re-measured) and paper (GPU, full data).",
                          no_args_is_help=True, rich_markup_mode=None)
evidence_app = typer.Typer(help="Evidence layer: the local search index and the evidence store.",
                           no_args_is_help=True, rich_markup_mode=None)
app.add_typer(data_app, name="data")
model_app = typer.Typer(help="Models: build or fetch the base policy (models/base); promote a registered version.",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(evidence_app, name="evidence")
app.add_typer(model_app, name="model")
judge_app = typer.Typer(help="The evidence judge R_evidence asks: train it on SciFact train, measure it on test.",
                        no_args_is_help=True)
app.add_typer(judge_app, name="judge")
app.add_typer(profile_app, name="profile")

# Off a terminal (dvc repro, CI logs) rich would wrap log lines at 80 columns: allow long ones.
# emoji=False: text from data (claims, ids, titles, server errors) prints as written, ":thumbs_up:" too;
# markup in it is escaped (or printed with markup=False) where it is printed.
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200, emoji=False)


class _Redacting(RenderHook):
    """Blanks the secrets out of every text a console prints (a summary or an error can quote a server), and
    takes out the escape sequences and control characters a model's or a server's text can carry."""

    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_redacted(r) if isinstance(r, Text) else r for r in renderables]


def _redacted(text: Text) -> Text:
    clean = inert(redact(text.plain))
    if clean == text.plain:
        return text
    out = text.copy()
    out.plain, out.spans = clean, []  # the styles' offsets no longer fit the shorter text
    return out


def _inert_record(record: logging.LogRecord) -> bool:
    """A log record's message made inert on a terminal (after the redacting filter)."""
    try:
        message = record.getMessage()
    except Exception:  # a malformed record: the handler reports it; a filter must never raise
        return True
    record.msg, record.args = inert(message), None
    return True


def _echo(text: str, **kwargs) -> None:
    """`typer.echo` to stdout with the secrets blanked (reports and JSON can quote what a server said) and the
    text inert on a terminal (`terminal.inert`: a model's answer can hold escape sequences)."""
    typer.echo(inert(redact(text)), **kwargs)


err.push_render_hook(_Redacting())
PROFILES_DIR = Path("profiles")

ParamsOpt = Annotated[Path, typer.Option("--params", help="Parameters file (one section per stage).")]


# Options with a fixed set of values show them in --help instead of `<str>`. The values are those of the
# modules named (not imported here: `biocheck --help` stays fast); tests/test_cli_help.py checks that they agree.
# They are Literal types (Click choices): a value not among them is a one-line usage error (_UsageError)
# before any work.
VARIANTS = ("eg_grpo", "outcome_only")  # biocheck.rewards.components.Variant
BACKENDS = ("local", "entrez", "replay")  # biocheck.evidence.search.BACKENDS
SEARCH_MODES = ("boolean", "bm25")  # biocheck.evidence.local: LocalIndex.search(mode=...)
FORMATS = ("md", "html", "json")  # _render
GOLD_LABELS = ("SUPPORTED", "REFUTED", "NEI")  # biocheck.labels.Label's names


VariantOpt = Annotated[Literal[VARIANTS] | None, typer.Option(
    "--variant", help="Reward variant: eg_grpo or outcome_only [default: reward.variant]. A variant other than "
                      "reward.variant (the outcome-only comparison) uses paths with a _<variant> suffix.")]


def _fail(message: str, code: int = 1) -> None:
    # Error texts can quote what a server sent back, keys included: blank them on the way out.
    # inert before rich sees it: rich drops a BEL, which would leave an OSC sequence unterminated
    err.print(f"[bold red]error:[/] {escape(inert(redact(message)))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _usage_file(dest: Path, option: str, example: str) -> None:
    """An output file given on the command line, checked before any work (`outputs.claim_file`); what it
    refuses is a usage error (exit 2)."""
    from biocheck.io import InputError
    from biocheck.outputs import claim_file

    try:
        claim_file(dest, option, example)
    except InputError as e:
        _fail(str(e), code=2)


RERUN = "interrupted; rerun the command to finish."


def _run(fn, *args, on_interrupt: str = RERUN, **kwargs):
    """Run a stage; turn expected failures (bad input, config, network) into a clean message + exit 1.

    `on_interrupt`: what Ctrl-C leaves behind and how to go on, true for this stage (exit 130)."""
    from biocheck.data.fetch import FetchError
    from biocheck.evidence.store import StoreError
    from biocheck.evidence.types import SearchError
    from biocheck.io import InputError
    from biocheck.llm.base import LLMError
    from biocheck.rewards.judge.base import JudgeError
    from biocheck.rewards.judge.cache import JudgeCacheError

    try:
        return fn(*args, **kwargs)
    except (InputError, FetchError, SearchError, LLMError, JudgeError, JudgeCacheError, StoreError) as e:
        _fail(str(e))
    except KeyboardInterrupt:
        _fail(on_interrupt, code=130)
    except Exception as e:  # the device filled up mid-write (a checkpoint, the evidence store): no traceback
        from biocheck.io import disk_full

        if not disk_full(e):
            raise
        _fail(f"no space left on the device ({type(e).__name__}: {str(e).splitlines()[0][:200]}): free some "
              "space (`df -h`; old checkpoints, `dvc gc`) and rerun the command; finished work is kept")


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
    # Whichever handlers are live (ours, or a host's when embedded), no log line may carry a secret.
    redact_logs([handler, *logging.getLogger().handlers])
    handler.addFilter(_inert_record)  # a log line can quote a model's or a server's text
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    if not sys.stderr.isatty():  # a library's progress bar (tqdm's, the hub's) is for a terminal, not a log or CI
        os.environ.setdefault("TQDM_DISABLE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from biocheck.tracking import quiet_artifact_progress

    quiet_artifact_progress()


@app.command()
def version() -> None:
    """Print the BioCheck version."""
    _echo(__version__)


# --- data ----------------------------------------------------------------------------------------

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


# --- evidence & search ---------------------------------------------------------------------------

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


# --- model -----------------------------------------------------------------------------------------

@model_app.command("init")
def model_init(
    params: ParamsOpt = Path("params.yaml"),
    base: Annotated[str | None, typer.Option(
        help="tiny, a Hugging Face model id or a local path [default: model.base].")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Output [default: model.out_dir, models/base].")] = None,
) -> None:
    """Make models/base: build the tiny quickstart model, or fetch/copy a real one.

    model.base = tiny builds, deterministically from model.seed and in seconds on a CPU, a tiny
    Qwen3-architecture causal LM with a byte-level BPE tokenizer trained on the prepared corpus and
    the agent's prompts, Qwen chat special tokens and TRL's Qwen3.5 chat template (tool calls).
    Any other value is a Hugging Face model id (snapshot download when online, the local cache
    otherwise) or a local model directory, copied (hard-linked where possible) into models/base.
    Writes metrics/model.json.
    """
    from biocheck.pipeline import model_stage

    _run(model_stage, params, base=base, out_dir=out_dir)  # logs what it built


@model_app.command("promote")
def model_promote(
    which: Annotated[str, typer.Argument(help="The version to promote: a number or an alias.")] = CHALLENGER,
    name: Annotated[str | None, typer.Option(
        help="The registered model [default: select.registered_model, biocheck-agent].")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Make a registered version the champion, whatever the validation rewards say.

    `biocheck select` registers each selection as the `challenger` and moves `champion` only when the
    challenger's validation reward beats the champion's. This command moves `champion` by hand (to
    the challenger by default, or to a version number or another alias), and records it on the
    version's tags (promoted, promotion). `biocheck check` and `mlflow models serve -m
    models:/biocheck-agent@champion` then run that version.
    """
    from biocheck.params import raw_section
    from biocheck.train.registry import promote
    from biocheck.wiring import params_of

    if name is None:
        name = _run(raw_section, _run(params_of, params), "select").get("registered_model") or "biocheck-agent"
    done = _run(promote, name, which)
    was = f" (was v{done['previous']})" if done["previous"] else ""
    err.print(f"{done['name']}: champion -> v{done['version']}{was}", markup=False, highlight=False)


# --- judge -----------------------------------------------------------------------------------------

@judge_app.command("train")
def judge_train(
    params: ParamsOpt = Path("params.yaml"),
    base: Annotated[Path | None, typer.Option(help="Backbone [default: judge.base, else model.out_dir].")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Output [default: judge.out_dir, models/judge].")] = None,
    zero_shot: Annotated[bool | None, typer.Option(
        "--zero-shot/--no-zero-shot", help="Also measure the untrained backbone [default: judge.zero_shot].")] = None,
    eqs: Annotated[bool, typer.Option(
        "--eqs", help="Train the second judge instead (judge.eqs: the keys it changes, e.g. its seed and folder): "
                      "it scores EQS at evaluation and never trains the policy.")] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the evidence judge (models/judge) and measure it (metrics/judge.json).

    Pairs come from SciFact TRAIN claims only: rationale abstracts are SUPPORTED/REFUTED, cited
    non-rationale and BM25-retrieved abstracts are NOT ENOUGH INFORMATION (label-balanced, seeded).
    The backbone stays frozen and is cut at the layer that cross-validates best. judge.recipe head fits
    the three label words' output rows there (an ordinary checkpoint); judge.recipe align fits a small
    classifier on how well the claim's tokens are matched by the paper's in that layer and on the
    negation and direction words of the claim and of its best-matched sentences (the checkpoint plus
    judge_head.json). Either way `reward.judge: transformers:models/judge` reads it through the
    usual judge protocol (s per label, the same prompt and cache). It is measured on SciFact TEST
    pairs (all, or a seeded judge.eval_max_pairs): accuracy, macro-F1, recall per label, calibration,
    beside the majority class.
    judge.train false measures the backbone zero-shot instead (the paper's judge) and trains nothing.
    --eqs trains the EQS judge (judge.eqs) into its own folder: a judge the policy never trained on, so
    that EQS at evaluation is not graded by the judge it learned to please.
    """
    from biocheck.pipeline import judge_stage

    stats = _run(judge_stage, params, eqs=eqs, base=base, out_dir=out_dir, zero_shot=zero_shot,
                 progress=progress and sys.stderr.isatty())
    t = stats["test"]
    _echo(f"judge: test accuracy {t['accuracy']:.3f}, macro-F1 {t['macro_f1']:.3f} "
               f"(majority {t['majority_accuracy']:.3f}, n={t['n']}), s > threshold on {t['above_threshold']:.0%}")


# --- agent -----------------------------------------------------------------------------------------

@app.command()
def check(
    ctx: typer.Context,
    claim: Annotated[str | None, typer.Argument(help="The claim to fact-check (or use --claims).")] = None,
    llm: Annotated[str | None, typer.Option(
        help="Model spec: transformers:<id|path|models:/NAME@ALIAS>, openai:<model>, vllm:<model>, "
             "scripted:<file> [default: when agent.llm is the base model, the registry's champion "
             "(models:/<select.registered_model>@champion) if there is one, else the selected checkpoint "
             "(select.out_dir) if there is one, else agent.llm].")] = None,
    search_backend: Annotated[Literal[BACKENDS] | None, typer.Option(
        "--search", help="Search backend (see `biocheck search --help`) [default: search.backend].")] = None,
    max_searches: Annotated[int | None, typer.Option(help="Search budget [default: agent.max_searches].")] = None,
    fmt: Annotated[Literal[FORMATS], typer.Option("--format", help="Report format.")] = "md",
    trace: Annotated[Path | None, typer.Option(help="Write the whole episode (trace) as JSON here.")] = None,
    claims: Annotated[Path | None, typer.Option(
        help="Batch: a JSONL file of claims (prepared records or {\"claim\": ...} per line).")] = None,
    out: Annotated[Path | None, typer.Option(help="Batch: folder for one trace per claim + summary.json.")] = None,
    workers: Annotated[int | None, typer.Option(help="Batch: episodes in parallel [default: agent.workers].")] = None,
    mlflow_log: Annotated[bool, typer.Option("--mlflow/--no-mlflow", help="Log the run (and traces) to MLflow.")] = False,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Fact-check a claim: the agent searches, then prints its report.

    The agent analyses the claim, runs up to agent.max_searches PubMed queries through the search
    backend, and writes a report: supporting and refuting evidence (PMID, verbatim quote, context),
    a summary and a conclusion (SUPPORTED, REFUTED or NOT ENOUGH INFORMATION). --trace saves the
    episode (messages, tool calls, results, ledger of retrieved papers, raw final text, parsed report,
    parse problems, model and prompt hashes). The model used is said on stderr and named in the report.
    Which model, when neither --llm nor agent.llm names one other than the base model: the model
    registry's champion (models:/biocheck-agent@champion) when there is one, else the selected checkpoint
    (models/selected, the newest selection, champion or not), else models/base.
    If the model fails (server unreachable, prompt longer than its context) the command says so and
    exits 1.

    Batch: --claims FILE.jsonl --out DIR writes one trace per claim into DIR (named after the claim id)
    and DIR/summary.json, with a progress bar and --workers episodes in parallel. A rerun reuses a
    trace only when the claim, model, prompts, agent/search settings and evidence index are unchanged;
    a claim whose text changed runs again. DIR holds one run: another model, prompt, setting or index
    into it is refused (give it a new --out). Claims whose model failed (unreachable, a malformed
    answer, agent.request_timeout_s run out) are listed under "failed" in summary.json (exit code 1).
    """
    from biocheck.agent.run import (
        choose_llm,
        describe_model,
        episode_error,
        read_claims,
        run_batch,
        text_problem,
        write_trace,
    )
    from biocheck.params import raw_section
    from biocheck.pipeline import select_config
    from biocheck.wiring import agent as make_agent
    from biocheck.wiring import params_of

    if (claim is None) == (claims is None):
        _fail("give either a CLAIM or --claims FILE.jsonl --out DIR (see `biocheck check --help`).", code=2)
    if claim is not None and not claim.strip():
        _fail('the claim is empty: give the claim to check, e.g. biocheck check "Vitamin D prevents fractures."',
              code=2)
    if claim is not None and text_problem(claim):  # no trace, report or server could hold it
        _fail(f"the claim {text_problem(claim)}; give it as UTF-8 text.", code=2)
    if claims is not None and out is None:
        _fail("--claims needs --out DIR for the traces.", code=2)
    # Refuse unusable outputs and inputs before the model loads and any episode runs: a file or a folder of the
    # wrong kind, a device, FIFO or socket, a name too long, a place that cannot be written (read-only).
    from biocheck.outputs import claim_file, claim_folder

    if trace is not None:
        _run(claim_file, trace, "--trace")
    if out is not None:
        _run(claim_folder, out, "--out")
    todo = _run(read_claims, claims) if claims is not None else None
    p = _run(params_of, params)
    select_cfg = _run(select_config, p)

    def champion() -> tuple[str, str] | None:  # models/selected is not a model the user gave: the champion first
        from biocheck.train.registry import champion_version

        name = select_cfg.registered_model
        version = champion_version(name)
        if version is None:
            return None
        return f"transformers:models:/{name}@{CHAMPION}", f"the registry's {CHAMPION} ({name} version {version})"

    spec, source = choose_llm(llm, _run(raw_section, p, "agent").get("llm"), select_cfg.out_dir, champion)
    agent, agent_cfg, search_cfg = _run(make_agent, p, search={"backend": search_backend}, llm=spec,
                                        max_searches=max_searches, workers=workers)
    model = describe_model(agent.llm.spec, agent.llm_fingerprint)
    err.print(f"model: {model}, from {source}", markup=False, highlight=False, soft_wrap=True)
    meta = {"model": model, "llm": agent.llm.spec, "llm_fingerprint": agent.llm_fingerprint,
            "prompt_hash": agent.prompts_hash, "search": search_cfg.backend}
    with _maybe_mlflow(mlflow_log, p, {"agent": plain(agent_cfg), "search": plain(search_cfg), **meta},
                       {"model_fingerprint": agent.llm_fingerprint, "prompt_hash": agent.prompts_hash}):
        if todo is not None:
            summary = _run(run_batch, agent, todo, out, workers=agent_cfg.workers, progress=sys.stderr.isatty(),
                           search=plain(search_cfg),
                           on_interrupt=f"interrupted; the traces of the claims that finished are kept in {out} "
                                        "(its summary.json is written when a batch ends); rerun the same command to "
                                        "resume: those claims are reused and the rest run.")
            _log_metrics(mlflow_log, summary, artifacts=out)
            _log_traces(mlflow_log, folder=out)
            err.print(json.dumps(summary, indent=2), markup=False, highlight=False)
            if summary["failed"]:
                first = summary["failed"][0]
                _fail(f"{len(summary['failed'])} of {len(todo)} claims failed (listed under 'failed' in "
                      f"{out / 'summary.json'}; rerun to retry them); first: {first['id']}: {first['error']}")
            return
        if not ctx.find_root().params.get("quiet"):
            agent.on_search = _say_search  # one stderr line per search as it ends: a long claim shows life
        episode = _run(agent.run, claim)
        error = episode_error(episode)
        if error is not None:  # an empty report with exit 0 would read as "the model found nothing"
            _fail(f"the model failed: {error}")
        if trace:
            _run(write_trace, episode, trace)
        _log_metrics(mlflow_log, {"searches": episode.searches, "parse_problems": len(episode.parse_problems)},
                     artifacts=trace)
        _log_traces(mlflow_log, episode=episode)
    _echo(_render(episode, fmt, meta))


def _say_search(n: int, budget: int, record) -> None:
    """`search 2/5: "statin AND myopathy" -> 3 hits` (record: the agent's QueryRecord, None for a malformed call)."""
    if record is None:
        line = f"search {n}/{budget}: a malformed call (no query), not run"
    else:
        found = f"error: {record.error}" if record.error else f"{record.n_results} hit{'' if record.n_results == 1 else 's'}"
        query = " ".join(record.query.split())  # one line, whatever the model wrote
        line = f'search {n}/{budget}: "{query[:200]}{"…" if len(query) > 200 else ""}" -> {" ".join(found.split())}'
    err.print(line, markup=False, highlight=False, soft_wrap=True, emoji=False)


def _render(episode, fmt: str, meta: dict) -> str:
    """The report in `fmt`; each format names the model (meta["model"]) that wrote it."""
    from biocheck.agent.report.render import render_html, render_json, render_markdown
    from biocheck.agent.report.schema import ParsedReport
    from biocheck.agent.report.writer import format_report

    parsed = ParsedReport(report=episode.report, problems=episode.parse_problems)
    if fmt == "json":
        return render_json(parsed, meta=meta)
    if fmt == "html":
        return render_html(episode.report, episode.ledger, episode.claim, problems=episode.parse_problems, meta=meta,
                           queries=episode.queries)
    text = render_markdown(episode.report, ledger=episode.ledger, claim=episode.claim, queries=episode.queries)
    head = f"# BioCheck report\n\n**Claim:** {episode.claim}\n"
    if meta.get("model") and text.startswith(head):
        text = f"{head}\n**Model:** {meta['model']}\n{text[len(head):]}"
    if episode.parse_problems:
        text += "\n\n> Parse problems: " + "; ".join(episode.parse_problems)
    return text if text.strip() else format_report(episode.report)


def _maybe_mlflow(enabled: bool, p: dict, params: dict, tags: dict):
    """`check --mlflow`: a run `check` in the eval experiment (params.yaml tracking:)."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext()
    from biocheck import tracking
    from biocheck.wiring import tracked

    track = _run(tracked, p)

    @contextlib.contextmanager
    def check_run():
        with track, tracking.run("check", params=params, tags=tags) as active:
            yield active

    return check_run()


def _log_metrics(enabled: bool, metrics: dict, artifacts: Path | None = None) -> None:
    if not enabled:
        return
    from biocheck import tracking

    tracking.log_metrics({k: v for k, v in metrics.items() if not isinstance(v, dict)})
    if artifacts is not None:
        tracking.log_artifacts(artifacts, artifact_path="traces")  # secrets blanked from the copies


def _log_traces(enabled: bool, episode=None, folder: Path | None = None) -> None:
    """`check --mlflow`: the episode, or the first tracking.trace_samples of a batch, as MLflow traces."""
    if not enabled:
        return
    from biocheck import tracking
    from biocheck.agent.tracing import log_episode, log_folder

    if episode is not None:
        log_episode(episode)
    elif folder is not None:
        log_folder(folder, tracking.current().config.trace_samples)


# --- rewards ---------------------------------------------------------------------------------------

@app.command()
def score(
    trace_file: Annotated[Path | None, typer.Argument(help="An episode trace (`biocheck check --trace`).")] = None,
    traces: Annotated[Path | None, typer.Option(help="Score every trace in this folder and aggregate.")] = None,
    judge: Annotated[str | None, typer.Option(
        help="Judge model spec (transformers:<path>, openai:<model>, none) [default: reward.judge].")] = None,
    gold: Annotated[Literal[GOLD_LABELS] | None, typer.Option(help="Gold label [default: the trace's].")] = None,
    variant: Annotated[Literal[VARIANTS] | None, typer.Option(help="Reward variant [default: reward.variant].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    out: Annotated[Path | None, typer.Option(help="With --traces: also write the aggregate JSON here.")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Score episode traces with the EG-GRPO reward: every component and the total.

    One trace: R_outcome, R_search, R_evidence, R_hallucination (EHR), EQS and the total, plus a check
    of every cited entry (PMID retrieved? quote found verbatim / fuzzily? judge score s). With
    --traces DIR: mean of every component and the metrics (accuracy, macro P/R/F1 2-way and 3-way,
    confusion matrix, bootstrap 95% intervals, EQS, EHR). Judge scores are cached (reward.judge_cache).
    """
    from biocheck.evaluate.score import score_trace, score_traces
    from biocheck.labels import Label
    from biocheck.wiring import make_judge, params_of, reward_config

    if (trace_file is None) == (traces is None):
        _fail("give either a TRACE file or --traces DIR (see `biocheck score --help`).", code=2)
    if out is not None:  # say so before scoring, not after
        _usage_file(out, "--out", "scores.json")
    cfg, judge_cfg = _run(reward_config, _run(params_of, params), judge=judge, variant=variant)
    if gold is not None and gold not in Label.__members__:
        _fail(f"--gold must be one of {', '.join(Label.__members__)}, not {gold!r}.", code=2)
    j = _run(make_judge, judge_cfg)
    if traces is not None:
        result = _run(score_traces, traces, cfg, j)
        if out:
            from biocheck.io import write_json_atomic

            try:
                write_json_atomic(out, result)
            except OSError as e:
                _fail(f"--out {out}: cannot write the scores ({e.strerror or e}).")
        _echo(json.dumps(result, indent=2, default=str))
        return
    b = _run(score_trace, trace_file, cfg, j, gold=Label(gold) if gold else None)
    if as_json:
        _echo(b.model_dump_json(indent=2))
        return
    _echo(f"variant {b.variant}  conclusion {b.conclusion.value if b.conclusion else '-'}  "
               f"gold {b.gold.value if b.gold else '-'}")
    for name in ("outcome", "search", "evidence", "hallucination"):
        _echo(f"  R_{name:<14}{getattr(b, name):.4f}")
    _echo(f"  {'total':<16}{b.total:.4f}")
    # EHR of a report that cites nothing is undefined (the reward's R_hallucination above is 0 for it)
    _echo(f"  EHR {f'{b.ehr:.4f}' if b.n_cited else '-'}  EQS {'-' if b.eqs is None else f'{b.eqs:.4f}'}  cited {b.n_cited}  "
               f"hallucinated {b.n_hallucinated}  searches {b.n_searches} (advanced {b.n_advanced})")
    for e in b.entries:
        _echo(f"  - {e.model_dump()}")


# --- training ---------------------------------------------------------------------------------------

@app.command()
def sft(
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the supervised warm start that GRPO begins from (train.sft) into models/sft.

    The model of models/base is fine-tuned on demonstration episodes built from SciFact train in the
    agent's own environment: a Boolean query, the real tool output, a report quoting the gold rationale
    (docs/training.md). Both reward variants (EG-GRPO and outcome-only GRPO) start from this one model, so
    it is trained once; `biocheck train` reuses it when it was trained from the same inputs and trains it
    first otherwise. With train.sft.enabled false (the paper profile) it only records that in models/sft.
    """
    from biocheck.pipeline import sft_stage

    stats = _run(sft_stage, params, progress=progress and sys.stderr.isatty())
    err.print(json.dumps(stats, indent=2), markup=False, highlight=False)


@app.command()
def train(
    params: ParamsOpt = Path("params.yaml"),
    max_steps: Annotated[int | None, typer.Option(help="Override train.max_steps.")] = None,
    seed: Annotated[int | None, typer.Option(help="Override train.seed.")] = None,
    out_dir: Annotated[Path | None, typer.Option(help="Checkpoints folder [default: train.out_dir].")] = None,
    variant: VariantOpt = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Train the agent with EG-GRPO (TRL GRPOTrainer) from the warm start in models/sft.

    Starts from the supervised warm start of `biocheck sft` (train.sft.enabled; trained first when
    models/sft does not hold one of the same inputs), else from models/base. Rollouts run the agent's own tool loop (same prompts, tool,
    budget, intervention and report parser) over the search backend train.search_backend; rewards
    are reward.variant (eg_grpo or outcome_only) with the weights in `reward:`. Checkpoints go to
    models/checkpoints every train.save_steps with a validation reward every train.eval_steps.
    Rerunning after a kill resumes from the last checkpoint (of the same parameters and inputs).
    Everything is logged to MLflow. Writes metrics/train.json. `--variant outcome_only` trains the
    standard-GRPO comparison with everything else identical into models/checkpoints_outcome_only
    (metrics/train_outcome_only.json); `dvc repro` runs both (stages train@eg_grpo, train@outcome_only).
    """
    from biocheck.pipeline import train_stage

    stats = _run(train_stage, params, progress=progress and sys.stderr.isatty(), variant=variant,
                 max_steps=max_steps, seed=seed, out_dir=out_dir,
                 on_interrupt="interrupted; the checkpoints already saved are kept; rerun the same command to "
                              "resume from the last one (with the same parameters and inputs).")
    err.print(json.dumps({k: v for k, v in stats.items() if k != "sft"}, indent=2), markup=False, highlight=False)


@app.command("select")
def select_cmd(
    params: ParamsOpt = Path("params.yaml"),
    no_register: Annotated[bool, typer.Option("--no-register", help="Do not touch the MLflow registry.")] = False,
    variant: VariantOpt = None,
) -> None:
    """Pick the checkpoint with the best validation reward (ties: earlier step).

    Reads models/checkpoints (train.out_dir), copies the winner to models/selected, writes the whole
    table to metrics/selection.json and the reward curve to metrics/reward_curve.csv, and registers
    the model in the MLflow model registry (select.registered_model) with its validation results and
    the alias `challenger`; `champion` moves to it only when its validation reward beats the
    champion's (the comparison is recorded on the version; `biocheck model promote` moves it by hand).
    `--variant outcome_only` selects the comparison model from models/checkpoints_outcome_only into
    models/selected_outcome_only (alias `outcome_only`, never the challenger).
    """
    from biocheck.pipeline import select_config, select_stage
    from biocheck.wiring import params_of

    cfg = _run(select_config, _run(params_of, params), variant=variant)
    result = _run(select_stage, params, register=False if no_register else None, variant=variant)
    start = result["start_eval_reward"]
    start = f"{start:.4f}" if isinstance(start, int | float) else "not measured"
    err.print(f"selected step {result['selected_step']} (validation reward {result['selected_eval_reward']:.4f}; "
              f"start {start}) -> {cfg.out_dir}", markup=False, highlight=False)


# --- evaluation -------------------------------------------------------------------------------------

@app.command()
def evaluate(
    params: ParamsOpt = Path("params.yaml"),
    systems: Annotated[str | None, typer.Option(
        help="Comma-separated systems: base, eg_grpo, outcome_only, no_retrieval, pmsearch, cer, fire "
             "[default: evaluate.systems].")] = None,
    datasets: Annotated[str | None, typer.Option(
        help="Comma-separated datasets: scifact, healthfc [default: evaluate.datasets].")] = None,
    limit: Annotated[int | None, typer.Option(help="First N claims per dataset [default: evaluate.limit].")] = None,
    workers: Annotated[int | None, typer.Option(help="Claims in flight per system [default: evaluate.workers].")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Ad-hoc run: write everything under this folder instead of eval/, metrics/ and reports/.")] = None,
    model: Annotated[str | None, typer.Option(
        help="The model the eg_grpo system runs: selected (models/selected, the newest EG-GRPO selection), "
             "outcome_only (models/selected_outcome_only), base, champion (the registry's champion, "
             "select.registered_model), a model folder, or a spec such as openai:NAME or "
             "models:/biocheck-agent@challenger [default: selected]. Use with --out to keep the pipeline's "
             "results.")] = None,
    eqs_judge: Annotated[str | None, typer.Option(
        "--eqs-judge", help="The judge that scores EQS, a spec such as transformers:models/judge_eqs "
                            "[default: evaluate.eqs_judge, else reward.judge].")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Evaluate BioCheck against its baselines on SciFact and HealthFC.

    Systems: base (the agent with models/base), eg_grpo (the selected EG-GRPO checkpoint), outcome_only
    (the selected outcome-only GRPO checkpoint), no_retrieval, pmsearch (the agent's graph, label only),
    cer (BM25 retrieve-then-verify), fire (iterative search and verify); see docs/evaluation.md. Each
    episode is cached per (system fingerprint, claim), so a rerun computes only what is missing.
    Writes eval/predictions/<system>/<dataset>.jsonl, reports/eval_metrics.json (accuracy, macro P/R/F1,
    parse / citing / grounded rates, EHR over citing reports, micro-EHR, EQS per side, SciFact rationale
    scores, each with its interval and n), reports/eval_paired.json (eg_grpo against each system, paired by
    claim: bootstrap differences with p and the minimum detectable difference, McNemar), the headline
    numbers DVC shows (metrics/eval/<dataset>/<system>.json), plot data, the gallery
    reports/eval/index.html, and one MLflow run per system and dataset (experiment biocheck-eval): its
    model_alias names the model it ran (selected, outcome_only, base, champion) and its tag registry_aliases
    the registry's aliases of those weights (e.g. challenger alone: a selection that did not become champion).
    """
    from biocheck.pipeline import evaluate_stage

    def names(text: str | None) -> list[str] | None:
        return [x.strip() for x in text.split(",") if x.strip()] if text is not None else None

    if out is not None:  # a file, a FIFO or a read-only place fails now, not after the first system
        from biocheck.outputs import claim_folder

        _run(claim_folder, out, "--out")
    result = _run(evaluate_stage, params, progress=progress and sys.stderr.isatty(), out=out, model=model,
                  systems=names(systems), datasets=names(datasets), limit=limit, workers=workers, eqs_judge=eqs_judge,
                  on_interrupt="interrupted; the traces of the episodes that finished are kept; rerun the same "
                               "command to reuse them and run the rest.")
    from biocheck.evaluate.headline import summary_lines

    for line in summary_lines(result["metrics"], result["paired"]):
        err.print(line, markup=False, highlight=False)
    for step, why in result.get("skipped", {}).items():
        err.print(f"warning: {step} skipped: {why}", markup=False, highlight=False)
    if result.get("gallery"):
        err.print(f"gallery: {result['gallery']}", markup=False, highlight=False)


# --- the reward audit ------------------------------------------------------------------------------

reward_app = typer.Typer(help="EG-GRPO's reward: check that its terms can reach the gradient before training.",
                         no_args_is_help=True, rich_markup_mode=None)
app.add_typer(reward_app, name="reward")


@reward_app.command("audit")
def reward_audit(
    params: ParamsOpt = Path("params.yaml"),
    claims: Annotated[int | None, typer.Option(help="Training claims to audit, half per label [default: audit.claims].")] = None,
    judge: Annotated[str | None, typer.Option(
        help="Score with this judge instead of reward.judge (a spec such as transformers:models/judge_eqs); "
             "the sampled episodes are cached, so comparing judges generates nothing twice.")] = None,
    metrics_path: Annotated[Path | None, typer.Option(
        "--out", help="Ad-hoc run: write the audit's JSON here, and no DVC metrics [default: audit.report_path, "
                      "reports/reward_audit.json, and its headline audit.metrics_path].")] = None,
    workers: Annotated[int | None, typer.Option(help="Episodes in flight [default: audit.workers].")] = None,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """Will EG-GRPO's reward terms reach the gradient? Sample the training group size of episodes
    (train.num_generations, at train.temperature) per training claim from the start policy (the SFT warm
    start, else the base model), score them with the training reward and judge, and report by gold label
    the share of groups in which R_outcome, R_search, R_evidence and R_hallucination vary (GRPO learns only
    from those), the judge's credit for a gold paper filed on the right vs the wrong side, and the
    R_evidence distribution. Warns in one line when R_evidence varies in fewer than audit.min_signal of
    either label's groups. Writes reports/reward_audit.json, its headline numbers metrics/reward_audit.json
    and an MLflow run `reward audit`.
    """
    from biocheck.evaluate.audit import summary_line
    from biocheck.pipeline import audit_stage

    result = _run(audit_stage, params, judge=judge, claims=claims, out=metrics_path, workers=workers,
                  progress=progress and sys.stderr.isatty(),
                  on_interrupt="interrupted; the sampled episodes that finished are kept (audit.out_dir); rerun the "
                               "same command to reuse them and sample the rest.")
    err.print(summary_line(result), markup=False, highlight=False)


# --- reports -------------------------------------------------------------------------------------

study_app = typer.Typer(help="A study: EG-GRPO against outcome-only GRPO and their shared start, over seeds x claims "
                             "(params `study:`, stages in study/dvc.yaml; docs/evaluation.md).", no_args_is_help=True)
app.add_typer(study_app, name="study")
SeedOpt = Annotated[int, typer.Option("--seed", help="The unit's seed (one of study.seeds).")]


@study_app.command("run")
def study_run(
    upstream: Annotated[bool, typer.Option(help="Let DVC first bring up to date what the units read (data, index, "
                                                "judges, the start model); --no-upstream: they are there already.")] = True,
    ignore_gate: Annotated[bool, typer.Option("--ignore-gate", help="Train even when the reward audit finds "
                                              "R_evidence varying in fewer than study.min_evidence_signal of the "
                                              "start's SUPPORTED or REFUTED groups (a warning instead of a stop).")] = False,
) -> None:
    """Run the whole study here, one DVC stage after another, then its analysis.

    First the gate: the reward audit of the start (`dvc repro audit`) must find R_evidence varying in at least
    study.min_evidence_signal (default 0.5) of its SUPPORTED and of its REFUTED groups; below that EG-GRPO's
    evidence term could not reach the gradient, and the study stops before any training, saying what to change
    (--ignore-gate runs it anyway).

    Trains every (variant, seed) of `study:` from the shared start, selects each run's best checkpoint by
    validation reward, evaluates every selected checkpoint and the start on the same held-out claims, and
    writes metrics/study.json, reports/study.json, the forest plot (metrics/study_plots/forest.csv, `dvc plots
    show`) and reports/study/index.html. Each unit is a stage of study/dvc.yaml (`dvc repro study/dvc.yaml`
    runs the same): a finished unit is skipped, so a killed study restarts where it stopped. Several machines:
    the Prefect deployment `study` (docs/orchestration.md).
    """
    from biocheck.study.units import run_local

    def said(i: int, n: int, ran: dict) -> None:
        how = f"ran in {ran['seconds']:.0f} s" if ran["ran"] else "up to date, skipped"
        err.print(f"[{i}/{n}] {ran['stage']}: {how}", markup=False, highlight=False)

    _run(run_local, ".", upstream=upstream, report=said, ignore_gate=ignore_gate,
         on_interrupt="interrupted; finished units are kept (dvc.lock); rerun `biocheck study run` to go on.")
    err.print("study written: metrics/study.json, reports/study.json, reports/study/index.html",
              markup=False, highlight=False)


@study_app.command("status")
def study_status() -> None:
    """Which units of the study are done, stale or still to run (`dvc status` of study/dvc.yaml).

    A stale unit ran, then its code, params or inputs changed: `biocheck study run` repeats it.
    """
    from biocheck.study.units import unit_states

    states = _run(unit_states, ".")
    for stage, state in states:
        print(f"{state:7} {stage}")
    done = sum(state == "done" for _, state in states)
    err.print(f"{done} of {len(states)} stages done", markup=False, highlight=False)


@study_app.command("train")
def study_train(
    variant: Annotated[Literal[VARIANTS], typer.Option("--variant", help="The unit's reward variant.")],
    seed: SeedOpt,
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """One training unit: GRPO of VARIANT with SEED from the shared start (DVC stage train@VARIANT-SEED).

    Writes the checkpoints to study/checkpoints/<variant>-s<seed>; a rerun resumes from the last one.
    """
    from biocheck.study.units import train_unit
    from biocheck.wiring import params_of

    stats = _run(train_unit, _run(params_of, params), variant, seed, progress=progress and sys.stderr.isatty(),
                 on_interrupt="interrupted; the checkpoints already saved are kept; rerun to resume.")
    err.print(json.dumps({k: v for k, v in stats.items() if k != "sft"}, indent=2), markup=False, highlight=False)


@study_app.command("evaluate")
def study_evaluate(
    variant: Annotated[Literal[VARIANTS] | None, typer.Option(
        "--variant", help="The unit's reward variant; none: evaluate the shared start.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="The unit's seed (with --variant).")] = None,
    params: ParamsOpt = Path("params.yaml"),
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
) -> None:
    """One evaluation unit: the unit's best checkpoint (or the start) on the study's held-out claims.

    Selects the checkpoint with the best validation reward (as `biocheck select`), runs it as the BioCheck agent
    on study.datasets (first study.limit claims) and writes study/eval/<unit> (episodes cached: a rerun
    computes only what is missing).
    """
    from biocheck.study.units import evaluate_unit
    from biocheck.wiring import params_of

    if (variant is None) != (seed is None):
        _fail("--variant and --seed go together (a unit), or neither (the start); see `biocheck study evaluate --help`",
              code=2)
    out = _run(evaluate_unit, _run(params_of, params), variant, seed, progress=progress and sys.stderr.isatty(),
               on_interrupt="interrupted; the episodes already run are cached; rerun to finish.")
    shown = {d: {k: m.get(k) for k in ("n", "accuracy", "ehr", "eqs")} for d, m in out["metrics"].items()}
    err.print(json.dumps({"unit": out["unit"], "selection": out["selection"], "metrics": shown}, indent=2),
              markup=False, highlight=False)


@study_app.command("analyze")
def study_analyze(params: ParamsOpt = Path("params.yaml")) -> None:
    """The study's answer from every unit's predictions: differences with their t interval over seeds.

    For each dataset and metric: the reference variant minus each other variant and minus the start (paired by
    seed), with a 95% t interval over seeds, p, the minimum detectable difference, exact McNemar tests per seed
    for the per-claim rates, the majority-class rate beside accuracy, each unit's evidence funnel and a sentence
    of what the study can say. Writes metrics/study.json, reports/study.json, metrics/study_plots/forest.csv and
    reports/study/index.html, and logs one MLflow run under `study <name>`.
    """
    from biocheck.study.units import analyze_units
    from biocheck.wiring import params_of

    out = _run(analyze_units, _run(params_of, params))
    for result in out["datasets"].values():
        for entry in result["metrics"].values():
            for d in entry["differences"].values():
                err.print(d["sentence"], markup=False, highlight=False, soft_wrap=True)
    err.print(f"-> {out['report']}, {out['page']}", markup=False, highlight=False)


@study_app.command("export")
def study_export(
    to: Annotated[Path | None, typer.Option("--to", help="The folder [default: bench/results/study_<name>].")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Write the study's reviewable files, small enough for git, after `biocheck study run`.

    The params it ran with, each unit's per-claim predictions (no trace paths), its checkpoint selection, each
    training unit's per-step reward log (every term's mean and std, the share of groups in which it varies, its
    within-group std, the evidence funnel) and the analysis. `biocheck study recompute DIR` gives the analysis
    back from them alone.
    """
    from biocheck.study.units import export, study_config
    from biocheck.wiring import params_of

    p = _run(params_of, params)
    dest = to or Path("bench/results") / f"study_{_run(study_config, p).name}"
    _run(export, p, dest)
    err.print(f"study files -> {dest} (commit them with the results they support)", markup=False, highlight=False)


@study_app.command("recompute")
def study_recompute(folder: Annotated[Path, typer.Argument(help="A folder `biocheck study export` wrote.")]) -> None:
    """Recompute a study's analysis from its exported files alone, and say whether it matches the export's.

    Prints every difference's sentence; exit 1 when the recomputed numbers differ from the exported analysis.
    """
    from biocheck.study.units import recompute

    out = _run(recompute, folder)
    for result in out["report"]["datasets"].values():
        for entry in result["metrics"].values():
            for d in entry["differences"].values():
                print(d["sentence"])
    if not out["matches"]:
        _fail(f"{folder}: the recomputed analysis differs from {folder / 'study.json'}: the files and the analysis "
              "are not of the same study (export it again)")
    err.print(f"{folder}: recomputed from the per-claim files alone; it matches study.json", markup=False,
              highlight=False)


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


# --- profiles ------------------------------------------------------------------------------------

def _profiles() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PROFILES_DIR.glob("*.yaml"))}


@profile_app.command("list")
def profile_list(params: ParamsOpt = Path("params.yaml")) -> None:
    """List the profiles in profiles/ and mark the one params.yaml holds."""
    from biocheck.io import InputError

    current = None
    if params.exists():
        try:
            current = load_params(params).get("profile")
        except InputError as e:  # a broken params.yaml must not hide the profiles that can replace it
            err.print(f"warning: {e}", markup=False, highlight=False)
    for name, path in _profiles().items():
        _echo(f"{'*' if name == current else ' '} {name}  ({path})")


@profile_app.command("use")
def profile_use(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Profile name: a file profiles/NAME.yaml.")],
    params: ParamsOpt = Path("params.yaml"),
    force: Annotated[bool, typer.Option(help="Replace a parameters file whose edits are in no profile.")] = False,
) -> None:
    """Make params.yaml the given profile (e.g. `biocheck profile use paper`); `dvc repro` then reruns what changed.

    A params.yaml that matches no profile holds your own edits: it is replaced only with --force (copy it
    first, e.g. `cp params.yaml my-params.yaml`).
    """
    from biocheck.io import atomic_path
    from biocheck.pipeline import check_params

    profiles = _profiles()
    if name not in profiles:
        _fail(f"no profile {name!r}; available: {', '.join(profiles) or 'none (run from the repo root)'}.")
    _usage_file(params, "--params", "params.yaml")  # a folder, a device, a name too long, an immutable file
    text = profiles[name].read_text(encoding="utf-8")
    # refuse to install a file that does not parse, or whose values a stage would refuse (types, bounds, keys)
    _run(check_params, _run(load_params, profiles[name]))
    if params.is_file() and not force:
        try:
            current = params.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            current = None
        if current not in {p.read_text(encoding="utf-8") for p in profiles.values()}:
            _fail(f"{params} holds edits that are in no profile; save them (cp {params} my-params.yaml), then "
                  f"rerun with --force to replace it with the '{name}' profile.")
    def install() -> None:  # verbatim: a parameters file is input, never redacted (its words are settings)
        with atomic_path(params) as tmp:
            tmp.write_text(text, encoding="utf-8")

    _run(install)
    err.print(f"{params} is now the '{name}' profile. Run `dvc repro` to rebuild what changed.", markup=False)


@profile_app.command("show")
def profile_show(params: ParamsOpt = Path("params.yaml")) -> None:
    """Print the active parameters as JSON."""

    _echo(json.dumps(_run(load_params, params), indent=2))


# --- an example in every --help ----------------------------------------------------------------------

# One or more command lines per command, printed at the end of its --help (tests/test_cli_help.py checks that
# every command has one and that its options exist).
EXAMPLES: dict[str, tuple[str, ...]] = {
    "": ('biocheck check "Vitamin D supplementation prevents fractures in older adults."',),
    "version": ("biocheck version",),
    "search": ("biocheck search '(statin OR statins) AND myopathy[tiab]' --backend local -n 5",),
    "check": ('biocheck check "Aspirin lowers the risk of a first heart attack." --search replay --trace trace.json',
              'biocheck check "Statins cause myopathy." --llm transformers:models/selected   # the newest selection',
              "biocheck check --claims data/prepared/scifact/test.jsonl --out runs/check --workers 4"),
    "score": ("biocheck score trace.json --json", "biocheck score --traces runs/check --out runs/check/scores.json"),
    "sft": ("biocheck sft --no-progress",),
    "train": ("biocheck train --variant outcome_only --max-steps 2 --out-dir /tmp/ckpt",),
    "select": ("biocheck select --variant outcome_only --no-register",),
    "evaluate": ("biocheck evaluate --systems eg_grpo,outcome_only --datasets scifact --limit 50 --out runs/cmp",
                 "biocheck evaluate --systems eg_grpo --model champion --out runs/champion",
                 "biocheck evaluate --eqs-judge transformers:models/judge_eqs --out runs/second-judge"),
    "data fetch": ("BIOCHECK_DATA_MIRROR=/mnt/mirror biocheck data fetch", "biocheck data fetch --force"),
    "data prepare": ("biocheck data prepare --out-dir /tmp/prepared",),
    "data validate": ("biocheck data validate --report /tmp/validation.json",),
    "evidence build": ("biocheck evidence build --baseline 'pubmed/pubmed25n*.xml.gz'",),
    "evidence stats": ("biocheck evidence stats",),
    "evidence refresh": ("biocheck evidence refresh --limit 100",),
    "model init": ("biocheck model init --base tiny --out-dir /tmp/base",),
    "model promote": ("biocheck model promote                  # the challenger becomes the champion",
                      "biocheck model promote 3 --name biocheck-agent"),
    "judge train": ("biocheck judge train --eqs",),
    "profile list": ("biocheck profile list",),
    "profile use": ("biocheck profile use smol",),
    "profile show": ("biocheck profile show --params profiles/paper.yaml",),
    "reward audit": ("biocheck reward audit                       # the profile's audit (DVC stage `audit`)",
                     "biocheck reward audit --judge transformers:models/judge_eqs --out /tmp/audit_other_judge.json"),
    "study run": ("biocheck study run                  # the gate, every unit of params.yaml `study:`, the analysis",
                  "biocheck study run --ignore-gate    # even where the start gives R_evidence no signal",
                  "dvc repro study/dvc.yaml            # the units as DVC stages (no gate)"),
    "study train": ("biocheck study train --variant outcome_only --seed 1",),
    "study evaluate": ("biocheck study evaluate --variant eg_grpo --seed 0", "biocheck study evaluate   # the start"),
    "study analyze": ("biocheck study analyze",),
    "study export": ("biocheck study export --to bench/results/study_pilot",),
    "study recompute": ("biocheck study recompute bench/results/study_pilot",),
    "study status": ("biocheck study status",),
    "report pr": ("dvc status dvc.yaml --json > /tmp/status.json && dvc repro evaluate",
                  "biocheck report pr --base origin/main --status /tmp/status.json --out comment.md"),
}


class _UsageError(ClickUsageError):
    """A usage error (unknown option, a value not among an option's choices, a missing argument) as the project's
    one line on stderr, instead of Click's usage block; exit 2 as Click's."""

    def show(self, file: Any = None) -> None:
        where = f" (see `{self.ctx.command_path} --help`)" if self.ctx else ""
        typer.echo(f"error: {inert(redact(self.format_message()))}{where}", file=file, err=file is None)


def _one_line(e: ClickUsageError) -> _UsageError:
    return e if isinstance(e, _UsageError) else _UsageError(e.format_message(), e.ctx)


class _OneLineUsage:
    """Usage errors found while parsing (options, arguments, choices) are one line (_UsageError)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)  # type: ignore[misc]
        except ClickUsageError as e:
            raise _one_line(e) from None


class _Command(_OneLineUsage, typer.core.TyperCommand):
    """Typer writes a required argument as `{NAME}` in the usage line, which reads as a template left unfilled:
    write it as NAME, as Click does."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        import re

        return [re.sub(r"\{([\w.-]+)\}", r"\1", piece) for piece in super().collect_usage_pieces(ctx)]


class _Group(_OneLineUsage, typer.core.TyperGroup):
    """A command group: an unknown command is one line too."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except ClickUsageError as e:
            raise _one_line(e) from None


def _epilog(key: str) -> str | None:
    lines = EXAMPLES.get(key)
    # \b: Click prints the paragraph as written instead of re-wrapping the lines into one.
    return "\b\nExample:\n" + "\n".join(f"  {line}" for line in lines) if lines else None


def _with_examples(typer_app: typer.Typer, prefix: str = "") -> None:
    for info in typer_app.registered_commands:
        key = f"{prefix}{info.name or info.callback.__name__.replace('_', '-')}"
        info.epilog = info.epilog or _epilog(key)
        if info.cls in (None, typer.core.TyperCommand):  # a command's own class is kept
            info.cls = _Command
    for group in typer_app.registered_groups:
        group.typer_instance.info.cls = _Group
        _with_examples(group.typer_instance, f"{prefix}{group.name} ")


app.info.epilog = _epilog("")
app.info.cls = _Group
_with_examples(app)


def entry() -> None:
    """The console entry point: `app`, with a Ctrl-C that lands before a command's own handling (while Typer
    builds the command line, or a command imports its stage) ending in one line and exit 130, not a traceback."""
    try:
        app(prog_name="biocheck")
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted before the command started; nothing was written\n")
        sys.exit(130)


if __name__ == "__main__":
    entry()
