"""A Dask worker preload: when a worker's event loop stops for `STALL_S` seconds, every thread's Python stack
goes to the worker's stderr.

Dask sees a stalled worker only as missed heartbeats: after 5 minutes it restarts the worker and reruns its
shards, and nothing says where it stood. faulthandler's watchdog is a C thread that needs no GIL, so it writes
the stacks even when a task holds the GIL; the event loop re-arms it every `REARM_S` seconds while it runs,
so a healthy worker never writes anything. `orchestration.dask.local_cluster` preloads this module.
"""

from __future__ import annotations

import faulthandler
import sys
from typing import Any, TextIO

STALL_S = 120.0  # a worker's loop answers heartbeats every second; two minutes without one is never normal
REARM_S = 5.0
NAME = "biocheck-stall-watch"


def watch(worker: Any, stall_s: float = STALL_S, rearm_s: float = REARM_S, file: TextIO | None = None) -> None:
    """Arm faulthandler's watchdog now and re-arm it from `worker`'s event loop every `rearm_s` seconds.
    Call it on that loop (Dask calls `dask_setup` there)."""
    from tornado.ioloop import PeriodicCallback

    out = file or sys.__stderr__

    def rearm() -> None:  # replaces the pending dump: it fires only when the loop stops re-arming it
        faulthandler.dump_traceback_later(stall_s, repeat=False, file=out, exit=False)

    rearm()
    callback = PeriodicCallback(rearm, rearm_s * 1000)
    worker.periodic_callbacks[NAME] = callback  # the worker stops it when it closes
    callback.start()


def stop() -> None:
    faulthandler.cancel_dump_traceback_later()


def dask_setup(worker: Any) -> None:
    watch(worker)


def dask_teardown(worker: Any) -> None:
    stop()
