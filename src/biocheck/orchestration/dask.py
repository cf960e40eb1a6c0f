"""Scale-out: the Prefect task runner that runs shards on a Dask cluster (local by default, an existing one
by address). Shards themselves are cut by `biocheck.evaluate.shards.split`.

Flows that map over shards (evaluation claims, evidence-refresh queries) build their runner here,
so one setting (`orchestrate.dask_address` or $BIOCHECK_DASK_ADDRESS) moves all of them onto a cluster.
"""

from __future__ import annotations

import logging
from typing import Any

from biocheck.orchestration.config import OrchestrateConfig

log = logging.getLogger(__name__)

# The scheduler always serves HTTP (dashboard_address=None still binds :8787, and a second cluster warns
# "Port 8787 is already in use"): a free port on this host instead.
DASHBOARD = "127.0.0.1:0"


def task_runner(cfg: OrchestrateConfig) -> Any:
    """A `prefect_dask.DaskTaskRunner`: connected to `cfg.address` when set, else a LocalCluster of
    `cfg.dask_workers` single-threaded worker processes (one shard per worker at a time)."""
    from prefect.settings import PREFECT_API_URL
    from prefect_dask import DaskTaskRunner

    if cfg.address:
        if not PREFECT_API_URL.value():
            log.warning("Dask cluster %s: PREFECT_API_URL is not set, so its workers record their task runs "
                        "on servers of their own: set it (here and on the workers) to see them in this run",
                        cfg.address)
        return DaskTaskRunner(address=cfg.address)
    return DaskTaskRunner(cluster_class=f"{__name__}.local_cluster",
                          cluster_kwargs={"n_workers": cfg.dask_workers, "threads_per_worker": 1,
                                          "processes": True, "dashboard_address": DASHBOARD})


def local_cluster(**kwargs: Any) -> Any:
    """A `distributed.LocalCluster` whose workers report to the Prefect API this process uses.

    Its workers preload `stall_watch`: a worker whose event loop stops for two minutes writes its threads'
    stacks to stderr. Without PREFECT_API_URL Prefect runs a flow on a temporary server it starts in this process; a worker
    process not told its address would start one of its own (seconds each, and its task runs land in
    another database). The task runner calls this when the flow submits its first task, so that server is
    up by then.
    """
    from distributed import LocalCluster
    from prefect.client.orchestration import get_client

    api = str(get_client(sync_client=True).api_url).rstrip("/")  # the run's client, or the one it would use
    env = {**kwargs.pop("env", {}), "PREFECT_API_URL": api}
    # a worker whose event loop stalls writes every thread's stack to stderr (Dask would only restart it)
    preload = [*kwargs.pop("preload", []), "biocheck.orchestration.stall_watch"]
    return LocalCluster(**kwargs, env=env, preload=preload)
