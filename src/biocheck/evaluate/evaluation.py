"""The evaluate stage: every system on every dataset, then metrics, paired tests, plots, gallery and MLflow.

Order matters for what survives a failure: each (system, dataset) writes its predictions as soon as it is
done; the metric files come next: every number (`metrics_path`, `paired_path`: plain outputs) and the
headline numbers DVC shows (`headline_dir/<dataset>/<system>.json`, headline.headline_row) and as a table a
terminal shows (`table_path`); the plots, the gallery and MLflow are optional extras, each guarded, so a
missing browser library or a tracking server that is down never loses the predictions or the metrics. Every
file is written atomically. The MLflow runs are open while their work runs (compare.EvalRuns): `evaluate`
for the whole stage, `eval <system> <dataset>` while that pair's episodes run and are scored.

Nothing is removed before the new results exist: DVC keeps these plain outputs while the stage runs
(`persist` in dvc.yaml), so a run that fails (a typo in evaluate.systems, a crash) leaves the previous ones.
An extra that fails after new metrics were written is removed instead: plots or a gallery of the previous
run beside new numbers would be read as current.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from biocheck.data.schema import ClaimRecord
from biocheck.evaluate import compare
from biocheck.evaluate.config import REFERENCE, EvaluateConfig
from biocheck.evaluate.harness import Scorer, load_episode, predictions_path, run_system
from biocheck.evaluate.headline import headline_row, headline_table
from biocheck.evaluate.systems.base import Prediction, System
from biocheck.io import InputError, atomic_dir, write_json_atomic, write_text_atomic
from biocheck.outputs import claim_dir
from biocheck.secrets import redact

log = logging.getLogger(__name__)


def evaluate(cfg: EvaluateConfig, systems: dict[str, System], claims: dict[str, list[ClaimRecord]],
             scorer: Scorer | None, progress: bool = True, profile: str | None = None,
             about: dict[str, dict[str, Any]] | None = None, models: dict[str, str] | None = None,
             params_digest: str | None = None) -> dict[str, Any]:
    """Run and compare; return {metrics, paired, predictions (paths), gallery, skipped (optional steps that
    failed, with why)}. `claims`: dataset name -> its claims (cfg.limit takes the first N of each). `about`:
    dataset name -> what its numbers can mean (config.dataset_about, plus the EQS judge), written into
    every metrics row as `about` so no number travels without it, with which model the row's system ran
    (`models`: system -> model spec; its weights' fingerprint when known) and `params_digest` (what the whole
    run ran with): a metrics file names what it describes."""
    missing = [d for d in cfg.datasets if d not in claims]
    if missing:
        raise InputError(f"evaluate: no claims given for dataset(s) {', '.join(missing)}")
    from biocheck.evaluate.gallery import OUTPUT

    claim_dir(cfg.report_dir, *OUTPUT)  # before hours of episodes: the gallery may replace only a gallery
    _claim_headline(cfg.headline_dir)
    datasets = list(cfg.datasets)
    subsets = {d: claims[d][: cfg.limit] if cfg.limit else list(claims[d]) for d in datasets}

    preds: dict[tuple[str, str], list[Prediction]] = {}
    tags: dict[str, dict[str, str]] = {}
    metrics: dict[str, dict[str, dict[str, Any]]] = {}
    skipped: dict[str, str] = {}
    # MLflow: `evaluate` open for the whole evaluation, each `eval <system> <dataset>` while that pair runs
    runs = compare.EvalRuns(cfg, profile, reference=REFERENCE, skipped=skipped)
    with runs.evaluation():
        for name, system in systems.items():
            try:
                for d in datasets:
                    with runs.pair(name, d):
                        preds[(name, d)] = run_system(system, subsets[d], d, cfg.out_dir, workers=cfg.workers,
                                                      progress=progress, scorer=scorer)
                        if name not in tags:
                            tags[name] = _tags(system, preds[(name, d)], cfg.out_dir)
                        metrics.setdefault(name, {})[d] = {
                            **compare.system_metrics(preds[(name, d)], cfg.bootstrap, cfg.seed),
                            "about": {**(about or {}).get(d, {}), **_ran(name, models, tags, params_digest)}}
                        runs.log_pair(name, d, metrics[name][d], preds[(name, d)], tags[name])
            finally:
                close = getattr(system, "close", None)
                if callable(close):  # free its model before the next system loads one
                    close()

        write_json_atomic(cfg.metrics_path, metrics)
        write_headline(metrics, cfg.headline_dir)
        write_text_atomic(cfg.table_path, headline_table(metrics))
        paired = {}
        if REFERENCE in systems and len(systems) > 1:
            paired = {d: compare.paired_tests({s: preds[(s, d)] for s in systems}, REFERENCE, cfg.bootstrap,
                                              cfg.seed)
                      for d in datasets}
        write_json_atomic(cfg.paired_path, paired)

        _optional("plots", skipped, compare.plot_data, metrics, cfg.plots_dir,
                  stale=[cfg.plots_dir / name for name in compare.PLOT_FILES])
        gallery = _optional("gallery", skipped, _gallery, cfg, preds, metrics, paired, profile,
                            stale=[cfg.report_dir])
        by_system = {s: {d: preds[(s, d)] for d in datasets} for s in systems}
        ids = runs.finish(metrics, paired, by_system, tags, gallery=cfg.report_dir if gallery else None)
    return {"metrics": metrics, "paired": paired, "gallery": gallery, "skipped": skipped,
            "mlflow_run": ids[0] if ids else None,
            "predictions": {s: {d: predictions_path(cfg.out_dir, s, d).as_posix() for d in datasets}
                            for s in systems}}


def _ran(system: str, models: dict[str, str] | None, tags: dict[str, dict[str, str]],
         params_digest: str | None) -> dict[str, str]:
    """What a row's numbers came from: the model spec its system ran, that model's fingerprint, the params digest."""
    ran = {"model": (models or {}).get(system), "model_fingerprint": tags.get(system, {}).get("model_fingerprint"),
           "params_digest": params_digest}
    return {k: v for k, v in ran.items() if v}


def write_headline(metrics: dict[str, dict[str, Any]], dest: Path) -> list[Path]:
    """`dest/<dataset>/<system>.json`: each row's headline numbers, the folder replaced as a whole (a system or
    dataset left out of this run leaves no stale file for DVC to show)."""
    _claim_headline(dest)
    written = []
    with atomic_dir(dest) as tmp:
        for system, by_dataset in metrics.items():
            for dataset, m in by_dataset.items():
                (tmp / dataset).mkdir(exist_ok=True)
                write_json_atomic(tmp / dataset / f"{system}.json", headline_row(m))
                written.append(dest / dataset / f"{system}.json")
    return written


def _claim_headline(dest: Path) -> None:
    """InputError unless `dest` is absent, or a folder of `<dataset>/<system>.json` files only (what
    write_headline writes): a wrong evaluate.headline_dir must not wipe another folder."""
    dest = Path(dest)
    if not dest.exists():
        return
    files = [p for p in dest.rglob("*") if not p.is_dir()] if dest.is_dir() else [dest]
    foreign = [p for p in files if p.suffix != ".json" or p.parent.parent != dest]
    if foreign:
        raise InputError(f"evaluate.headline_dir {dest}: holds {foreign[0]}, which biocheck evaluate did not "
                         "write; it replaces only its own headline files. Give another folder, or move that "
                         "one away yourself.")


def _optional(step: str, skipped: dict[str, str], fn, *args: Any, stale: Sequence[Path] = (), **kwargs: Any) -> Any:
    """Run an optional step; a failure is logged and recorded, never raised (the predictions are safe), and
    `stale`, the step's files of a previous run (a folder: the gallery, claimed as this stage's), removed."""
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (any failure of an extra must not undo the evaluation)
        why = redact(f"{type(e).__name__}: {e}").splitlines()[0][:300]
        log.warning("evaluate: %s skipped (%s)", step, why)
        skipped[step] = why
        for path in map(Path, stale):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        return None


def _gallery(cfg: EvaluateConfig, preds: dict[tuple[str, str], list[Prediction]], metrics: dict,
             paired: dict, profile: str | None = None) -> str:
    from biocheck.evaluate.gallery import write_gallery

    index = write_gallery(cfg.report_dir, preds, lambda p: load_episode(cfg.out_dir, p), metrics, paired,
                          profile=profile)
    return Path(index).as_posix()


def _tags(system: System, preds: list[Prediction], out_dir: Path) -> dict[str, str]:
    """MLflow tags of a system: what it says about itself, else what its first trace recorded."""
    described = getattr(system, "describe", None)
    info = dict(described()) if callable(described) else {}
    if not info.get("model_fingerprint") or not info.get("prompt_hash"):
        ep = next((e for p in preds if (e := load_episode(out_dir, p)) is not None), None)
        if ep is not None:
            for key, value in (("model_fingerprint", ep.llm_fingerprint), ("prompt_hash", ep.prompt_hash),
                               ("llm", ep.llm)):
                info[key] = info.get(key) or value
    return {k: str(v) for k, v in info.items() if v not in (None, "")}
