"""MLflow tracking: experiments by purpose, pipeline parent runs, the same tags on every run (docs/mlflow.md).

Where: `MLFLOW_TRACKING_URI`, else SQLite at the repo root (`mlflow.db`, what `mlflow ui` opens);
`BIOCHECK_TRACKING=off` disables tracking. Experiments by purpose, named in params.yaml `tracking:`
(STAGES says which stage logs where). A `dvc repro` or a Prefect pipeline run is one parent run
`pipeline <date time>` per experiment it touches, sharing the tag `pipeline_id`; each stage's run nests
under it. Every run is tagged with profile, git commit and dirty flag, DVC stage and the md5 of that
stage's inputs as dvc.lock records them, plus what the caller adds (model fingerprint, prompt hash,
system, dataset, variant).

Tracking never costs a result: a tracking store that cannot be reached (probed once, briefly: no MLflow
retry loop) or fails mid-run prints one warning line on stderr, turns tracking off for the rest of the
stage, and the stage goes on.
Environment variables are never logged, and every text that is (params, tags, metric names,
artifacts) has the environment's secrets (NCBI_API_KEY, OPENAI_API_KEY, any *_TOKEN) blanked first.

The modules, each importing only those above it: `config` (params.yaml `tracking:`, the constants, Context),
`store` (where the store is, its probe and give-up, experiments; this process's state in one `Store`),
`artifacts` (the `biocheck-artifacts:` repository), `provenance` (git, DVC and pipeline tags), `logs` (what a
run logs, secrets blanked) and `runs` (runs, pipeline parent runs, links). Callers use the names below.
"""

from __future__ import annotations

from typing import Any

from biocheck.tracking import artifacts
from biocheck.tracking.artifacts import use_project_artifacts
from biocheck.tracking.config import (
    ARTIFACT_DIR,
    ARTIFACT_SCHEME,
    DEFAULT_UI,
    DESCRIPTIONS,
    EXPERIMENTS,
    FLOW_RUN_ENV,
    HTTP_DEFAULTS,
    MARKERS,
    NOTE_TAG,
    PARENT_NAME_ENV,
    PIPELINE_ENV,
    PROBE_TIMEOUT_S,
    PURPOSES,
    RUN_TAGS_ENV,
    SERVER_STORE_ENV,
    STAGES,
    UI_URL_ENV,
    Context,
    TrackingConfig,
)
from biocheck.tracking.logs import (
    copy_redacted,
    flatten,
    log_artifacts,
    log_dataset,
    log_metrics,
    log_table,
    log_text,
    set_tags,
)
from biocheck.tracking.provenance import (
    common_tags,
    file_md5,
    git_state,
    in_flow_run,
    in_pipeline,
    in_study,
    lock_md5,
    locked_deps_md5,
    pipeline_id,
    pipeline_outputs,
    stage_deps_md5,
)
from biocheck.tracking.runs import flow_run_links, run, run_link, ui_url, version_model_id
from biocheck.tracking.store import (
    Unavailable,
    context,
    current,
    enabled,
    experiment,
    guard,
    quiet_artifact_progress,
    repo_root,
    shown_uri,
    store_folder,
    store_problem,
    tracking_uri,
)

__all__ = [
    "ARTIFACT_DIR", "ARTIFACT_SCHEME", "DEFAULT_UI", "DESCRIPTIONS", "EXPERIMENTS", "FLOW_RUN_ENV", "HTTP_DEFAULTS",
    "MARKERS", "NOTE_TAG", "PARENT_NAME_ENV", "PIPELINE_ENV", "PROBE_TIMEOUT_S", "PURPOSES", "RUN_TAGS_ENV",
    "SERVER_STORE_ENV", "STAGES", "UI_URL_ENV", "Context", "ProjectArtifactRepository", "TrackingConfig",
    "Unavailable", "common_tags", "context", "copy_redacted", "current", "enabled", "experiment", "file_md5",
    "flatten", "flow_run_links", "git_state", "guard", "in_flow_run", "in_pipeline", "in_study", "lock_md5",
    "locked_deps_md5", "log_artifacts", "log_dataset", "log_metrics", "log_table", "log_text", "pipeline_id",
    "pipeline_outputs", "quiet_artifact_progress", "repo_root", "run", "run_link", "set_tags", "shown_uri",
    "stage_deps_md5", "store_folder", "store_problem", "tracking_uri", "ui_url", "use_project_artifacts",
    "version_model_id",
]


def __getattr__(name: str) -> Any:
    """ProjectArtifactRepository, built on first use (MLflow is imported only when tracking is used); the path
    the package's entry point names (pyproject.toml, mlflow.artifact_repository)."""
    if name == "ProjectArtifactRepository":
        return artifacts.ProjectArtifactRepository
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
