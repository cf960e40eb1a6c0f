"""The evaluation's numbers, from `Prediction`s: per-system metrics, paired tests against the reference
system, DVC plot data and MLflow runs.

Classification follows biocheck.measures (scikit-learn's definitions, None = wrong). Every dict returned
has the same keys for every system and dataset, with None where a number does not apply (EQS of a system
that writes no report, an interval with no resamples), so `dvc metrics diff` and MLflow's compare view
line the systems up. Intervals are {"lo", "hi"} dicts rather than pairs: DVC and MLflow read numbers only.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biocheck import aliases, tracking
from biocheck.evaluate import ratios
from biocheck.evaluate.config import DATASETS, REFERENCE
from biocheck.evaluate.headline import COLUMNS as HEADLINE_COLUMNS
from biocheck.evaluate.rationale import LEVELS as RATIONALE_LEVELS
from biocheck.evaluate.rationale import rationale_scores, sentence_f1
from biocheck.evaluate.systems import AGENTS
from biocheck.evaluate.systems.base import Prediction
from biocheck.io import write_text_atomic
from biocheck.labels import Label
from biocheck.measures import (  # _encode: the paired bootstrap encodes labels as the scores do
    LABEL_SETS,
    OTHER,
    _encode,
    bootstrap,
    bootstrap_ci,
    classification_metrics,
    macro_score,
    proportion_ci,
)
from biocheck.params import plain
from biocheck.rewards.funnel import not_applicable as funnel_not_applicable
from biocheck.rewards.funnel import summarize as funnel_summary
from biocheck.secrets import redact

log = logging.getLogger(__name__)

SCORES = ("accuracy", "macro_precision", "macro_recall", "macro_f1")
# The report metrics (evaluate/ratios.py: ratios of per-claim sums), in the order tables show them.
REPORT = ("parse_rate", "citing_rate", "grounded_rate", "ehr", "ehr_micro", "eqs", "eqs_supporting", "eqs_refuting",
          "rationale_f1")
# The differences the paired tests report: every headline metric (macro-F1 over the dataset's headline labels).
PAIRED = ("accuracy", "macro_f1", "grounded_rate", "citing_rate", "ehr", "ehr_micro", "eqs", "rationale_f1")
# Those that are a yes / no per claim (right, cites, grounded): each also gets McNemar's exact test.
BINARY = tuple(m for m in PAIRED if m in ratios.PROPORTIONS)


# --- per system -------------------------------------------------------------------------------------

def _interval(ci: tuple[float, float] | None) -> dict[str, float | None]:
    return {"lo": ci[0], "hi": ci[1]} if ci is not None else {"lo": None, "hi": None}


def _mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def _check_one(preds: Sequence[Prediction]) -> None:
    """One (system, dataset) at a time, each claim once: mixing them would silently pool the numbers."""
    pairs = sorted({(p.system, p.dataset) for p in preds})
    if len(pairs) > 1:
        raise ValueError(f"predictions mix (system, dataset) pairs {pairs}; pass one pair at a time")
    ids = [p.id for p in preds]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        where = f"{pairs[0][0]}/{pairs[0][1]}" if pairs else "predictions"
        raise ValueError(f"{where}: claim ids {dup} appear more than once; each claim needs one prediction "
                         "(rerun the evaluation to rebuild the predictions file)")


def headline_labels(golds: Sequence[Label | str]) -> str:
    """The label set a dataset's headline scores use: 3-way only where NEI is among the gold labels. On an
    S/R-only set (SciFact val) a 3-way macro-F1 averages in an NEI class with no support and is capped at 2/3."""
    return "3way" if any(_name(g) == Label.NEI.value for g in golds) else "2way"


def _name(x: Label | str | None) -> str | None:
    return x.value if isinstance(x, Label) else x


def _classification(gold: list[str], pred: list[str | None], label_set: str, n_resamples: int,
                    seed: int) -> dict[str, Any]:
    """classification_metrics + intervals, with every key present (None when there is no claim): accuracy
    (a proportion of claims) exact binomial, the macro scores scipy's BCa bootstrap over claims."""
    labels = LABEL_SETS[label_set]
    m = classification_metrics(gold, pred, labels)
    ci = bootstrap_ci(gold, pred, labels, n_resamples, seed)
    right = sum(g == p for g, p in zip(gold, pred, strict=True))
    ci["accuracy"] = proportion_ci(right, len(gold))
    empty = {"precision": None, "recall": None, "f1": None, "support": 0}
    return {
        "n": len(gold),
        **{k: m.get(k) for k in SCORES},
        "per_label": m.get("per_label") or {lab: dict(empty) for lab in labels},
        "confusion": m.get("confusion") or {lab: {c: 0 for c in [*labels, OTHER]} for lab in labels},
        "ci": {k: _interval(ci.get(k)) for k in SCORES},
    }


def system_metrics(preds: Sequence[Prediction], n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Metrics of one system on one dataset (docs/evaluation.md).

    Top level: `label_set` (the headline labels: 3-way where NEI gold exists, else 2-way) and its accuracy,
    macro P/R/F1 and `ci`; `confusion`: the 3-way matrix (+ OTHER); `2way` and `3way`: both
    label sets in full. Report metrics (None for a system that writes no report): parse, citing and grounded
    rates, EHR over citing reports and micro-EHR over items, EQS overall and per side, the rationale F1 and
    SciFact's four evidence scores (`rationale`); each with `<metric>_n` (what its denominator counts) and its
    interval in `ci`. Cost per claim: searches, tokens and errors; not seconds, which are this machine's
    (`cost_seconds`: MLflow's eval runs)."""
    preds = list(preds)
    _check_one(preds)
    gold = [p.gold.value for p in preds]
    pred = [_label(p) for p in preds]
    label_set = headline_labels(gold)
    three = _classification(gold, pred, "3way", n_resamples, seed)
    two = [i for i, g in enumerate(gold) if g in LABEL_SETS["2way"]]
    two = _classification([gold[i] for i in two], [pred[i] for i in two], "2way", n_resamples, seed)
    head = three if label_set == "3way" else two
    # Per-label scores live in `2way` / `3way` only: at the top they would change keys with the label set.
    out: dict[str, Any] = {"n": len(preds), "label_set": label_set, **{k: head[k] for k in SCORES},
                           "confusion": three["confusion"], "ci": dict(head["ci"]), "2way": two, "3way": three}

    reports = any(p.writes_report for p in preds)
    out["writes_report"] = reports
    idx = ratios.resamples(len(preds), n_resamples, seed)  # the same draws as the classification bootstrap
    for metric in REPORT:
        r = ratios.summary(metric, preds, idx)
        out[metric], out[f"{metric}_n"] = r["value"], r["n"]
        out["ci"][metric] = {"lo": r["lo"], "hi": r["hi"]}
    judged = [p.eqs_reward_judge for p in preds if p.eqs_reward_judge is not None]
    out["eqs_reward_judge"] = _mean(judged) if reports else None
    counts = [p.rationale for p in preds if p.rationale is not None]
    out["rationale"] = rationale_scores(counts) if reports and counts else {
        name: {"precision": None, "recall": None, "f1": None} for name in RATIONALE_LEVELS}
    # where grounding breaks, over the claims with gold evidence papers (rewards/funnel.py)
    out["funnel"] = funnel_summary([p.funnel for p in preds]) if reports else funnel_not_applicable()
    out.update(
        errors=sum(p.error is not None for p in preds),
        searches=_mean([p.searches for p in preds]),
        tokens=_mean([p.tokens for p in preds]),
    )
    return out


def cost_seconds(preds: Sequence[Prediction]) -> dict[str, float | None]:
    """`seconds_total` and `seconds_mean` of the claims' episodes, as their traces' times recorded them (a
    cached episode: the time it took when it ran). This machine's times: the eval runs in MLflow show them;
    the metric files DVC tracks do not hold them, so the same inputs give the same bytes anywhere."""
    seconds = [p.seconds for p in preds]
    return {"seconds_total": float(sum(seconds)), "seconds_mean": _mean(seconds)}


# --- paired tests -----------------------------------------------------------------------------------

def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: the binomial test of b successes in b + c trials at p = 1/2 (1 for none)."""
    if b + c == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue)


def mcnemar_counts(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """McNemar's exact test of a per-claim binary outcome (right, cites, grounded) of two systems on the same
    claims: b = claims only `x` has, c = only `y`; p = mcnemar_exact(b, c), which with b + c discordant claims
    is never below 2 x 0.5^(b + c): a few claims cannot give a small p."""
    x, y = np.asarray(x, bool), np.asarray(y, bool)
    b, c = int(np.sum(x & ~y)), int(np.sum(~x & y))
    return {"b": b, "c": c, "p": mcnemar_exact(b, c)}


def _f1_difference(f1: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """The paired statistic of macro-F1: reference minus other, on the same resampled claims."""
    return lambda g, pa, pb, axis=-1: f1(g, pa) - f1(g, pb)


def _empty_pair(reference: str) -> dict[str, Any]:
    return {"reference": reference, "n": 0, "only_reference": 0, "only_other": 0,
            **{m: ratios.paired_stat(math.nan, math.nan, None) for m in PAIRED},
            "mcnemar": {"b": 0, "c": 0, "p": None},
            "mcnemar_by_metric": {m: {"b": None, "c": None, "p": None} for m in BINARY}}


def _label(p: Prediction) -> str | None:
    return p.pred.value if p.pred is not None else None


def _by_id(preds: Sequence[Prediction], name: str) -> dict[str, Prediction]:
    _check_one(preds)
    if any(p.system != name for p in preds):
        raise ValueError(f"paired tests: the predictions under {name!r} are of system {preds[0].system!r}")
    return {p.id: p for p in preds}


def paired_tests(by_system: Mapping[str, Sequence[Prediction]], reference: str = REFERENCE,
                 n_resamples: int = 1000, seed: int = 0, label_set: str | None = None) -> dict[str, dict[str, Any]]:
    """For every system but `reference`, on the claims both answered, paired by claim id: for each metric in
    PAIRED the difference reference minus other (observed `diff`, `n`: the claims it counts in either system,
    bootstrap `mean`, 95% `lo`/`hi`, two-sided `p`, `mdd`: the minimum detectable difference at this n), from one
    seeded resampling of the claims that both systems share; and McNemar's exact test for each per-claim binary
    rate in BINARY (`mcnemar_by_metric`, None where the rate does not apply; accuracy's also as `mcnemar`; b: only
    the reference right / citing / grounded, c: only the other). Macro-F1 is over `label_set` (default: the headline labels of these claims' gold)."""
    if reference not in by_system:
        raise ValueError(f"paired tests: no predictions for the reference system {reference!r} (have: "
                         f"{', '.join(by_system) or 'none'}); evaluate it too, or choose another reference")
    datasets = {p.dataset for preds in by_system.values() for p in preds}
    if len(datasets) > 1:
        raise ValueError(f"paired tests: predictions from several datasets {sorted(datasets)}; pass one at a time")
    ref = _by_id(by_system[reference], reference)
    out: dict[str, dict[str, Any]] = {}
    for name, preds in by_system.items():
        if name == reference:
            continue
        other = _by_id(preds, name)
        ids = sorted(i for i in ref if i in other)  # claim-id order: neither system's file order matters
        res = _empty_pair(reference)
        res.update(n=len(ids), only_reference=len(ref) - len(ids), only_other=len(other) - len(ids))
        for i in ids:
            if ref[i].gold != other[i].gold:
                raise ValueError(f"paired tests: claim {i!r} has gold {ref[i].gold.value} under {reference} but "
                                 f"{other[i].gold.value} under {name}; both must be evaluated on the same data")
        out[name] = res
        if not ids:
            continue
        a, b = [ref[i] for i in ids], [other[i] for i in ids]
        gold = [p.gold.value for p in a]
        labels_name = label_set or headline_labels(gold)
        idx = ratios.resamples(len(ids), n_resamples, seed)
        for m in PAIRED:
            if m != "macro_f1":
                res[m] = ratios.paired_ratio(m, a, b, idx)
            # A per-claim binary rate also gets McNemar's exact test: the bootstrap p of a few claims is far
            # smaller than any exact test of them can be (2 claims that both flip: 0.002 against 0.5).
            if m in BINARY and res[m]["diff"] is not None:
                res["mcnemar_by_metric"][m] = mcnemar_counts(ratios.columns(m, a)[0] > 0, ratios.columns(m, b)[0] > 0)
        # Accuracy's McNemar also at the top level, where the gallery and older readers find it (an answer
        # outside the label set is wrong, as everywhere).
        res["mcnemar"] = mcnemar_counts([p.pred == p.gold for p in a], [p.pred == p.gold for p in b])
        # Macro-F1 over the label set (the claims whose gold is in it), resampled with the same claims.
        labels = LABEL_SETS[labels_name]
        keep = np.array([g in labels for g in gold])
        if keep.any():
            kept = [i for i, k in enumerate(keep) if k]
            g, pa = _encode([gold[i] for i in kept], [_label(a[i]) for i in kept], labels)
            _, pb = _encode([gold[i] for i in kept], [_label(b[i]) for i in kept], labels)
            f1 = macro_score("f1", len(labels))
            ci = None if idx is None else bootstrap(_f1_difference(f1), (g, pa, pb), n_resamples, seed)
            res["macro_f1"] = ratios.paired_stat(float(f1(g, pa)), float(f1(g, pb)), ci, n=len(kept))
    return out


# --- DVC plots --------------------------------------------------------------------------------------

PLOTTED = ("accuracy", "macro_f1")  # the bar charts of scores.csv (dvc.yaml's plots)
# Whose confusion matrices confusion.csv holds: the project's model and the standard-GRPO comparison (the
# baselines' matrices differ little at a glance; every system's counts are in the metrics' `confusion`).
CONFUSION_SYSTEMS = (REFERENCE, "outcome_only")
PLOT_FILES = ("confusion.csv", "scores.csv")  # what plot_data writes into its folder (dvc.yaml's plots read them)


def plot_data(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]], out_dir: Path) -> list[Path]:
    """DVC plot files from {system: {dataset: system_metrics(...)}}, without an empty cell (DVC would draw it
    as 0): `confusion.csv` (one `system,dataset,actual,predicted` row per claim, 3-way, OTHER = no label read)
    for CONFUSION_SYSTEMS (else the first system), drawn by .dvc/plots/confusion_grid.json as one panel per
    system and dataset; `scores.csv` (accuracy and macro-F1, one row per system and dataset, with `_lo`/`_hi`
    columns only when every row has its 95% interval: none with evaluate.bootstrap 0)."""
    out_dir = Path(out_dir)
    shown = [s for s in CONFUSION_SYSTEMS if s in metrics] or list(metrics)[:1]
    lines = [(system, dataset, actual, predicted) for system in shown for dataset, m in metrics[system].items()
             for actual, row in m["confusion"].items() for predicted, count in row.items() for _ in range(count)]
    rows = [(system, dataset, m) for system, by_dataset in metrics.items() for dataset, m in by_dataset.items()]
    bounds = all(m["ci"][s]["lo"] is not None and m["ci"][s]["hi"] is not None for _, _, m in rows for s in PLOTTED)
    parts = ("", "_lo", "_hi") if bounds else ("",)
    scores = [[f"{system} / {dataset}", system, dataset,
               *(m[s] if x == "" else m["ci"][s][x[1:]] for s in PLOTTED for x in parts)] for system, dataset, m in rows]
    header = ["name", "system", "dataset", *(f"{s}{x}" for s in PLOTTED for x in parts)]
    confusion, bars = PLOT_FILES
    return [write_plot_csv(out_dir / confusion, ["system", "dataset", "actual", "predicted"], lines),
            write_plot_csv(out_dir / bars, header, scores)]


def write_plot_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> Path:
    """A DVC plots CSV, atomically; a missing value is refused (a template would draw it as 0)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    if any(v is None for row in rows for v in row):  # DVC's templates would draw an empty cell as 0
        raise ValueError(f"{path}: a plotted value is missing (None); leave the row or column out instead")
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, buf.getvalue())
    return path


# --- MLflow -----------------------------------------------------------------------------------------

# What an eval run logs as metrics (the runs table, the compare view): each headline column with the n it
# counts (headline.COLUMNS, the gallery's and the PR comment's list) and the cost per claim (its seconds from
# cost_seconds: in MLflow, not in the metric files). Everything else
# (intervals, per-label scores, confusion counts, rationale levels, the paired tests) is the run's
# `metrics.json` artifact.
COST = ("searches", "tokens", "seconds_mean", "errors")
RUN_METRICS = (*dict.fromkeys(k for key, _, n in HEADLINE_COLUMNS for k in (key, n)), *COST)
SCOPED = ("systems", "datasets")  # config params an eval run replaces by its own system and dataset


def _numbers(d: Mapping[str, Any]) -> dict[str, Any]:
    """Nested metrics with None as NaN: MLflow drops None, and a missing key would misalign the compare view."""
    return {k: (_numbers(v) if isinstance(v, Mapping) else math.nan if v is None else v) for k, v in d.items()}


def _row(p: Prediction) -> dict[str, Any]:
    return {"id": p.id, "gold": p.gold.value, "pred": _label(p),
            "correct": p.pred == p.gold, "parseable": p.parseable, "cited": p.cited, "hallucinated": p.hallucinated,
            "eqs": p.eqs, "ehr": p.ehr, "rationale_f1": sentence_f1(p.rationale),
            "searches": p.searches, "tokens": p.tokens, "seconds": p.seconds, "error": p.error, "trace": p.trace}


def _params(config: Any, **scope: str) -> dict[str, Any]:
    """The evaluation config as params; with a `scope` (system, dataset, model_alias) those first, in place of
    the lists of every system and dataset: an eval run's params say what it evaluated, a compare-view axis."""
    params = plain(config) if dataclasses.is_dataclass(config) and not isinstance(config, type) else dict(config)
    if not scope:
        return params
    return {**scope, **{k: v for k, v in params.items() if k not in SCOPED}}


def _headline(m: Mapping[str, Any]) -> dict[str, Any]:
    return _numbers({k: m.get(k) for k in RUN_METRICS})


def _trace_samples(config: Any, preds: Sequence[Prediction], tags: Mapping[str, str]) -> None:
    """The first tracking.trace_samples episodes of a run as MLflow traces (agent/tracing.py)."""
    n = tracking.current().config.trace_samples
    out_dir = getattr(config, "out_dir", None)
    if n <= 0 or out_dir is None:
        return
    from biocheck.agent.tracing import log_sample
    from biocheck.evaluate.harness import load_episode

    log_sample([load_episode(out_dir, p) for p in preds[: n * 2]], n, tags=tags)  # a few spare: a trace may be gone


class EvalRuns:
    """The eval experiment's runs (tracking.experiments.eval), open while their work runs, so the MLflow UI shows
    an evaluation in progress: `evaluate` for the whole evaluation (`evaluation()`; config params, then the eval
    JSONs, the `gallery` folder and the test splits as datasets), and in it one child `eval <system> <dataset>`
    per pair (`pair()`), RUNNING from the pair's first episode until its numbers are logged. A run ends
    FINISHED; FAILED when its work raised (then the evaluation fails, and `evaluate` with it); KILLED on Ctrl-C.

    A child's params are its `system`, `dataset` and `model_alias` (the name of the model it ran: selected,
    outcome_only, base, champion, or a registry alias its models:/ URI named; none for a baseline or a model
    given by folder or spec) and the rest of the config; the same three are tags too. When its work is done
    (`log_pair`) it gets its metrics, RUN_METRICS (NaN where a number does not apply, so every run has the same
    keys), the per-claim predictions as the table `predictions.json`, its test split as a dataset, its first
    tracking.trace_samples episodes as MLflow traces, and the tags model_fingerprint, prompt_hash,
    system_fingerprint, writes_report, about.*, registry_aliases and registry_versions (the registry's aliases
    whose version holds the weights the system ran, by fingerprint, as the registry is then: `challenger` alone
    for a selection that did not become the champion; "none" for none), plus the common tags
    (tracking.common_tags). Its full metrics with its paired tests against the reference, the artifact
    `metrics.json`, come when every system has run (`finish`: the tests need them all), and then each registered
    version whose weights a system ran gets that system's metrics (tag_registered_versions).

    The parent does not nest under a `dvc repro`'s pipeline run (it carries its `pipeline_id` tag): in this
    experiment that parent would hold one run only, and the per-system runs would sit two levels down (a
    study's evaluations still nest under the study's run, which groups many).

    Tracking never costs a result: tracking's own guard turns a failing store off with one warning, and any
    other failure of this logging is recorded in `skipped["mlflow"]` (with a warning) and ends the logging,
    never the evaluation."""

    def __init__(self, config: Any, profile: str | None, reference: str = REFERENCE,
                 skipped: dict[str, str] | None = None):
        self.config, self.reference = config, reference
        self.base = {"reference": reference, **({"profile": str(profile)} if profile else {})}
        self.skipped = skipped if skipped is not None else {}
        self.parent: str | None = None
        self.children: dict[tuple[str, str], str] = {}  # (system, dataset) -> run id, in the order they ran
        self.held: dict[str, list[tuple[str, Any]]] = {}  # registry_matches, per system as each one ran

    @property
    def ids(self) -> list[str]:
        """The run ids, the parent's first (none when tracking is off)."""
        return [self.parent, *self.children.values()] if self.parent else []

    @contextlib.contextmanager
    def evaluation(self) -> Iterator[None]:
        """The `evaluate` run around the whole evaluation."""
        with self._run(params=lambda: _params(self.config), tags=lambda: {**self.base, "kind": "summary"},
                       run_name="evaluate", nest_in_pipeline=tracking.in_study()) as active:
            self.parent = active.info.run_id if active is not None else None
            yield

    @contextlib.contextmanager
    def pair(self, system: str, dataset: str) -> Iterator[None]:
        """The `eval <system> <dataset>` run around that pair's work, inside `evaluation()`."""
        if self.parent is None or "mlflow" in self.skipped:
            yield
            return
        scope = {"system": system, "dataset": dataset,
                 "model_alias": tracking.current().model_aliases.get(system, aliases.NONE)}
        with self._run(params=lambda: _params(self.config, **scope),
                       tags=lambda: {**self.base, "kind": "system", **scope},
                       run_name=f"eval {system} {dataset}", parent=self.parent) as active:
            if active is not None:
                self.children[(system, dataset)] = active.info.run_id
            yield

    @contextlib.contextmanager
    def _run(self, params: Callable[[], Any], tags: Callable[[], Any], **kwargs: Any) -> Iterator[Any]:
        """tracking.run, or no run when building its params fails (recorded): the work inside runs either way,
        and what it raises ends the run FAILED."""
        with contextlib.ExitStack() as stack:
            active = None
            if "mlflow" not in self.skipped:
                try:
                    active = stack.enter_context(tracking.run("evaluate", params=params(), tags=tags(), **kwargs))
                except Exception as e:  # noqa: BLE001 (tracking must never cost the evaluation)
                    self._give_up(e)
            yield active

    def log_pair(self, system: str, dataset: str, m: Mapping[str, Any], preds: Sequence[Prediction],
                 system_tags: Mapping[str, str]) -> None:
        """What a pair's run holds once its work is done (inside `pair()`): tags, metrics, predictions, the test
        split, sample traces. `m`: its system_metrics; `system_tags`: model_fingerprint, prompt_hash, ..."""
        if (system, dataset) in self.children and "mlflow" not in self.skipped:
            self._guarded(self._log_pair, system, dataset, m, preds, system_tags)

    def _log_pair(self, system: str, dataset: str, m: Mapping[str, Any], preds: Sequence[Prediction],
                  system_tags: Mapping[str, str]) -> None:
        if system not in self.held:
            self.held[system] = registry_matches({system: system_tags}).get(system, [])
        tracking.set_tags({
            "writes_report": str(bool(m.get("writes_report"))).lower(),
            "model_fingerprint": system_tags.get("model_fingerprint", "unknown"),
            "prompt_hash": system_tags.get("prompt_hash", "unknown"),
            "system_fingerprint": preds[0].fingerprint if preds else "unknown",
            **_registry_tags(self.held[system]),
            # what the numbers can mean (held out, corpus searched, EQS judge): tags, not metrics
            **{f"about.{k}": str(v) for k, v in (m.get("about") or {}).items() if v is not None}})
        tracking.log_metrics(_headline({**m, **cost_seconds(preds)}))  # this machine's seconds: not in the files
        tracking.log_table([_row(p) for p in preds], "predictions.json")
        split = _split_path(dataset)
        if split is not None:
            tracking.log_dataset(split, context="evaluation")
        _trace_samples(self.config, preds, {"system": system, "dataset": dataset,
                                            "model_alias": tracking.current().model_aliases.get(system, aliases.NONE)})

    def finish(self, metrics: Mapping[str, Mapping[str, Mapping[str, Any]]],
               paired: Mapping[str, Mapping[str, Mapping[str, Any]]],
               predictions: Mapping[str, Mapping[str, Sequence[Prediction]]],
               system_tags: Mapping[str, Mapping[str, str]], gallery: Path | None = None) -> list[str]:
        """At the end, inside `evaluation()`: the parent's files and datasets, each pair's `metrics.json` (its
        paired tests need every system), the registered versions' metrics. metrics: {system: {dataset:
        system_metrics}}; paired: {dataset: paired_tests}; predictions: {system: {dataset: [Prediction]}}.
        Returns the run ids, the parent's first."""
        if self.parent is not None and "mlflow" not in self.skipped:
            self._guarded(self._finish, metrics, paired, predictions, system_tags, gallery)
        return self.ids

    def _finish(self, metrics: Mapping[str, Mapping[str, Mapping[str, Any]]],
                paired: Mapping[str, Mapping[str, Mapping[str, Any]]],
                predictions: Mapping[str, Mapping[str, Sequence[Prediction]]],
                system_tags: Mapping[str, Mapping[str, str]], gallery: Path | None) -> None:
        tracking.log_text(json.dumps(metrics, indent=2), "eval.json")
        tracking.log_text(json.dumps(paired, indent=2), "eval_paired.json")
        if gallery is not None:
            tracking.log_artifacts(gallery, artifact_path="gallery")
        for dataset in sorted({d for by_dataset in metrics.values() for d in by_dataset}):
            split = _split_path(dataset)
            if split is not None:
                tracking.log_dataset(split, context="evaluation")
        blank = _empty_pair(self.reference)
        for (system, dataset), run_id in self.children.items():
            m = {**metrics[system][dataset], **cost_seconds(predictions.get(system, {}).get(dataset, []))}
            pair = paired.get(dataset, {}).get(system, blank)
            tracking.log_text(json.dumps({"metrics": m, "paired": pair}, indent=2), "metrics.json", run_id=run_id)
        tag_registered_versions(metrics, system_tags, self.parent, self.held)

    def _guarded(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 (tracking must never cost the evaluation)
            self._give_up(e)

    def _give_up(self, e: Exception) -> None:
        why = redact(f"{type(e).__name__}: {e}").splitlines()[0][:300]
        log.warning("evaluate: mlflow skipped (%s)", why)
        self.skipped["mlflow"] = why


def _split_path(dataset: str) -> Path | None:
    """The prepared test split of `dataset` (tracking context: the prepared folder); None when unknown."""
    prepared = tracking.current().prepared_dir
    return prepared / f"{DATASETS[dataset]}.jsonl" if prepared is not None and dataset in DATASETS else None


VERSION_METRICS = ("n", *SCORES, "parse_rate", "citing_rate", "grounded_rate", "ehr", "ehr_micro", "eqs",
                   "rationale_f1")  # the numbers attached to a registered version's logged model


def registry_matches(system_tags: Mapping[str, Mapping[str, str]]) -> dict[str, list[tuple[str, Any]]]:
    """{system: [(alias, ModelVersion)]}: the registry's aliases (aliases.REGISTRY, in that order) whose version
    holds the weights each agent system ran (the version's model_fingerprint tag is the one in the system's
    episodes; a registered version is the agent, so a baseline on the same weights is not an evaluation of
    it). Read from the registry as it is now (tracking context: the registered model); empty when tracking is
    off, there is no registered model, or nothing matches."""
    ctx = tracking.current()
    if not ctx.registered_model or not tracking.enabled():
        return {}
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    versions: dict[str, Any] = {}
    with tracking.guard(f"reading the aliases of {ctx.registered_model}"):
        client = MlflowClient()
        for alias in aliases.REGISTRY:
            try:
                versions[alias] = client.get_model_version_by_alias(ctx.registered_model, alias)
            except MlflowException:  # no such model or alias yet
                continue
    found = {}
    for system, tags in system_tags.items():
        ran = (tags or {}).get("model_fingerprint") if system in AGENTS else None
        held = [(alias, v) for alias, v in versions.items() if ran and v.tags.get("model_fingerprint") == ran]
        if held:
            found[system] = held
    return found


def _registry_tags(held: Sequence[tuple[str, Any]]) -> dict[str, str]:
    """registry_aliases ("champion,challenger", or "none") and registry_versions ("3", "2,3", or "none")."""
    numbers = sorted({int(v.version) for _, v in held})
    return {"registry_aliases": ",".join(alias for alias, _ in held) or aliases.NONE,
            "registry_versions": ",".join(map(str, numbers)) or aliases.NONE}


def tag_registered_versions(metrics: Mapping[str, Mapping[str, Mapping[str, Any]]],
                            system_tags: Mapping[str, Mapping[str, str]], run_id: str,
                            held: Mapping[str, Sequence[tuple[str, Any]]] | None = None) -> list[str]:
    """Attach each evaluated system's metrics to the registered versions that hold the weights it ran
    (`held`, registry_matches's answer; read here when None): `<dataset>.<metric>` for VERSION_METRICS as
    metrics of the version's logged model (MLflow 3: logged in the model's `select` run with its model id,
    linked to the test split as a dataset where the prepared data is known), and the version's tag `eval_run`
    (runs:/<id> of the evaluation). An agent system whose weights no alias holds is logged (its numbers stay
    on the evaluation's runs). Returns the aliases whose versions got them."""
    ctx = tracking.current()
    if not ctx.registered_model or not tracking.enabled():
        return []
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    held = registry_matches(system_tags) if held is None else held
    tagged = []
    for system in metrics:
        if system not in held:
            if ctx.model_aliases.get(system, aliases.NONE) != aliases.NONE:
                log.info("MLflow: no alias of %s (%s) holds the model %s ran (fingerprint %s); its evaluation "
                         "metrics stay on the run", ctx.registered_model, ", ".join(aliases.REGISTRY), system,
                         (system_tags.get(system) or {}).get("model_fingerprint", "unknown"))
            continue
        done: set[str] = set()  # two aliases on one version: its metrics once
        for alias, version in held[system]:
            model_id = tracking.version_model_id(version)
            if not model_id or not version.run_id:
                log.info("MLflow: %s version %s (%s) holds no logged model; no metrics attached",
                         ctx.registered_model, version.version, alias)
                continue
            if str(version.version) not in done:
                with tracking.guard(f"attaching the evaluation to {ctx.registered_model}@{alias}"):
                    now = int(time.time() * 1000)
                    batch = [Metric(f"{dataset}.{key}", float(m[key]), now, 0, model_id=model_id,
                                    **_split_identity(dataset))
                             for dataset, m in metrics[system].items() for key in VERSION_METRICS
                             if isinstance(m.get(key), (int, float)) and not isinstance(m.get(key), bool)]
                    client = MlflowClient()
                    client.log_batch(version.run_id, metrics=batch)
                    client.set_model_version_tag(ctx.registered_model, version.version, "eval_run",
                                                 f"runs:/{run_id}")
                    done.add(str(version.version))
            if str(version.version) in done:
                tagged.append(alias)
    return tagged


def _split_identity(dataset: str) -> dict[str, str]:
    """dataset_name/dataset_digest of the test split `dataset` (as log_dataset names it), when it is on disk."""
    split = _split_path(dataset)
    if split is None or not split.is_file():
        return {}
    return {"dataset_name": f"{split.parent.name}/{split.stem}", "dataset_digest": tracking.file_md5(split)}
