"""`python -m biocheck.orchestration.guard CMD [ARGS...]`: run CMD, and stop it if our parent dies.

The DVC runner (dvc.py) starts DVC through this guard, as the leader of a process group of its own. A
caller killed outright (SIGKILL, the OOM killer) cannot clean up; without the guard DVC and its stage would
run on as orphans, holding DVC's locks while the rerun waits. The guard notices its parent is gone (it is
re-parented) and interrupts the whole group: SIGINT first, so DVC and the stage clean up and release their
locks, then SIGKILL if it lingers. The stage's `persist` outputs (training checkpoints) survive for the rerun.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5  # how soon a dead parent is noticed
GRACE_S = 10.0  # SIGINT -> SIGKILL


def stop_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGINT to our process group (CMD and its children), then SIGKILL if CMD has not exited in `grace_s`."""
    os.killpg(os.getpgrp(), signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # ends the guard too


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m biocheck.orchestration.guard CMD [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    # SIGINT to the group is for CMD; the guard waits for it instead of dying first. (A handler, not
    # SIG_IGN: handlers are reset in the child at exec, an ignored signal would stay ignored there.)
    signal.signal(signal.SIGINT, lambda *_: None)
    proc = subprocess.Popen(argv)
    while proc.poll() is None:
        if os.getppid() != parent:  # re-parented: whoever started us is gone
            stop_group(proc)
            break
        time.sleep(POLL_S)
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
