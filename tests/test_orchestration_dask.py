"""biocheck.orchestration.dask: the task runner's LocalCluster. Two clusters at once each serve HTTP on a free
port (no "Port 8787 is already in use"), and their worker processes are told the Prefect API this process
uses (without it each would start a temporary Prefect server of its own)."""

from __future__ import annotations

import logging
import os
import warnings

from biocheck.orchestration.config import OrchestrateConfig
from biocheck.orchestration.dask import task_runner

API = "http://127.0.0.1:9/api"  # only its address travels: no server is asked anything


def _api_url() -> str | None:
    return os.environ.get("PREFECT_API_URL")


def test_two_local_clusters_at_once_and_their_workers_report_to_this_processs_api():
    from distributed import Client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    runner = task_runner(OrchestrateConfig(dask_workers=1))
    assert type(runner).__name__ == "DaskTaskRunner" and runner.cluster_kwargs["n_workers"] == 1
    with temporary_settings({PREFECT_API_URL: API}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with runner.resolved_cluster_class(**runner.cluster_kwargs) as a, \
                runner.resolved_cluster_class(**runner.cluster_kwargs) as b:
            ports = [s.getsockname()[1] for c in (a, b) for s in c.scheduler.http_server._sockets.values()]
            with Client(a) as client:
                seen = client.run(_api_url)
    assert not [w for w in caught if "already in use" in str(w.message)], [str(w.message) for w in caught]
    assert len(set(ports)) == 2
    assert list(seen.values()) == [API]  # the one worker process


def test_an_existing_cluster_without_a_prefect_server_is_warned_about(monkeypatch, caplog):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}), caplog.at_level(logging.WARNING):
        runner = task_runner(OrchestrateConfig(dask_address="tcp://10.0.0.1:8786"))
    assert runner.address == "tcp://10.0.0.1:8786"
    assert "PREFECT_API_URL is not set" in caplog.text
