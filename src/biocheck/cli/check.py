"""`biocheck check`: fact-check one claim or a batch, the report in the chosen format, and the run in MLflow
with --mlflow."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from biocheck.aliases import CHAMPION
from biocheck.cli.base import app
from biocheck.cli.console import _echo, err
from biocheck.cli.errors import _fail, _run
from biocheck.cli.options import BACKENDS, FORMATS, ParamsOpt
from biocheck.params import plain


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
    text: Annotated[Path | None, typer.Option(
        "--text", help="A passage: a text file (- for stdin) whose claims are each fact-checked; needs --out DIR.",
        allow_dash=True)] = None,
    passages: Annotated[Path | None, typer.Option(
        "--passages", help="Batch of passages: a JSONL file, one {\"id\": ..., \"text\": ...} per line (the "
                           "benchmark's data/narratives/passages.jsonl is one); needs --out DIR: a folder per passage.")
    ] = None,
    extractor: Annotated[Literal["model", "sentences"] | None, typer.Option(
        help="--text, --passages: who finds the claims: the agent's own model, or the sentence rule (deterministic) "
             "[default: model].")] = None,
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

    Passage: --text FILE (or - for stdin) --out DIR finds the passage's check-worthy claims (--extractor model: the
    agent's own model, falling back to the sentence rule with a note; sentences: the rule alone), runs the agent
    on each as a batch into DIR (a rerun on the same passage reuses each claim's trace), and prints one report:
    the passage with each claim's span marked by its verdict, the skipped sentences and why, then each claim's
    report. It is also written to DIR/narrative.md, .json and .html (docs/narratives.md).

    Passages: --passages FILE.jsonl --out DIR does the same for each passage of the file, one after another, into
    DIR/<id>/ (its traces and narrative.md, .json, .html), prints one line per passage on stderr and writes
    DIR/summary.json (each passage's overall line, claims, failures, how its claims were found); a rerun
    reuses every finished claim.
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

    given = [name for name, value in (("a CLAIM", claim), ("--claims", claims), ("--text", text),
                                      ("--passages", passages)) if value is not None]
    if len(given) > 1:
        _fail("give one of a CLAIM, --claims FILE.jsonl, --text FILE or --passages FILE.jsonl, not more (see "
              "`biocheck check --help`).", code=2)
    if passages is not None and (out is None or trace is not None):
        _fail("--passages needs --out DIR for a folder per passage (no --trace), e.g. "
              "biocheck check --passages passages.jsonl --out runs/passages", code=2)
    if text is not None and (out is None or trace is not None):
        _fail("--text needs --out DIR for the claims' traces and the report (no --trace), e.g. "
              "biocheck check --text passage.txt --out runs/passage", code=2)
    if extractor is not None and text is None and passages is None:
        _fail("--extractor chooses who finds a passage's claims: give it with --text FILE or --passages FILE.jsonl.",
              code=2)
    passage = _read_passage(text) if text is not None else None
    batch = _read_passages(passages) if passages is not None else None
    if text is None and passages is None and (claim is None) == (claims is None):
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
        if batch is not None:
            return _check_passages(batch, agent, out, extractor or "model", workers=agent_cfg.workers,
                                   search=plain(search_cfg), mlflow_log=mlflow_log)
        if passage is not None:
            return _check_passage(passage, agent, out, fmt, extractor or "model", workers=agent_cfg.workers,
                                  search=plain(search_cfg), mlflow_log=mlflow_log)
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


def _read_passage(path: Path) -> str:
    """The passage of --text (bytes from a file or stdin), or one usage error line naming it and how to fix it."""
    import click

    from biocheck.io import InputError
    from biocheck.narrative.extract import check_passage

    name = "stdin" if str(path) == "-" else str(path)
    try:
        data = click.get_binary_stream("stdin").read() if str(path) == "-" else path.read_bytes()
    except FileNotFoundError:
        _fail(f"--text {name}: no such file; give a text file's path, or - to read the passage from stdin.", code=2)
    except IsADirectoryError:
        _fail(f"--text {name}: is a folder; give a text file's path, or - to read the passage from stdin.", code=2)
    except OSError as e:
        _fail(f"--text {name}: cannot be read ({e.strerror or e}); give a readable text file.", code=2)
    try:
        return check_passage(data)
    except InputError as e:
        _fail(f"--text {name}: {e}", code=2)
    raise AssertionError("unreachable")  # _fail raises


def _read_passages(path: Path) -> list[tuple[str, str]]:
    """--passages: (id, text) per line, or one usage error line naming the file, the line and how to fix it."""
    from biocheck.io import InputError, read_jsonl
    from biocheck.narrative.extract import check_passage

    try:
        rows = read_jsonl(path)
    except InputError as e:
        _fail(f"--passages {e}", code=2)
    out, seen = [], set()
    for i, row in enumerate(rows, 1):
        text, pid = row.get("text"), row.get("id", f"passage-{i}")
        if not isinstance(text, str) or not isinstance(pid, str | int) or isinstance(pid, bool):
            _fail(f"--passages {path}, line {i}: needs \"text\" (a string) and an optional \"id\" (a string), e.g. "
                  '{"id": "p1", "text": "Metformin lowers blood glucose. Does it cause weight loss?"}', code=2)
        if str(pid) in seen:
            _fail(f"--passages {path}, line {i}: the id {str(pid)!r} is used twice; give each passage its own id.",
                  code=2)
        seen.add(str(pid))
        try:
            out.append((str(pid), check_passage(text)))
        except InputError as e:
            _fail(f"--passages {path}, line {i} ({str(pid)!r}): {e}", code=2)
    return out


def _check_passages(batch: list[tuple[str, str]], agent, out: Path, extractor: str, workers: int, search: dict,
                    mlflow_log: bool) -> None:
    """--passages: each passage as --text would check it, into out/<id>/; one line each, then summary.json."""
    from biocheck.agent.run import trace_name
    from biocheck.io import write_json_atomic

    summary = []
    for i, (pid, passage) in enumerate(batch, 1):
        folder = out / trace_name(pid)
        result, _ = _check_into(passage, agent, folder, extractor, workers, search, say_note=False,
                                on_interrupt=f"interrupted; finished claims are kept in {out}; rerun the same "
                                             "command to resume.")
        failed = sum(1 for c in result.claims if c.error)
        summary.append({"id": pid, "folder": folder.name, "overall": result.overall, "claims": len(result.claims),
                        "failed": failed, "method": result.method, "note": result.note or None})
        err.print(f"[{i}/{len(batch)}] {pid}: {result.overall}" + (" (sentence rule: the model's extraction was "
                  "not usable)" if result.note else ""), markup=False, highlight=False, soft_wrap=True)
    _run(write_json_atomic, out / "summary.json", {"passages": summary})
    _log_metrics(mlflow_log, {"passages": len(batch), "claims": sum(x["claims"] for x in summary),
                              "failed": sum(x["failed"] for x in summary)}, artifacts=out)
    err.print(f"{len(batch)} passages checked: {out / 'summary.json'}", markup=False, highlight=False)
    failed = [x for x in summary if x["failed"]]
    if failed:
        _fail(f"{sum(x['failed'] for x in failed)} claims failed in {len(failed)} passages (marked FAILED in their "
              f"reports; rerun to retry them); first: {failed[0]['id']}.")


def _check_passage(passage: str, agent, out: Path, fmt: str, extractor: str, workers: int, search: dict,
                   mlflow_log: bool) -> None:
    """--text: the claims extracted, each checked into `out`, the report printed and written beside the traces."""
    result, pages = _check_into(passage, agent, out, extractor, workers, search, say_note=True,
                                on_interrupt=f"interrupted; the traces of the claims that finished are kept in {out}; "
                                             "rerun the same command to resume: those claims are reused and the rest "
                                             "run.")
    _log_metrics(mlflow_log, {"claims": len(result.claims), "skipped": len(result.skipped),
                              "failed": sum(1 for c in result.claims if c.error)}, artifacts=out)
    err.print(f"{result.overall} (reused {result.reused} trace{'' if result.reused == 1 else 's'}; report in "
              f"{out / ('narrative.' + fmt)})", markup=False, highlight=False, soft_wrap=True)
    _echo(pages[fmt])
    failed = [c for c in result.claims if c.error]
    if failed:
        _fail(f"{len(failed)} of {len(result.claims)} claims failed (marked FAILED in the report; rerun to retry "
              f"them); first: {failed[0].id}: {failed[0].error}")


def _check_into(passage: str, agent, folder: Path, extractor: str, workers: int, search: dict, *, say_note: bool,
                on_interrupt: str):
    """One passage: its claims extracted and each checked into `folder`, then narrative.{md,json,html} written
    there (every page rendered before any is written). Returns the result and its pages by format."""
    from biocheck.io import write_text_atomic
    from biocheck.narrative.extract import extract
    from biocheck.narrative.report import FORMATS as REPORT_FORMATS
    from biocheck.narrative.report import render
    from biocheck.narrative.run import check_passage_claims

    extraction = _run(extract, passage, agent.llm if extractor == "model" else None)
    if say_note and extraction.note:
        err.print(f"note: {extraction.note}", markup=False, highlight=False, soft_wrap=True)
    result = _run(check_passage_claims, extraction, agent, folder, workers=workers, search=search,
                  progress=sys.stderr.isatty(), on_interrupt=on_interrupt)
    pages = {f: render(result, f) for f in REPORT_FORMATS}
    for f, page in pages.items():
        _run(write_text_atomic, folder / f"narrative.{f}", page)
    return result, pages


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

