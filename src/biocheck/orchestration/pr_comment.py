"""The pull-request evaluation comment (`biocheck report pr`): Markdown for one PR comment, updated in place.

It compares the evaluation in the working tree (what `dvc repro evaluate` just wrote) with the one committed
at the base ref (`git show REF:reports/eval_metrics.json`, or `metrics/eval.json` at a base from before it moved): one row per system and dataset with each headline metric
and its signed change, the paired tests of this run, the raw `dvc metrics diff REF --md`, which stages were
out of date before the run (the JSON of `dvc status --json`) and a link to the uploaded gallery.

It claims no more than its n can carry: every metric whose n is not the row's claims shows its own n, a per-claim
binary metric's p is McNemar's exact test (whose p with k discordant claims is never below 2 x 0.5^k), any other
p is shown no lower than the smallest an exact paired test on its n claims can give, and a profile whose scores
are not meaningful (the quickstart, which the workflow runs) says so at the top.

Nothing here fails on missing input: a base ref that does not exist, or metrics missing on one side, become a
line in the comment saying what is missing (and `problems`, which the CLI prints), so the workflow still
posts a comment that explains itself. When the pipeline itself failed (`repro_outcome`), the comment says in
which stage, with the last lines of its log, instead of comparing metrics that this run did not write.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from biocheck.bounds import Positive
from biocheck.evaluate.config import EvaluateConfig
from biocheck.evaluate.gallery_svg import interval, number
from biocheck.evaluate.headline import COLUMNS, PAIRED_NAMES, dataset_notes, p_text
from biocheck.io import InputError
from biocheck.orchestration.dvc import DvcError, failed_stage, failure_reason, metrics_diff
from biocheck.params import DEFAULT_PARAMS, load_params
from biocheck.secrets import redact

MARKER = "<!-- biocheck-pr-eval -->"  # the comment's first line: the workflow finds the comment to update by it
DIGITS = 3
# The metric table's columns: (key in eval.json, header, digits shown).
HEADLINE = (("n", "n", 0), ("accuracy", "accuracy", DIGITS), ("macro_f1", "macro-F1", DIGITS),
            ("citing_rate", "citing rate", DIGITS), ("ehr", "EHR (citing)", DIGITS), ("ehr_micro", "micro-EHR", DIGITS),
            ("eqs", "EQS", DIGITS), ("rationale_f1", "rationale F1", DIGITS))
MAX_CHARS = 65_000  # GitHub refuses a comment body over 65,536 characters: the dvc table is cut to fit
STATUS_PATHS = 6  # paths listed per stage and kind of change; the rest are counted
_EVAL = EvaluateConfig()  # where the evaluate stage writes its metrics (one source for the paths)
MINUS = "−"  # U+2212: a typographic minus in the deltas
LOG_TAIL_LINES = 40  # the end of a failed run's log shown in the comment
LOG_LINE_CHARS = 500  # a longer log line (a progress bar redrawn in place) is cut
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # colours and cursor moves in a captured terminal log
MISSING = "deleted"  # what `dvc status` says of a dependency or output that is not in the workspace
N_KEYS = {key: n_key for key, _, n_key in COLUMNS}  # each metric's own n (EHR: citing reports, EQS: judged ones)
# params.yaml's `profile` -> the line the comment opens with: that profile's scores say nothing about the model.
NOT_MEANINGFUL = {"quickstart": "quickstart profile: a tiny model on a few claims; these scores prove the pipeline "
                                "runs, they are not meaningful."}


class Outcome(StrEnum):
    """How the workflow's `dvc repro` step ended: GitHub's `steps.<id>.outcome`."""

    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class Remote(StrEnum):
    """What the workflow's pull step found: no DVC remote configured, a pull that worked, a pull that failed."""

    NONE = "none"
    PULLED = "pulled"
    FAILED = "failed"


@dataclass
class PrCommentConfig:
    base: str  # the git ref to compare against, e.g. origin/main
    status_path: Path | None = None  # `dvc status --json` captured before the run; None: not provided
    artifact_url: str | None = None  # the uploaded gallery
    root: Path = Path(".")  # the repository (git and DVC run here)
    metrics_path: Path = _EVAL.metrics_path  # every number (a plain output, in git)
    paired_path: Path = _EVAL.paired_path
    headline_dir: Path = _EVAL.headline_dir  # DVC's metrics: what `dvc metrics diff` compares
    dvc_timeout_s: Positive = 300.0
    repro_outcome: Outcome = Outcome.SUCCESS  # anything else: a failure comment
    repro_log: Path | None = None  # what `dvc repro` printed; its stage and tail go into a failure comment
    remote: Remote | None = None  # None: not said; the status then lists every change as DVC reports it
    params_path: Path = DEFAULT_PARAMS  # under root: its `profile` says whether the scores can mean anything


@dataclass
class PrComment:
    markdown: str
    problems: list[str] = field(default_factory=list)  # what is missing; empty: the comment is complete


def build(cfg: PrCommentConfig) -> PrComment:
    """The comment's Markdown and the list of what was missing (each also said in the comment)."""
    if Outcome(cfg.repro_outcome) is not Outcome.SUCCESS:
        return _failure_comment(cfg)
    problems: list[str] = []
    root, metrics_path = Path(cfg.root), Path(cfg.metrics_path)
    ref_error = _check_ref(root, cfg.base)
    if ref_error:
        problems.append(ref_error)
        base = None
    else:
        base, why = _base_json(root, cfg.base, metrics_path)
        if why:
            problems.append(why)
    new, why = _workspace_json(root / metrics_path)
    if why:
        problems.append(why)
    paired, paired_why = _workspace_json(root / cfg.paired_path)

    head = [MARKER, "## BioCheck evaluation", ""]
    head.append(f"This pull request's evaluation (`{metrics_path.as_posix()}`) against the base `{_md(cfg.base)}`.")
    caveat = NOT_MEANINGFUL.get(_profile(root / cfg.params_path) or "")
    if caveat:
        head += ["", f"> **{_html(caveat)}**"]
    if cfg.artifact_url:
        head.append(f"Gallery (every claim, every system): [download the artifact]({_url(cfg.artifact_url)}).")
    for i, problem in enumerate(problems):  # one quoted paragraph each ('>' alone keeps them apart)
        head += [">" if i else "", f"> **Missing:** {_html(problem)}"]
    body = [*head, "", "### What the numbers can mean", "", *_notes(new), "",
            "### Metrics per system and dataset", "", *_metric_table(new, base), "",
            "### Paired tests (this run)", "", *_paired_table(paired, paired_why), "",
            "### Stages that were out of date before the run", "", *_status(cfg.status_path, cfg.remote), ""]
    diff = _dvc_diff(cfg, skip=ref_error)
    text = "\n".join(body) + "\n" + _details(diff, MAX_CHARS - len("\n".join(body)) - 200)
    return PrComment(markdown=redact(text), problems=[redact(p) for p in problems])


# --- a failed run -------------------------------------------------------------------------------------

def _failure_comment(cfg: PrCommentConfig) -> PrComment:
    """Which stage failed and the end of its log; no metric comparison: the evaluation files in the working
    tree are the ones committed on the branch, not this run's."""
    lines = [MARKER, "## BioCheck evaluation", "", "### The pipeline failed", "",
             *_failure(Outcome(cfg.repro_outcome), cfg.repro_log), "",
             f"No comparison with the base `{_md(cfg.base)}`: the evaluation files in the working tree are not this "
             "run's (they are the ones committed on this branch, if any).", "",
             "### Stages that were out of date before the run", "", *_status(cfg.status_path, cfg.remote), ""]
    return PrComment(markdown=redact("\n".join(lines)))


def _failure(outcome: Outcome, log_path: Path | None) -> list[str]:
    if outcome is not Outcome.FAILURE:
        return [f"`dvc repro` did not run to the end (its step was {outcome.value}): see the workflow run's log."]
    if log_path is None:
        return ["`dvc repro` failed; no log was given (`--repro-log`): see the workflow run's log."]
    try:
        text = Path(log_path).read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        return [f"`dvc repro` failed; no log: {_html(log_path)} could not be read ({_html(e.strerror or e)})."]
    lines = [ANSI.sub("", line).rsplit("\r", 1)[-1] for line in text.splitlines()]
    stage = failed_stage(lines)
    where = f"in stage **{_md(stage)}**" if stage else "before any stage ran"
    tail = [line[:LOG_LINE_CHARS] for line in lines[-LOG_TAIL_LINES:]]
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", "\n".join(tail))), default=0))
    # the reason is a line of the log, like the tail: code, never Markdown (`@everyone`, links, quotes)
    return [f"`dvc repro` failed {where}:", "", f"> {_code(failure_reason(lines)[:LOG_LINE_CHARS])}", "",
            f"The last {len(tail)} lines of its log:", "", f"{fence}text", *tail, fence]


# --- inputs -----------------------------------------------------------------------------------------

def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)


def _check_ref(root: Path, ref: str) -> str | None:
    """Why `ref` cannot be the base (None: it names a commit)."""
    if not ref or ref.startswith("-"):  # an option, not a ref: never hand it to git or dvc
        return f"base ref {ref!r} is not a git ref: give a branch, tag or commit (e.g. --base origin/main)"
    try:
        r = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run git in {root} ({e}): install git and run from the repository"
    if r.returncode != 0:
        return (f"base ref {ref!r} does not exist in {root.resolve()}: fetch it (`git fetch origin`, or "
                "actions/checkout with fetch-depth: 0) or give another --base")
    return None


def _parse(text: str, where: str) -> tuple[Mapping | None, str | None]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        return None, f"{where} is not valid JSON ({e.msg}, line {e.lineno}): rerun `dvc repro evaluate`"
    if not isinstance(data, Mapping):
        return None, f"{where} is not a JSON object: rerun `dvc repro evaluate`"
    return data, None


# Where the evaluation's full metrics lived before they moved to reports/ (issue 31): a base branch committed
# before the move still compares.
OLD_METRICS_PATH = Path("metrics/eval.json")


def _base_json(root: Path, ref: str, path: Path) -> tuple[Mapping | None, str | None]:
    try:
        r = _git(root, "show", f"{ref}:./{path.as_posix()}")
        if r.returncode != 0 and path == _EVAL.metrics_path:
            old = _git(root, "show", f"{ref}:./{OLD_METRICS_PATH.as_posix()}")
            if old.returncode == 0:
                return _parse(old.stdout, f"{OLD_METRICS_PATH.as_posix()} at {ref}")
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"cannot read {path.as_posix()} at {ref} ({e})"
    if r.returncode != 0:
        return None, (f"no {path.as_posix()} at {ref}: the base branch has no committed evaluation, so there "
                      "is nothing to compare with (commit the metrics of a `dvc repro evaluate` run there)")
    return _parse(r.stdout, f"{path.as_posix()} at {ref}")


def _workspace_json(path: Path) -> tuple[Mapping | None, str | None]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"no {path.as_posix()} in the working tree: run `dvc repro evaluate` first"
    except OSError as e:
        return None, f"cannot read {path.as_posix()} ({e.strerror or e})"
    return _parse(text, f"{path.as_posix()} in the working tree")


def _profile(path: Path) -> str | None:
    """params.yaml's `profile` (None when unreadable or unset: no caveat, and nothing to fail on)."""
    try:
        profile = load_params(path).get("profile")
    except InputError:
        return None
    return str(profile) if profile is not None else None


# --- the metric table ---------------------------------------------------------------------------------

def _html(text: object) -> str:
    """Our own sentences (which quote a ref or a path): no HTML gets through, Markdown code spans do."""
    return str(text).replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _code(text: str) -> str:
    """One line of someone else's text as a Markdown code span: no mention, link or emphasis gets through."""
    if not text.strip():
        return "(no error line)"
    ticks = "`" * (1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    return f"{ticks} {text} {ticks}" if text.startswith("`") or text.endswith("`") else f"{ticks}{text}{ticks}"


def _md(text: object) -> str:
    """Text safe inside a Markdown table cell (names come from files a pull request can change)."""
    return (str(text).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("`", "'").replace("\n", " "))


def _url(url: str) -> str:
    return url.replace(" ", "%20").replace(")", "%29").replace("(", "%28")


def _num(x: float, digits: int = DIGITS) -> str:
    return f"{x:.{digits}f}".replace("-", MINUS)


def _signed(d: float, digits: int = DIGITS) -> str:
    """A change with its sign; one too small to show at `digits` still shows which way it went."""
    sign = "+" if d > 0 else MINUS if d < 0 else "±"
    step = 10.0 ** -digits
    return f"{sign}<{step:.{digits}f}" if 0 < abs(d) < step / 2 else f"{sign}{abs(d):.{digits}f}"


def cell(new: object, old: object, digits: int = DIGITS, *, has_base: bool = True) -> str:
    """A metric's new value and its signed change against the base: `0.625 (+0.125)`, `0.500 (−0.050)`,
    `0.500 (unchanged)`; `n/a` where a number does not apply (EQS of a label-only system)."""
    a, b = number(new), number(old)
    if a is None:
        return "n/a" if b is None or not has_base else f"n/a (was {_num(b, digits)})"
    if not has_base:
        return _num(a, digits)
    if b is None:
        return f"{_num(a, digits)} (was n/a)"
    if a == b:
        return f"{_num(a, digits)} (unchanged)"
    return f"{_num(a, digits)} ({_signed(a - b, digits)})"


def _rows(data: Mapping | None) -> dict[tuple[str, str], Mapping]:
    """{(system, dataset): metrics} from eval.json's {system: {dataset: {...}}}, in the file's order."""
    out: dict[tuple[str, str], Mapping] = {}
    for system, by_dataset in (data or {}).items():
        if isinstance(by_dataset, Mapping):
            for dataset, m in by_dataset.items():
                if isinstance(m, Mapping):
                    out[(str(system), str(dataset))] = m
    return out


def _metric_table(new: Mapping | None, base: Mapping | None) -> list[str]:
    now, was = _rows(new), _rows(base)
    if not now and not was:
        return ["No evaluation metrics on either side."]
    header = ["system", "dataset", *(label for _, label, _ in HEADLINE), "vs base"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 2 + "---:|" * len(HEADLINE) + "---|"]
    keys = [*now, *(k for k in was if k not in now)]  # this run's rows first, then the removed ones
    for key in keys:
        m, b = now.get(key), was.get(key)
        if m is None:  # only at the base: removed, its old values struck through
            cells = ["n/a" if (v := number(b.get(k))) is None else f"~~{_num(v, digits)}~~" for k, _, digits in HEADLINE]
            state = "removed"
        elif b is None:
            cells = [cell(m.get(k), None, digits, has_base=False) + _own_n(m, k) for k, _, digits in HEADLINE]
            state = "new" if base is not None else "no base"
        else:
            cells = [cell(m.get(k), b.get(k), digits) + _own_n(m, k) for k, _, digits in HEADLINE]
            same = all(number(m.get(k)) == number(b.get(k)) for k, _, _ in HEADLINE)
            state = "unchanged" if same else "changed"
        lines.append("| " + " | ".join([_md(key[0]), _md(key[1]), *cells, state]) + " |")
    return lines


def _own_n(m: Mapping, key: str) -> str:
    """`, n=3` after a metric counted over other than the row's n claims (EHR over 3 citing reports of 8): a
    rate of 1 of 1 must not read like a rate of 8 of 8."""
    own, n = number(m.get(N_KEYS.get(key, ""))), number(m.get("n"))
    return "" if own is None or number(m.get(key)) is None or own == n else f", n={_num(own, 0)}"


def _notes(new: Mapping | None) -> list[str]:
    notes = dataset_notes(new or {})
    if not notes:
        return ["No notes in this evaluation's metrics (an older evaluation's metrics)."]
    return [f"- **{_md(d)}**: {_md('; '.join(n))}" for d, n in notes.items()] + [
        "", "EHR counts only the reports that cite: read it beside the citing rate. Rationale F1: SciFact's "
        "sentence-level selection + label F1 against the gold rationales (no judge). Macro-F1 is 2-way on a set "
        "without NEI gold."]


# --- the paired tests ---------------------------------------------------------------------------------

def _sub(d: Mapping, key: str) -> Mapping:
    return d[key] if isinstance(d.get(key), Mapping) else {}


def _p(x: object, n: float | None = None) -> str:
    """A p as every output prints it (headline.p_text), bold below SIGNIFICANT. With `n` (the claims the test
    had: a bootstrap's paired claims, McNemar's discordant ones) it is shown no lower than 2 x 0.5^n, the smallest
    p an exact paired test of n claims can give (McNemar with all n discordant): a bootstrap of 2 claims says
    0.002 where no test of them can go below 0.5. Such a raised p is marked `≥` (unless both print as `<0.001`,
    which n >= 11 claims can reach)."""
    v = number(x)
    if v is None:
        return "n/a"
    raised = False
    if n is not None:
        from biocheck.evaluate.compare import mcnemar_exact  # scipy: only when a comment is built

        least = mcnemar_exact(int(n), 0)
        raised, v = v < least, max(v, least)
    text, significant = p_text(v)
    text = ("≥" if raised and not text.startswith("<") else "") + text
    return f"**{text}**" if significant else text


def _test_p(key: str, stat: Mapping, t: Mapping) -> str:
    """The p of one paired metric, no lower than the claims its own test had allow: McNemar's exact p with its
    b + c discordant claims (b / c shown) for a per-claim binary metric (compare.paired_tests' `mcnemar_by_metric`;
    accuracy's also as `mcnemar`, all that evaluations from before it have), else the bootstrap's p over the
    claims that metric counts (its own `n`: EHR's citing claims, not the comparison's n; the comparison's n in an
    evaluation from before the metrics had their own)."""
    mc = _sub(_sub(t, "mcnemar_by_metric"), key) or (_sub(t, "mcnemar") if key == "accuracy" else {})
    b, c = number(mc.get("b")), number(mc.get("c"))
    if b is not None and c is not None:
        return f"{_p(mc.get('p'), b + c)} (McNemar {_num(b, 0)} / {_num(c, 0)})"
    own = number(stat.get("n"))
    return _p(stat.get("p"), own if own is not None else number(t.get("n")))


def _diff(stat: Mapping) -> str:
    """`+0.250 [0.000, 0.500]`: the observed difference and its paired-bootstrap interval; a point interval
    (every resample the same difference, as with 2 claims that both flip) is no interval and is not shown as one."""
    d = number(stat.get("diff"))
    if d is None:
        return "n/a"
    ci = interval(stat)
    if ci and ci[0] == ci[1]:
        return _signed(d) + " (no interval: every resample the same)"
    return _signed(d) + (f" [{_num(ci[0])}, {_num(ci[1])}]" if ci else "")


def _paired_table(paired: Mapping | None, why: str | None) -> list[str]:
    if paired is None:
        return [f"Not available: {_md(why)}."]
    rows = [(str(d), str(s), t) for d, by_system in paired.items() if isinstance(by_system, Mapping)
            for s, t in by_system.items() if isinstance(t, Mapping)]
    if not rows:
        return ["No paired tests: the evaluation ran one system, or not the reference system."]
    lines = ["Δ = reference minus system on the n claims both answered, paired by claim id (for EHR a negative Δ "
             "favours the reference); paired bootstrap 95% interval; MDD: the smallest true Δ this n finds with 80% "
             "power. p: McNemar's exact test for per-claim yes/no metrics (accuracy, citing, grounded; b / c: claims "
             "only the reference / only the system gets), never below 2 × 0.5^(b + c); else the bootstrap's, shown "
             "no lower (≥) than 2 × 0.5^n for the n claims that metric counts (EHR: those where either cites). "
             "Bold: p < 0.05.", "",
             "| dataset | comparison | n | metric | Δ [95% CI] | p | MDD |", "|---|---|---:|---|---:|---:|---:|"]
    for dataset, system, t in rows:
        n = number(t.get("n"))
        lead = [_md(dataset), f"{_md(t.get('reference', '?'))} vs {_md(system)}", "n/a" if n is None else _num(n, 0)]
        for key, name in PAIRED_NAMES.items():
            stat = _sub(t, key)
            if number(stat.get("diff")) is None:
                continue
            mdd = number(stat.get("mdd"))
            lines.append("| " + " | ".join([*lead, name, _diff(stat), _test_p(key, stat, t),
                                             "n/a" if mdd is None else _num(mdd)]) + " |")
    return lines


# --- which stages reran -------------------------------------------------------------------------------

def _changes(kind: str, paths: Mapping) -> str:
    """'deps: in.txt (modified), params.yaml: evaluate (modified)' from one `changed deps` mapping."""
    items = []
    for path, what in paths.items():
        if isinstance(what, Mapping):  # params: {file: {key: modified}}
            items += [f"`{_md(path)}`: `{_md(k)}` ({_md(v)})" for k, v in what.items()]
        else:
            items.append(f"`{_md(path)}` ({_md(what)})")
    more = f", … {len(items) - STATUS_PATHS} more" if len(items) > STATUS_PATHS else ""
    return f"{kind}: " + ", ".join(items[:STATUS_PATHS]) + more


def _present(entries: object) -> list:
    """A stage's `dvc status` entries without the files that are merely not in the workspace ("deleted"
    dependencies and outputs): without a remote, that is every output of every stage, and says nothing."""
    out = []
    for entry in entries if isinstance(entries, list) else [entries]:
        if isinstance(entry, Mapping):
            kept = {k: {p: w for p, w in v.items() if w != MISSING} if isinstance(v, Mapping) else v
                    for k, v in entry.items()}
            kept = {k: v for k, v in kept.items() if v}
            if kept:
                out.append(kept)
        else:
            out.append(entry)
    return out


REMOTE_LINES = {
    Remote.NONE: "No DVC remote: everything was recomputed.",
    Remote.FAILED: "The DVC remote could not be pulled from: everything was recomputed.",
}


def _status(path: Path | None, remote: Remote | None = None) -> list[str]:
    if path is None:
        return ["Not provided (`--status`: the output of `dvc status --json` before the run)."]
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8") or "null")
    except (OSError, json.JSONDecodeError) as e:
        return [f"Not available: {_md(path)} could not be read ({_md(getattr(e, 'strerror', None) or e)})."]
    if not isinstance(data, Mapping):
        return [f"Not available: {_md(path)} is not the JSON object `dvc status --json` prints."]
    if not data:
        return ["Everything was up to date: no stage reran."]
    lines: list[str] = []
    if remote is not None:  # files missing from the workspace are the remote's story, told in one line
        remote = Remote(remote)
        present = {stage: _present(entries) for stage, entries in data.items()}
        missing = [str(stage) for stage, entries in present.items() if not entries]
        data = {stage: entries for stage, entries in present.items() if entries}
        if remote in REMOTE_LINES:
            lines.append(REMOTE_LINES[remote])
        elif missing:
            lines.append(f"Not in the DVC remote (recomputed): {_md(', '.join(missing))}.")
        if not data:
            return lines
        lines += ["", "Changed since `dvc.lock`:", ""]
    for stage, entries in data.items():
        parts = []
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, Mapping):
                parts += [_changes(k.replace("changed ", ""), v) if isinstance(v, Mapping) else f"{_md(k)}: {_md(v)}"
                          for k, v in entry.items()]
            else:
                parts.append(_md(entry))  # "changed command", "always changed"
        lines.append(f"- **{_md(stage)}**: " + "; ".join(parts))
    lines += ["", "These stages reran, and with them every stage downstream whose inputs they changed."]
    return lines


# --- dvc metrics diff ---------------------------------------------------------------------------------

def _dvc_diff(cfg: PrCommentConfig, skip: str | None) -> str:
    """`dvc metrics diff BASE --md` over the evaluation's metric files, or why it is not shown."""
    if skip:
        return "Not run: the base ref is not available."
    targets = [Path(cfg.headline_dir).as_posix()]
    try:
        diff = metrics_diff(cfg.root, cfg.base, targets, timeout=cfg.dvc_timeout_s)
    except DvcError as e:
        return f"`dvc metrics diff` {_md(e)}"
    rows = diff.splitlines()
    kept = [row for row in rows if not _timing(row)]
    if len(kept) <= 2 < len(rows):  # only the header is left
        return "No metric changed but the timings."
    return "\n".join(kept) or "No metric changed."


def _timing(row: str) -> bool:
    """A `dvc metrics diff --md` row of a timing (`seconds_total`, `train_seconds`): it changes on every run
    and says nothing about the pull request."""
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    metric = cells[1].rsplit(".", 1)[-1] if len(cells) > 1 else ""
    return metric.startswith("seconds") or metric.endswith("_seconds")


def _details(diff: str, budget: int) -> str:
    """The dvc table in a collapsed block, cut at a line boundary when the comment would be too long."""
    lines = diff.splitlines()
    kept, size = [], 0
    for i, line in enumerate(lines):
        if size + len(line) + 1 > budget:
            kept.append(f"\n… {len(lines) - i} more rows: run `dvc metrics diff BASE --md` locally.")
            break
        kept.append(line)
        size += len(line) + 1
    body = "\n".join(kept)
    return (f"<details><summary><code>dvc metrics diff</code> (every evaluation metric that changed)</summary>\n\n"
            f"{body}\n\n</details>\n")
