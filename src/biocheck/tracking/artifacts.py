"""The `biocheck-artifacts:` MLflow artifact repository: the artifact locations of experiments an older BioCheck
created, read in this process (use_project_artifacts) and, through the package's entry point
(`biocheck.tracking:ProjectArtifactRepository`, pyproject.toml), by `mlflow ui` and any other MLflow process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from biocheck.tracking.config import ARTIFACT_SCHEME, SERVER_STORE_ENV
from biocheck.tracking.store import store_folder, tracking_uri


def use_project_artifacts() -> None:
    """Let MLflow read and write `biocheck-artifacts:` locations (experiments an older BioCheck created) in this
    process (the package's entry point does the same for `mlflow ui` and any other MLflow process of this
    environment)."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry

    _artifact_repository_registry.register(ARTIFACT_SCHEME, __getattr__("ProjectArtifactRepository"))


def _project_artifacts_class() -> type:
    from mlflow.store.artifact.local_artifact_repo import LocalArtifactRepository

    class ProjectArtifactRepository(LocalArtifactRepository):
        """`biocheck-artifacts:/<path>`: the local folder <path> under the folder of the SQLite tracking
        database, wherever that folder is now (this process's tracking URI, or a running `mlflow ui`'s store)."""

        def __init__(self, artifact_uri: str, tracking_uri: str | None = None, registry_uri: str | None = None):
            super().__init__(artifact_uri, tracking_uri, registry_uri)
            import mlflow
            from mlflow.tracking._tracking_service.utils import is_tracking_uri_set

            uris = (tracking_uri, os.environ.get(SERVER_STORE_ENV),
                    mlflow.get_tracking_uri() if is_tracking_uri_set() else None, _default_uri())
            root = next((f for f in (store_folder(u) for u in uris if u) if f is not None), Path.cwd())
            self._artifact_dir = str(root / artifact_uri.split(":", 1)[1].lstrip("/"))

    return ProjectArtifactRepository


def _default_uri() -> str:
    return tracking_uri()


def __getattr__(name: str) -> Any:
    """ProjectArtifactRepository, built on first use (MLflow is imported only when tracking is used)."""
    if name == "ProjectArtifactRepository":
        if name not in globals():
            globals()[name] = _project_artifacts_class()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
