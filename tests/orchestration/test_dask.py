"""biocheck.orchestration.dask: the task runner's LocalCluster. Two clusters at once each serve HTTP on a free
port (no "Port 8787 is already in use"), and their worker processes are told the Prefect API this process
uses (without it each would start a temporary Prefect server of its own) and watch their event loop
(orchestration/stall_watch.py: a stalled loop writes every thread's stack)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from types import SimpleNamespace

from biocheck.orchestration import stall_watch
from biocheck.orchestration.config import OrchestrateConfig
from biocheck.orchestration.dask import task_runner

API = "http://127.0.0.1:9/api"  # only its address travels: no server is asked anything


def _api_url() -> str | None:
    return os.environ.get("PREFECT_API_URL")


def _watched(dask_worker) -> bool:
    return stall_watch.NAME in dask_worker.periodic_callbacks


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
                watched = client.run(_watched)
    assert list(watched.values()) == [True]
    assert not [w for w in caught if "already in use" in str(w.message)], [str(w.message) for w in caught]
    assert len(set(ports)) == 2
    assert list(seen.values()) == [API]  # the one worker process


def test_an_existing_cluster_without_a_prefect_server_is_warned_about(monkeypatch, caplog):
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}), caplog.at_level(logging.WARNING):
        runner = task_runner(OrchestrateConfig(dask_address="tcp://10.0.0.1:8786"))
    assert runner.address == "tcp://10.0.0.1:8786"
    assert "PREFECT_API_URL is not set" in caplog.text


def _loop_for(seconds: float, stall_s: float, block_s: float, tmp_path) -> str:
    """Run a tornado loop with the stall watch for `seconds`, its thread blocked for `block_s` of them by a
    callback; what the watchdog wrote."""
    from tornado.ioloop import IOLoop

    out = tmp_path / "stacks.txt"
    loop = IOLoop(make_current=False)
    worker = SimpleNamespace(periodic_callbacks={})
    with out.open("w") as f:
        def start() -> None:
            stall_watch.watch(worker, stall_s=stall_s, rearm_s=0.05, file=f)
            if block_s:
                loop.add_callback(_hold_the_loop, block_s)
            loop.call_later(seconds, loop.stop)
        try:
            loop.add_callback(start)
            loop.start()
        finally:
            stall_watch.stop()
            worker.periodic_callbacks[stall_watch.NAME].stop()
            loop.close()
    return out.read_text()


def _hold_the_loop(seconds: float) -> None:
    time.sleep(seconds)  # the loop thread busy: no re-arming


def test_a_stalled_event_loop_writes_every_threads_stack_and_a_healthy_one_nothing(tmp_path):
    stalled = _loop_for(seconds=0.2, stall_s=0.5, block_s=2.0, tmp_path=tmp_path)
    assert "_hold_the_loop" in stalled and "Thread" in stalled, stalled
    # three times the stall time with the loop free: re-arming keeps the dump from ever firing
    assert _loop_for(seconds=3.0, stall_s=1.0, block_s=0, tmp_path=tmp_path) == ""
