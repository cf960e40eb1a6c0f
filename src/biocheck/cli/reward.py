"""`biocheck score` (a trace's reward, term by term) and `biocheck reward audit` (can the terms reach the
gradient)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from biocheck.cli.base import app
from biocheck.cli.console import _echo, err
from biocheck.cli.errors import _fail, _run, _usage_file
from biocheck.cli.options import GOLD_LABELS, VARIANTS, ParamsOpt


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

