"""What tracking is configured by: params.yaml `tracking:`, the experiments by purpose and which stage logs where,
the environment variables BioCheck sets or reads, and what the runs of one stage share (Context)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MARKERS = ("dvc.yaml", ".git")
PURPOSES = ("data", "train", "eval")
EXPERIMENTS = {"data": "biocheck-data", "train": "biocheck-train", "eval": "biocheck-eval"}  # the defaults
# Which experiment a stage logs into (a stage name before any `@key` of a DVC foreach).
STAGES = {"prepare": "data", "validate": "data", "evidence": "data", "evidence-refresh": "data", "model": "data",
          "judge": "train", "audit": "train", "train": "train", "select": "train", "evaluate": "eval", "check": "eval",
          "study": "eval", "narratives": "eval"}
PIPELINE_ENV = "BIOCHECK_PIPELINE_ID"  # set by the Prefect pipeline flow; else the ancestor `dvc` process
PARENT_NAME_ENV = "BIOCHECK_PIPELINE_NAME"  # the parent run's name (a study: `study <name>`)
RUN_TAGS_ENV = "BIOCHECK_RUN_TAGS"  # JSON tags every run carries (a study unit: study, variant, seed)
FLOW_RUN_ENV = "BIOCHECK_PREFECT_FLOW_RUN"  # the Prefect flow run a run belongs to (tag `prefect_flow_run`)
UI_URL_ENV = "BIOCHECK_MLFLOW_UI"  # where `mlflow ui` serves a SQLite store, for links (default DEFAULT_UI)
DEFAULT_UI = "http://127.0.0.1:5000"
PROBE_TIMEOUT_S = 5  # one short look at an HTTP tracking server before any MLflow call
# MLflow's own HTTP retries would take minutes against a server that is down mid-run (a user's setting wins).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}

# `biocheck-artifacts:/mlartifacts/...`: the artifact locations of experiments an older BioCheck created, still
# read here and through the package's entry point; new experiments get plain file locations (store.ensure_experiment).
ARTIFACT_SCHEME = "biocheck-artifacts"
ARTIFACT_DIR = "mlartifacts"  # beside mlflow.db (gitignored), where `mlflow server` keeps its own artifacts
SERVER_STORE_ENV = "_MLFLOW_SERVER_FILE_STORE"  # the backend store of a running `mlflow server` / `mlflow ui`

NOTE_TAG = "mlflow.note.content"  # the experiment's description in the MLflow UI
DESCRIPTIONS = {
    "data": "BioCheck's data stages: prepare, validate, evidence (the search index), evidence refresh, model "
            "init. One run per stage; a `dvc repro` or a Prefect pipeline run nests them under `pipeline <date>`.",
    "train": "BioCheck's training: the judges, the warm start, the reward audit, `train <variant> seed=<n>` "
             "(GRPO curves: rewards/* and eval_rewards/*) and `select <variant>` (the checkpoint registered as "
             "biocheck-agent).",
    "eval": "BioCheck's evaluations: each `evaluate` run (config, gallery) with one child run "
            "`eval <system> <dataset>` per system and dataset (accuracy, macro_f1, eqs, ehr, ... with their n); "
            "`check` runs; `narratives` runs (the passage benchmark, tag task=narrative); agent episodes in the Traces tab. Filters: params.system = 'eg_grpo' and "
            "params.model_alias = 'selected' (the newest selection); tags.registry_aliases LIKE '%champion%' (the "
            "weights the registry's champion held then).",
}


@dataclass
class TrackingConfig:
    """`tracking:` in params.yaml. No DVC stage lists it as a param: renaming an experiment reruns nothing."""

    experiments: dict[str, str] = field(default_factory=lambda: dict(EXPERIMENTS))  # purpose -> experiment name
    trace_samples: int = 3  # episodes per evaluated system and dataset logged as MLflow traces (0: none)

    def __post_init__(self) -> None:
        if not isinstance(self.experiments, dict):
            raise ValueError(f"experiments must map {', '.join(PURPOSES)} to experiment names")
        unknown = sorted(set(self.experiments) - set(PURPOSES))
        if unknown:
            raise ValueError(f"experiments: unknown purpose(s) {', '.join(map(str, unknown))}; "
                             f"choose from {', '.join(PURPOSES)}")
        for purpose, name in self.experiments.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"experiments.{purpose} must be a non-empty experiment name, not {name!r}")
        self.experiments = {**EXPERIMENTS, **{k: v.strip() for k, v in self.experiments.items()}}
        if isinstance(self.trace_samples, bool) or not isinstance(self.trace_samples, int) or self.trace_samples < 0:
            raise ValueError(f"trace_samples must be a whole number >= 0 (0: no traces), not {self.trace_samples!r}")


@dataclass
class Context:
    """What the runs of one stage share (the pipeline package sets it per stage, through wiring.tracked; tests and ad-hoc calls get defaults)."""

    config: TrackingConfig = field(default_factory=TrackingConfig)
    profile: str | None = None
    prepared_dir: Path | None = None  # the prepared splits (datasets logged with `log_dataset`)
    registered_model: str | None = None  # select.registered_model: evaluate reads and tags its versions
    model_aliases: dict[str, str] = field(default_factory=dict)  # evaluated system -> name of the model it ran
