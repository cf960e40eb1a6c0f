"""Fixtures of the tracking tests."""

from __future__ import annotations

import mlflow
import pytest

from biocheck import tracking
from biocheck.tracking import tracking_uri


@pytest.fixture
def client(monkeypatch):
    """The session's MLflow store, read outside any pipeline or DVC stage (no parent run to nest under)."""
    for name in (tracking.PIPELINE_ENV, "DVC_STAGE", "DVC_ROOT"):
        monkeypatch.delenv(name, raising=False)
    mlflow.set_tracking_uri(tracking_uri())
    return mlflow.MlflowClient()
