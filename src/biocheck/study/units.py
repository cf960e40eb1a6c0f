"""`biocheck study`: EG-GRPO against outcome-only GRPO and the start they share, over seeds x claims.

A study is the `study:` section of params.yaml expanded by DVC (study/dvc.yaml) into units, each an ordinary
stage run: `train@<variant>-<seed>` trains one reward variant with one seed from the shared start (the SFT
warm start, or the base model when the profile has none) for `study.steps` GRPO steps; `evaluate@...` selects
that run's best checkpoint by validation reward (as `biocheck select` does) and evaluates it as the BioCheck
agent on the study's held-out claims; `evaluate_start` evaluates the start on the same claims; `analyze`
turns every unit's predictions into one answer (study/analysis.py) with its uncertainty.

Why DVC `matrix` stages, not `dvc exp run --queue`: every unit is then a stage of the one workspace, with its
own dvc.lock entry, so `dvc repro` skips a finished unit (a killed study restarts with the finished units
kept, and a `persist` checkpoint folder resumes the unit that was cut off), a new seed adds units without
rerunning the others, and the shared start is an ordinary dependency trained once. Queued experiments would
each copy the workspace and keep their results in experiment refs, apart from the pipeline's outputs.

This module sits above `pipeline`: a unit runs the pipeline's own training and evaluation functions.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from biocheck import tracking
from biocheck.bounds import Count
from biocheck.io import InputError, write_json_atomic
from biocheck.llm.load import is_model_dir
from biocheck.params import raw_section, section

log = logging.getLogger(__name__)

STUDY_DVC = "study/dvc.yaml"  # its stages: train@<variant>-<seed>, evaluate@<variant>-<seed>, evaluate_start, analyze
START = "start"  # the unit that evaluates the shared start
SYSTEM = "eg_grpo"  # every unit's model runs as the BioCheck agent (the evaluation's eg_grpo system)


@dataclass
class StudyConfig:
    """`study:` in params.yaml. Seeds and variants are DVC's matrix (study/dvc.yaml reads them), the rest the
    units' and the analysis's settings."""

    name: str = "study"  # the MLflow parent run `study <name>`
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    variants: list[str] = field(default_factory=lambda: ["eg_grpo", "outcome_only"])
    steps: Count = 12  # GRPO steps per unit
    eval_steps: Count | None = None  # a unit's checkpoint + validation reward every N steps (a divisor of steps;
    # null: only at the end, so the last checkpoint is the unit's)
    datasets: list[str] = field(default_factory=lambda: ["scifact"])  # held-out claims (evaluate's dataset names)
    limit: Count | None = None  # the first N claims of each dataset (null: all)
    full_split: bool = False  # claims from the whole test split (data/prepared/full), not the profile's data.subset
    metrics: list[str] = field(default_factory=lambda: ["accuracy", "ehr", "eqs", "citing_rate", "grounded_rate"])
    reference: str = "eg_grpo"  # the variant every difference starts from
    # The gate: no training unit runs unless R_evidence varies in at least this share of the start's groups for
    # SUPPORTED and for REFUTED claims (the reward audit, `dvc repro audit`); below it, EG-GRPO's evidence term
    # would barely reach the gradient and the study could not test it. 0 turns the gate off.
    min_evidence_signal: float = 0.5

    def __post_init__(self) -> None:
        from biocheck.evaluate.config import DATASETS, SELECTION
        from biocheck.evaluate.ratios import RATIO_METRICS
        from biocheck.rewards.components import VARIANTS

        held_out = tuple(d for d in DATASETS if d not in SELECTION)  # the validation claims chose the checkpoints
        self.name = str(self.name).strip()
        if not self.name:
            raise ValueError("name must not be empty (it names the MLflow parent run `study <name>`)")
        for key, values, known in (("seeds", self.seeds, None), ("variants", self.variants, VARIANTS),
                                   ("datasets", self.datasets, held_out), ("metrics", self.metrics, RATIO_METRICS)):
            if not isinstance(values, list) or not values:
                raise ValueError(f"{key} must be a non-empty list")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"{key} lists a value twice: {values}")
            bad = [v for v in values if (known is None and (isinstance(v, bool) or not isinstance(v, int) or v < 0))
                   or (known is not None and v not in known)]
            if bad:
                choose = "whole numbers >= 0" if known is None else ", ".join(known)
                raise ValueError(f"{key}: {', '.join(map(str, bad))} not allowed; choose from {choose}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", self.name):
            raise ValueError(f"name {self.name!r}: letters, digits, '_', '.' and '-' only (it names MLflow runs)")
        self.eval_steps = self.eval_steps or self.steps
        if self.eval_steps > self.steps or self.steps % self.eval_steps:
            raise ValueError(f"eval_steps {self.eval_steps} must divide steps {self.steps}: each unit selects among "
                             "its checkpoints, and the last step must be one")
        if self.reference not in self.variants:
            raise ValueError(f"reference {self.reference!r} is not among variants {self.variants}")
        if not 0.0 <= self.min_evidence_signal <= 1.0:
            raise ValueError(f"min_evidence_signal {self.min_evidence_signal}: a share in [0, 1] (0: no gate)")

    # Where a study writes: fixed, as study/dvc.yaml names them (DVC parses that file on every `dvc repro`, so
    # it cannot name a key a profile might leave out; tests/study/test_units.py checks the two agree).
    out_dir: ClassVar[Path] = Path("study/checkpoints")  # <variant>-s<seed>/: each unit's checkpoints
    eval_dir: ClassVar[Path] = Path("study/eval")  # <unit>/: each unit's episodes, predictions, metrics, selection
    metrics_path: ClassVar[Path] = Path("metrics/study.json")  # the differences (numbers: `dvc metrics show`)
    report_path: ClassVar[Path] = Path("reports/study.json")  # everything: units, values, differences, sentences
    plots_dir: ClassVar[Path] = Path("metrics/study_plots")  # forest.csv, drawn by study/dvc.yaml's `plots:`
    page_dir: ClassVar[Path] = Path("reports/study")  # index.html, the study's page in the gallery's style


def study_config(params: dict[str, Any], **overrides: Any) -> StudyConfig:
    return section(params, "study", StudyConfig, **overrides)


def unit_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def units(cfg: StudyConfig) -> list[tuple[str, int]]:
    """(variant, seed) of every training unit, in study/dvc.yaml's matrix order (variants, then seeds)."""
    return [(v, s) for v in cfg.variants for s in cfg.seeds]


def stages(cfg: StudyConfig) -> list[str]:
    """study/dvc.yaml's stages in the order a local run takes them: train all, evaluate all, analyze."""
    return ([f"{STUDY_DVC}:train@{v}-{s}" for v, s in units(cfg)] + [f"{STUDY_DVC}:evaluate_start"]
            + [f"{STUDY_DVC}:evaluate@{v}-{s}" for v, s in units(cfg)] + [f"{STUDY_DVC}:analyze"])


def start_dir(params: dict[str, Any]) -> Path:
    """The shared start: the SFT warm start (train.sft.out_dir) when the profile trains one, else models/base."""
    from biocheck.wiring import model_config, sft_dir

    sft = raw_section(params, "train").get("sft") or {}
    return sft_dir(params) if sft.get("enabled", True) else Path(model_config(params).out_dir)


def unit_params(params: dict[str, Any], variant: str) -> dict[str, Any]:
    """The params a unit trains with: GRPO of `variant` from the shared start, no SFT of its own (a unit's seed
    must not train another warm start: every seed and variant starts from the same weights)."""
    p = copy.deepcopy(params)
    start = start_dir(params)
    p.setdefault("model", {})["out_dir"] = str(start)
    p.setdefault("train", {})["sft"] = {**(p["train"].get("sft") or {}), "enabled": False}
    p["train"]["metrics_path"] = None  # the pipeline's metrics/train.json is not a unit's (an override of None is no override)
    p.setdefault("reward", {})["variant"] = variant
    return p


def unit_overrides(cfg: StudyConfig, variant: str, seed: int) -> dict[str, Any]:
    """train_stage's overrides for one unit: its seed, steps and folder."""
    # no validation at step 0: the start is one model for every unit (evaluated on the held-out claims once)
    # every checkpoint with its validation reward: the unit's selection needs both
    return {"seed": seed, "out_dir": str(cfg.out_dir / unit_name(variant, seed)), "eval_on_start": False,
            "max_steps": cfg.steps, "save_steps": cfg.eval_steps, "eval_steps": cfg.eval_steps}


@dataclass
class Unit:
    """One evaluated unit: what it is and where its predictions are."""

    name: str
    variant: str | None  # None: the start
    seed: int | None
    eval_dir: Path


def eval_units(cfg: StudyConfig) -> list[Unit]:
    out = [Unit(START, None, None, cfg.eval_dir / START)]
    return out + [Unit(unit_name(v, s), v, s, cfg.eval_dir / unit_name(v, s)) for v, s in units(cfg)]


def _tagged(cfg: StudyConfig, unit: str, variant: str | None = None, seed: int | None = None):
    """Every MLflow run a unit starts nests under `study <name>` and carries study, unit, variant and seed."""
    tags = {"study": cfg.name, "study_unit": unit, "variant": variant, "seed": seed}
    return tracking.in_pipeline(f"study-{cfg.name}", name=f"study {cfg.name}",
                                tags={k: v for k, v in tags.items() if v is not None})


def _check_unit(cfg: StudyConfig, variant: str, seed: int) -> None:
    if variant not in cfg.variants or seed not in cfg.seeds:
        raise InputError(f"--variant {variant} --seed {seed}: not a unit of this study (study.variants "
                         f"{cfg.variants}, study.seeds {cfg.seeds}); add it to params.yaml `study:`")


# --- the units (study/dvc.yaml runs them through `biocheck study ...`) ------------------------------------

def train_unit(params: dict[str, Any], variant: str, seed: int, progress: bool = True) -> dict[str, Any]:
    """`biocheck study train`: GRPO of one (variant, seed) from the shared start into study.out_dir/<unit>
    (rerun: it resumes from its last checkpoint, as `biocheck train` does)."""
    from biocheck.pipeline import train_stage

    cfg = study_config(params)
    _check_unit(cfg, variant, seed)
    start = start_dir(params)
    if not is_model_dir(start):
        raise InputError(f"{start}: no start model for the study; run `dvc repro sft` (or `dvc repro model` when "
                         "train.sft.enabled is false) first")
    with _tagged(cfg, unit_name(variant, seed), variant, seed):
        return train_stage(unit_params(params, variant), progress=progress, **unit_overrides(cfg, variant, seed))


def selected_checkpoint(checkpoints: Path) -> dict[str, Any]:
    """The unit's checkpoint with the best validation reward (ties: the earlier step), as `biocheck select`."""
    from biocheck.train.select import checkpoint_table, choose

    try:
        rows, history = checkpoint_table(checkpoints)
        best = choose(rows)
    except InputError as e:
        raise InputError(f"{e} (a study unit: run `dvc repro {STUDY_DVC}:train@<variant>-<seed>` or "
                         "`biocheck study run`)") from None
    start = next((h["eval_reward"] for h in history if h.get("step") == 0 and "eval_reward" in h), None)
    return {"checkpoint": str(best["checkpoint"]), "step": best["step"], "eval_reward": best["eval_reward"],
            "start_eval_reward": start}


def evaluate_unit(params: dict[str, Any], variant: str | None = None, seed: int | None = None,
                  progress: bool = True) -> dict[str, Any]:
    """`biocheck study evaluate`: the unit's selected checkpoint (no variant: the start) as the BioCheck agent on
    the study's claims, into study.eval_dir/<unit>; its selection in selection.json there."""
    from biocheck.pipeline import evaluate_stage

    cfg = study_config(params)
    if variant is None:
        name, model, selection = START, start_dir(params), {"checkpoint": str(start_dir(params)), "step": 0}
    else:
        _check_unit(cfg, variant, seed)
        name = unit_name(variant, seed)
        selection = selected_checkpoint(cfg.out_dir / name)
        model = Path(selection["checkpoint"])
    if not is_model_dir(model):
        raise InputError(f"{model}: no model to evaluate for study unit {name}")
    out = cfg.eval_dir / name
    # in the params, not as overrides: an override of None (study.limit null: every claim) is no override
    p = copy.deepcopy(params)
    p["evaluate"] = {**(p.get("evaluate") or {}), "systems": [SYSTEM], "datasets": list(cfg.datasets),
                     "limit": cfg.limit, "full_split": cfg.full_split}
    with _tagged(cfg, name, variant, seed):
        result = evaluate_stage(p, progress=progress, out=out, model=model_spec(params, model))
    write_json_atomic(out / "selection.json", {"unit": name, "variant": variant, "seed": seed, **selection})
    return {"unit": name, "selection": selection, "metrics": result["metrics"][SYSTEM]}


def _predictions(unit: Unit, dataset: str) -> list[Any]:
    from biocheck.evaluate.harness import predictions_path
    from biocheck.evaluate.systems.base import Prediction

    path = predictions_path(unit.eval_dir, SYSTEM, dataset)
    if not path.is_file():
        how = "evaluate_start" if unit.variant is None else f"evaluate@{unit.variant}-{unit.seed}"
        raise InputError(f"{path}: study unit {unit.name} has no predictions on {dataset}; run "
                         f"`dvc repro {STUDY_DVC}:{how}` (or `biocheck study run`) first")
    return [Prediction.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def study_report(cfg: StudyConfig, profile: str | None, preds: dict[str, dict[str, list[Any]]],
                 selections: dict[str, Any]) -> dict[str, Any]:
    """The study's whole answer from each unit's predictions ({unit: {dataset: [Prediction]}}, the start first)
    and selections: per dataset every metric's values and differences, and each unit's evidence funnel."""
    from biocheck.rewards.funnel import summarize as summarize_funnel
    from biocheck.study.analysis import analyze

    found = eval_units(cfg)
    others = [v for v in cfg.variants if v != cfg.reference] + [START]
    datasets = {}
    for d in cfg.datasets:
        systems = {START: [preds[START][d]]}
        for v in cfg.variants:
            systems[v] = [preds[u.name][d] for u in found if u.variant == v]
        try:
            datasets[d] = analyze(systems, cfg.metrics, cfg.reference, others)
        except ValueError as e:  # units evaluated on other claims (a stale unit): rerun them
            raise InputError(f"{cfg.eval_dir}, {d}: {e}; rerun the stale units (`biocheck study run`)") from None
        # where grounding breaks, per unit (rewards/funnel.py)
        datasets[d]["funnel"] = {u.name: summarize_funnel([p.funnel for p in preds[u.name][d]]) for u in found}
    return {"study": cfg.name, "profile": profile, "reference": cfg.reference,
            "size": {"seeds": len(cfg.seeds), "variants": list(cfg.variants), "steps": cfg.steps,
                     "claims": {d: next(iter(r["metrics"].values()))["differences"].get(START, {}).get("claims")
                                for d, r in datasets.items()}},
            "units": selections, "datasets": datasets}


def analyze_units(params: dict[str, Any]) -> dict[str, Any]:
    """`biocheck study analyze`: every metric's difference, reference variant minus each other variant and minus
    the start, per dataset, from the units' predictions; written to the metrics, report, plot and page."""
    from biocheck.study.page import forest_rows, write_forest_csv, write_page

    cfg = study_config(params)
    found = eval_units(cfg)
    preds = {u.name: {d: _predictions(u, d) for d in cfg.datasets} for u in found}
    report = study_report(cfg, params.get("profile"), preds, {u.name: _selection(u) for u in found})
    datasets = report["datasets"]
    numbers = {d: {m: {"values": e["values"],
                       "differences": {o: {k: x[k] for k in ("diff", "lo", "hi", "p", "mdd")}
                                       for o, x in e["differences"].items()}}
                   for m, e in r["metrics"].items()} for d, r in datasets.items()}
    write_json_atomic(cfg.report_path, report)
    write_json_atomic(cfg.metrics_path, {"study": cfg.name, "seeds": len(cfg.seeds), **numbers})
    rows = forest_rows(report)
    write_forest_csv(cfg.plots_dir / "forest.csv", rows)
    from biocheck.pipeline import evaluate_config

    page = write_page(cfg.page_dir, report, rows, gallery=evaluate_config(params).report_dir / "index.html")
    _log(cfg, params, numbers)
    return {"report": str(cfg.report_path), "page": str(page), "datasets": datasets}


# --- reviewable results: a study's per-claim and per-step files, and the analysis recomputed from them ---------

EXPORT_PARAMS = "params.yaml"  # the exact params the study ran with
EXPORT_REPORT = "study.json"  # the analysis as the study wrote it (reports/study.json)
EXPORT_AUDIT = "reward_audit.json"  # the reward audit of the start the gate read (when the project has one)
STEP_KEYS = ("step", "epoch", "loss", "reward", "reward_std", "eval_reward", "eval_reward_std", "kl", "entropy")
STEP_PREFIXES = ("rewards/", "groups/", "funnel/", "eval_rewards/", "eval_groups/", "eval_funnel/",
                 "completions/mean_length", "eval_completions/mean_length")


def unit_steps(checkpoints: Path) -> list[dict[str, Any]]:
    """A training unit's per-step log (the last checkpoint's log_history): the reward, each term's mean and std
    over the batch, each term's share of groups in which it varies and its mean within-group std, the funnel."""
    from biocheck.train.grpo import latest_checkpoint

    last = latest_checkpoint(checkpoints)
    if last is None:
        return []
    history = json.loads((last / "trainer_state.json").read_text()).get("log_history", [])
    return [{k: v for k, v in row.items() if k in STEP_KEYS or k.startswith(STEP_PREFIXES)} for row in history]


def export(params: dict[str, Any], dest: Path | str, root: Path | str = ".") -> Path:
    """`biocheck study export`: the study's reviewable files, small enough for git: the params it ran with, each
    unit's per-claim predictions per dataset, its selection and (training units) its per-step reward log, the
    analysis, and the reward audit of the start that the gate read. `recompute` gives the analysis back from
    these files alone."""
    import yaml

    from biocheck.pipeline import audit_config

    cfg = study_config(params)
    root, dest = Path(root), Path(dest)
    report = root / cfg.report_path
    if not report.is_file():
        raise InputError(f"{report}: no analysis to export; run `biocheck study run` (or `biocheck study analyze`)")
    from biocheck.io import write_text_atomic

    for u in eval_units(cfg):
        folder = dest / "units" / u.name
        for d in cfg.datasets:
            lines = [p.model_copy(update={"trace": None}) for p in _predictions(Unit(u.name, u.variant, u.seed,
                                                                                     root / u.eval_dir), d)]
            write_text_atomic(folder / f"{d}.jsonl", "".join(p.model_dump_json() + "\n" for p in lines))
        selection = _selection(Unit(u.name, u.variant, u.seed, root / u.eval_dir))
        write_json_atomic(folder / "selection.json", selection)
        if u.variant is not None:
            steps = unit_steps(root / cfg.out_dir / u.name)
            write_text_atomic(folder / "steps.jsonl", "".join(json.dumps(r) + "\n" for r in steps))
    write_text_atomic(dest / EXPORT_PARAMS, yaml.safe_dump(params, sort_keys=False))
    write_json_atomic(dest / EXPORT_REPORT, json.loads(report.read_text()))
    audit = root / audit_config(params).report_path
    if audit.is_file():
        write_json_atomic(dest / EXPORT_AUDIT, json.loads(audit.read_text()))
    return dest


def recompute(dest: Path | str) -> dict[str, Any]:
    """The analysis from an export's files alone (its params, per-claim predictions and selections): the report
    `study_report` gives, and whether its numbers equal the exported analysis's (`matches`)."""
    import yaml

    from biocheck.evaluate.systems.base import Prediction

    dest = Path(dest)
    if not (dest / EXPORT_PARAMS).is_file():
        raise InputError(f"{dest}: not a study export (no {EXPORT_PARAMS}); make one with `biocheck study export`")
    params = yaml.safe_load((dest / EXPORT_PARAMS).read_text())
    cfg = study_config(params)
    preds, selections = {}, {}
    for u in eval_units(cfg):
        folder = dest / "units" / u.name
        preds[u.name] = {d: [Prediction.model_validate_json(line) for line in
                             (folder / f"{d}.jsonl").read_text().splitlines() if line.strip()] for d in cfg.datasets}
        sel = folder / "selection.json"
        selections[u.name] = json.loads(sel.read_text()) if sel.is_file() else None
    report = study_report(cfg, params.get("profile"), preds, selections)
    saved = json.loads((dest / EXPORT_REPORT).read_text()) if (dest / EXPORT_REPORT).is_file() else None
    fresh = json.loads(json.dumps(report))  # as JSON reads it back (tuples -> lists)
    return {"report": fresh, "matches": saved is not None and saved.get("datasets") == fresh["datasets"]}


def _selection(unit: Unit) -> dict[str, Any] | None:
    path = unit.eval_dir / "selection.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _log(cfg: StudyConfig, params: dict[str, Any], numbers: dict[str, Any]) -> None:
    """The analysis as one run `study` nested under `study <name>`: each difference a metric."""
    from biocheck.params import plain
    from biocheck.wiring import tracked

    flat = {}
    for d, per in numbers.items():
        for m, e in per.items():
            for other, x in e["differences"].items():
                for k in ("diff", "lo", "hi", "p", "mdd"):
                    if x.get(k) is not None:
                        flat[f"{d}.{m}.{cfg.reference}_minus_{other}.{k}"] = x[k]
    with tracked(params), _tagged(cfg, "analyze"), tracking.run(
            "study", run_name=f"analysis {cfg.name}", params={"study": plain(cfg)}, tags={"kind": "study"}):
        tracking.log_metrics(flat)
        tracking.log_artifacts(cfg.report_path)
        tracking.log_artifacts(cfg.page_dir)


# --- what each study stage reads (study/dvc.yaml lists exactly that; tests/project/test_dvc_params.py checks it) ---

EVAL_OWN = ("systems", "datasets", "limit", "full_split", "out_dir", "report_dir", "headline_dir", "metrics_path", "paired_path",
            "plots_dir", "baseline_model", "cer", "fire")  # set by the study, or read only by the baselines


def stage_inputs(params: dict[str, Any], stage: str) -> dict[str, Any]:
    """What study/dvc.yaml's stage `stage` (`train@eg_grpo-0`, `evaluate@...`, `evaluate_start`, `analyze`)
    reads from params, as plain data."""
    from biocheck.evaluate.config import DATASETS
    from biocheck.llm.spec import split_spec
    from biocheck.params import plain
    from biocheck.pipeline import evaluate_config, evaluation_inputs, train_setup
    from biocheck.train.training import training_inputs
    from biocheck.wiring import params_of, prepare_config

    p = params_of(params)
    cfg = study_config(p)
    name, _, key = stage.partition("@")
    variant, _, seed = key.rpartition("-")
    if name == "train":
        c = train_setup(unit_params(p, variant), **unit_overrides(cfg, variant, int(seed)))
        return {**training_inputs(c), "start": str(start_dir(p))}
    if name in ("evaluate", "evaluate_start"):
        inputs = evaluation_inputs(p)  # what the pipeline's evaluate stage reads too
        inputs["agent"]["llm"] = split_spec(inputs["agent"]["llm"])[0]  # of agent.llm its kind: the unit names its model
        unit = START if name == "evaluate_start" else unit_name(variant, int(seed))
        keep = prepare_config(p).keep_labels  # the whole split's claims keep the profile's labels
        labels = {d: keep.get(DATASETS[d].split("/")[1]) for d in cfg.datasets} if cfg.full_split else None
        return {"evaluate": {k: v for k, v in plain(evaluate_config(p)).items() if k not in EVAL_OWN}, **inputs,
                "datasets": cfg.datasets, "limit": cfg.limit, "full_split": cfg.full_split, "labels": labels,
                "out": str(cfg.eval_dir / unit), "model": str(start_dir(p) if unit == START else cfg.out_dir / unit)}
    if name == "analyze":
        return {"study": {k: v for k, v in plain(cfg).items()
                          if k not in ("limit", "eval_steps", "full_split", "min_evidence_signal")}}
    raise InputError(f"{stage}: not a stage of {STUDY_DVC}")


def model_spec(params: dict[str, Any], folder: Path) -> str:
    """The spec a unit's model folder runs as: agent.llm's kind when it loads folders itself, else in-process."""
    from biocheck.llm.spec import split_spec
    from biocheck.wiring import agent_config

    kind = split_spec(agent_config(params).llm)[0]
    return f"{kind if kind in ('transformers', 'vllm') else 'transformers'}:{folder}"


def unit_states(root: Path | str = ".") -> list[tuple[str, str]]:
    """(stage, state) of every study stage in run order: `done` (DVC finds it up to date), `to run` (never run)
    or `stale` (run, then its code, params or inputs changed: a rerun repeats it)."""
    from biocheck.orchestration import dvc
    from biocheck.wiring import params_of

    path = dvc.params_file(root)
    todo = stages(study_config(params_of(path)))
    changed = dvc.status(path.parent, [STUDY_DVC])
    lock = path.parent / "study" / "dvc.lock"
    import yaml

    ran = set((yaml.safe_load(lock.read_text()) or {}).get("stages", {})) if lock.is_file() else set()
    return [(s, "done" if s not in changed else "stale" if s.removeprefix(f"{STUDY_DVC}:") in ran else "to run")
            for s in todo]


# --- the gate: the start must give the evidence term a signal ----------------------------------------------

AUDIT_STAGE = "audit"  # dvc.yaml's reward audit of the start policy


class GateError(InputError):
    """The study's gate refused: R_evidence varies in too few of the start's groups."""


def gate(params: dict[str, Any], root: Path | str = ".") -> dict[str, Any]:
    """The gate's verdict from the reward audit's report: per label the share (and count) of the start's groups
    in which R_evidence varies, against study.min_evidence_signal. `passed` is True when the study has no
    EG-GRPO unit (nothing to test) or the threshold is 0."""
    from biocheck.evaluate.audit import evidence_signal
    from biocheck.pipeline import audit_config

    cfg = study_config(params)
    out: dict[str, Any] = {"min": cfg.min_evidence_signal, "labels": {}, "low": [], "passed": True,
                           "report": str(audit_config(params).report_path)}
    if "eg_grpo" not in cfg.variants or cfg.min_evidence_signal == 0:
        return out
    path = Path(root) / out["report"]
    if not path.is_file():
        raise InputError(f"{path}: no reward audit of the start, which the study's gate reads; run `dvc repro "
                         f"{AUDIT_STAGE}` (or `biocheck study run`, which runs it first)")
    out["labels"] = evidence_signal(json.loads(path.read_text()))
    out["low"] = [lab for lab, v in out["labels"].items() if v["share"] is None or v["share"] < cfg.min_evidence_signal]
    out["passed"] = not out["low"]
    return out


def gate_message(g: dict[str, Any]) -> str:
    """One line: the numbers, why it matters, what to change."""
    said = " and ".join(f"{v['share']:.0%} of {lab} groups ({v['varying']} of {v['groups']})" if v["share"] is not None
                        else f"no {lab} group" for lab, v in g["labels"].items())
    return (f"study gate: R_evidence varies in {said} of the start policy's episodes ({g['report']}), below "
            f"study.min_evidence_signal {g['min']:g} for {', '.join(g['low'])}: EG-GRPO's evidence term would barely "
            "reach the gradient, so the study could not test it. Make credit reachable first (a warm start that "
            "cites on both sides, searches that find gold papers, training claims where credit is reachable, the "
            "judge; docs/evaluation.md, 'The gate'), or pass --ignore-gate to run it anyway")


def check_gate(params: dict[str, Any], root: Path | str = ".", ignore: bool = False) -> dict[str, Any]:
    """`gate`, raising GateError when it refuses (a warning instead when `ignore`)."""
    g = gate(params, root)
    if not g["passed"]:
        if not ignore:
            raise GateError(gate_message(g))
        log.warning("%s (ignored: --ignore-gate)", gate_message(g))
    return g


# --- a local run: every stage in sequence through DVC ------------------------------------------------------

def run_local(root: Path | str = ".", upstream: bool = True, report: Any = None,
              ignore_gate: bool = False) -> list[dict[str, Any]]:
    """`biocheck study run`: the reward audit of the start and the gate (`check_gate`), then `dvc repro` each
    study stage in order (a finished unit is skipped by DVC: a killed study restarts where it stopped).
    `upstream`: let DVC bring what a unit needs up to date first (data, index, judges, the start); False:
    `--single-item`, the inputs are there already. `report(i, n, run)`: called after each stage (the audit is
    stage 0)."""
    from dataclasses import asdict

    from biocheck.orchestration import dvc
    from biocheck.wiring import params_of

    path = dvc.params_file(root)
    params = params_of(path)
    todo = stages(study_config(params))
    if "eg_grpo" in study_config(params).variants:
        ran = asdict(dvc.repro(AUDIT_STAGE, path.parent, single_item=not upstream))
        if report is not None:
            report(0, len(todo), ran)
        check_gate(params, path.parent, ignore=ignore_gate)
    done = []
    for i, stage in enumerate(todo, 1):
        ran = asdict(dvc.repro(stage, path.parent, single_item=not upstream))
        done.append(ran)
        if report is not None:
            report(i, len(todo), ran)
    return done


__all__ = ["export", "recompute", "study_report", "unit_steps", "AUDIT_STAGE", "GateError", "check_gate", "gate", "gate_message", "START", "STUDY_DVC", "StudyConfig", "Unit", "analyze_units", "eval_units", "evaluate_unit",
           "selected_checkpoint", "stages", "start_dir", "study_config", "train_unit", "unit_name", "unit_overrides",
           "unit_params", "unit_states", "units", "run_local", "stage_inputs", "model_spec"]
