"""DVC from Python: reproduce or commit one stage, read the project's status, pull from and push to a remote.

DVC decides what is up to date, caches the outputs and writes dvc.lock; this module only starts it, one
`python -m dvc` subprocess of this same environment per call, so a crashing stage cannot take the caller
(a Prefect worker) down, and its output streams into `logging` line by line.

Stopping: DVC runs in a process group of its own under a guard (guard.py). A caller that is stopped
(a Prefect timeout, a cancellation, Ctrl-C) interrupts that group before it returns; a caller killed
outright is noticed by the guard, which does the same. DVC and its stage then clean up and release DVC's
locks, so the rerun starts at once, and a stage with `persist` outputs (training checkpoints, the cached
evaluation episodes) resumes from them. DVC's own locks survive no process: the repo lock is an OS file
lock, and an rwlock entry whose pid is dead is dropped by DVC. Still held by a live DVC, they are an
error naming that process.

Every failure is a `DvcError`: one line saying what failed, where, and how to fix it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from biocheck.io import InputError
from biocheck.orchestration.plan import Pipeline
from biocheck.secrets import redact

log = logging.getLogger(__name__)

PARAMS_FILE = "params.yaml"  # DVC's default params file: every stage in dvc.yaml reads this one
STOP_GRACE_S = 10.0  # after SIGINT, how long DVC and its stage get to clean up before SIGKILL
POLL_S = 0.2  # the wait loop wakes this often, so a timeout or cancellation raised in it lands promptly
TAIL_LINES = 200  # output lines kept for the error message
# What DVC prints when it runs a stage (vs "Stage 'x' didn't change, skipping"): how we tell ran from skipped.
RAN = "Running stage '{stage}'"
LOCKED = "Unable to acquire lock"  # another DVC process holds the repo lock (.dvc/tmp/lock)
# What DVC prints when a stage fails ("ERROR: failed to reproduce 'train@eg_grpo': failed to run: ...").
FAILED = re.compile(r"failed to reproduce(?: stages:)? '([^']+)'")
RUNNING = re.compile(r"Running stage '([^']+)'")
BUSY = "is being blocked by"  # another DVC process reads or writes an output we need (.dvc/tmp/rwlock)


class DvcError(InputError):
    """A DVC command failed; the message is one line: what, where, how to fix."""


@dataclass
class StageRun:
    stage: str
    ran: bool  # False: DVC found the stage up to date and skipped it
    seconds: float


def project(root: Path | str = ".") -> Path:
    """`root` resolved, after checking it is a DVC project (a .dvc/ folder and a dvc.yaml)."""
    path = Path(root).resolve()
    if not (path / ".dvc").is_dir():
        raise DvcError(f"not a DVC project: {path} (no .dvc/ folder): run there from the BioCheck checkout, "
                       "or `git init && dvc init` a new one")
    if not (path / "dvc.yaml").is_file():
        raise DvcError(f"not a DVC pipeline: {path} has no dvc.yaml: run from the BioCheck checkout")
    return path


def params_file(root: Path | str = ".", params: Path | str = PARAMS_FILE) -> Path:
    """The params file of the project at `root`. DVC's stages read ROOT/params.yaml and no other file, so a
    flow given another file would run the stages with params it was not shown: that is an error."""
    path = project(root)
    given = Path(params) if Path(params).is_absolute() else path / params
    if given.resolve() != path / PARAMS_FILE:
        raise DvcError(f"params {params}: DVC stages read {path / PARAMS_FILE}, not {given}; edit that file "
                       f"(e.g. `biocheck profile use ...`) or pass root=<the project holding {params}>")
    if not given.is_file():
        raise DvcError(f"no {given}: every DVC stage reads its params from it; restore it from git")
    return given


def repro(stage: str, root: Path | str = ".", logger: logging.Logger | logging.LoggerAdapter | None = None,
          force: bool = False, single_item: bool = True) -> StageRun:
    """`dvc repro --single-item STAGE`: run one stage if DVC finds it (or its deps) changed, else skip it.

    Its upstream stages are not run (the caller runs them, in order): a missing input is the stage's error.
    `single_item` False: DVC runs the changed stages upstream of it first.
    """
    args = ["repro", *(["--single-item"] if single_item else []), stage, *(["--force"] if force else [])]
    path, start = project(root), time.monotonic()
    rc, lines = _stream(path, args, logger or log)
    if rc != 0:
        raise DvcError(_failure(f"dvc repro {stage}", rc, lines, path))
    ran = any(RAN.format(stage=stage) in line for line in lines)
    return StageRun(stage=stage, ran=ran, seconds=round(time.monotonic() - start, 3))


def pipeline(root: Path | str = ".", dvcfile: str = "dvc.yaml") -> Pipeline:
    """The stages of ROOT/`dvcfile` (foreach stages expanded: train@eg_grpo) in the order `dvc repro` runs them,
    with each stage's direct dependencies: DVC's own graph and planner, not a list kept here."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc.repo.reproduce import get_active_graph, plan_repro

    path = project(root)
    try:
        with Repo(str(path), config={"core": {"no_scm": True}}) as repo:  # the graph needs no git
            graph = get_active_graph(repo.index.graph)  # edges: a stage -> the stages it depends on
            wanted = path / dvcfile
            stages = [s for s in graph if Path(s.dvcfile.path) == wanted]
            order = plan_repro(graph, stages)  # what `dvc repro` (no target: dvc.yaml) runs, in its order

            def name(stage) -> str:  # as `dvc repro` in ROOT names it (another dvc.yaml's stage: FILE:NAME)
                file = Path(stage.dvcfile.path)
                return stage.name if file == wanted else f"{file.relative_to(path).as_posix()}:{stage.name}"

            return Pipeline(order=tuple(map(name, order)),
                            upstream={name(s): frozenset(map(name, graph.successors(s))) for s in order})
    except DvcException as e:
        raise DvcError(redact(f"{path / dvcfile}: {e}: fix it (`dvc dag` shows the graph DVC reads)")) from None


def commit(root: Path | str, stage: str, logger: logging.Logger | logging.LoggerAdapter | None = None) -> None:
    """`dvc commit --force STAGE`: record the stage's outputs as they are now (dvc.lock and the cache), e.g.
    a `persist` output that something other than the stage changed, so `dvc status` is clean again and
    `dvc push` carries it. Its dependencies are recorded as they are too: check `status` first."""
    path = project(root)
    rc, lines = _stream(path, ["commit", "--force", stage], logger or log)
    if rc != 0:
        raise DvcError(_failure(f"dvc commit {stage}", rc, lines, path))


def status(root: Path | str = ".", targets: Sequence[str] = ()) -> dict[str, Any]:
    """`dvc status --json`: {stage: [what changed, e.g. {"changed deps": {path: "modified"}}]}; {} = up to date."""
    path = project(root)
    p = subprocess.run(_command(["status", "--json", *targets]), cwd=path, env=_env(), capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise DvcError(_failure("dvc status", p.returncode, (p.stdout + p.stderr).splitlines(), path))
    return json.loads(p.stdout or "{}")


def remotes(root: Path | str = ".") -> dict[str, str]:
    """The DVC remotes of the project, {name: url}: what `dvc remote list` shows (.dvc/config, config.local,
    the user's and the system's config), read through DVC's own config reader, relative urls resolved."""
    from dvc.config import Config, ConfigError

    path = project(root)
    try:
        config = Config(dvc_dir=str(path / ".dvc"))
    except ConfigError as e:
        raise DvcError(redact(f"DVC config of {path}: {e}: fix it with `dvc config` / `dvc remote modify`")) from None
    return {name: str(options.get("url", "")) for name, options in config["remote"].items()}


def check_remote(root: Path | str, remote: str) -> None:
    """A DvcError unless the project has a remote named `remote` (the fix: add it, or use none)."""
    root = project(root)
    known = remotes(root)
    if remote not in known:
        have = f"this project has {', '.join(sorted(known))}" if known else "this project has none"
        raise DvcError(f"no DVC remote named {remote!r} in {root / '.dvc' / 'config'} ({have}): add one with "
                       f"`dvc remote add {remote} <url>` (a folder, s3://..., gs://...) or set "
                       "orchestrate.dvc_remote: null")


def pull(root: Path | str = ".", remote: str = "local",
         logger: logging.Logger | logging.LoggerAdapter | None = None) -> bool:
    """`dvc pull --allow-missing -r REMOTE`: restore the outputs dvc.lock names from the remote.

    Nothing to pull (a new remote folder, files the remote lacks, stages never run) is not an error: the
    stages recompute what is missing. Outputs changed here since dvc.lock (e.g. checkpoints of a killed
    training run) are kept, never overwritten: DVC then pulls nothing, says so, and returns False.
    An unknown remote or any other failure is a DvcError.
    """
    path = project(root)
    check_remote(path, remote)
    rc, lines = _stream(path, ["pull", "--allow-missing", "-r", remote], logger or log)
    if rc != 0 and any("unsaved files" in line for line in lines):
        (logger or log).warning("dvc pull -r %s: outputs in %s differ from dvc.lock; kept them and pulled "
                                "nothing (DVC reruns the stages they belong to)", remote, path)
        return False
    if rc != 0:
        raise DvcError(_failure(f"dvc pull -r {remote}", rc, lines, path))
    return True


def push(root: Path | str = ".", remote: str = "local",
         logger: logging.Logger | logging.LoggerAdapter | None = None) -> None:
    """`dvc push -r REMOTE`: upload every cached output dvc.lock names (a local folder is created if needed)."""
    path = project(root)
    check_remote(path, remote)
    rc, lines = _stream(path, ["push", "-r", remote], logger or log)
    if rc != 0:
        raise DvcError(_failure(f"dvc push -r {remote}", rc, lines, path))


# --- running dvc -------------------------------------------------------------------------------------

def metrics_diff(root: Path | str, base: str, targets: Sequence[str], timeout: float | None = None) -> str:
    """`dvc metrics diff BASE --md --targets ...` as Markdown ("" when nothing changed); DvcError says why not."""
    try:
        p = subprocess.run(_command(["metrics", "diff", base, "--md", "--targets", *targets]), cwd=root, env=_env(),
                           capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        raise DvcError(f"could not run: {redact(e)}") from None
    if p.returncode != 0:
        raise DvcError(f"failed (exit {p.returncode}): "
                       f"{_reason([x.strip() for x in (p.stdout + p.stderr).splitlines() if x.strip()])}")
    return p.stdout.strip()


def _command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "dvc", *args]  # DVC of this environment, whatever PATH says


def _env() -> dict[str, str]:
    # Stage commands (`biocheck ...`) must resolve to this environment too, activated or not.
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
            "DVC_NO_ANALYTICS": "1", "PYTHONUNBUFFERED": "1"}


def _stream(root: Path, args: Sequence[str], logger: logging.Logger | logging.LoggerAdapter) -> tuple[int, list[str]]:
    """Run `dvc ARGS` in `root`, logging each output line (redacted) as it comes; return (exit code, last
    lines). If this call is interrupted (a Prefect timeout, a cancellation, Ctrl-C) DVC is stopped first."""
    logger.info("dvc %s  (in %s)", " ".join(args), root)
    guarded = [sys.executable, "-m", "biocheck.orchestration.guard", *_command(args)]
    proc = subprocess.Popen(guarded, cwd=root, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    tail: deque[str] = deque(maxlen=TAIL_LINES)

    def read() -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            line = redact(raw.rstrip())
            tail.append(line)
            if line.strip():
                logger.info("%s", line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while proc.poll() is None:  # short waits: an exception raised into this thread gets through
            time.sleep(POLL_S)
    finally:
        if proc.poll() is None:
            _stop(proc, logger)
        reader.join(timeout=5)
    return proc.returncode, list(tail)


def _stop(proc: subprocess.Popen, logger: logging.Logger | logging.LoggerAdapter) -> None:
    """SIGINT to the guard's process group (DVC and its stage clean up, release their locks), SIGKILL if it
    lingers."""
    logger.warning("stopping dvc (pid %s) and its stage", proc.pid)
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


# --- one-line errors ---------------------------------------------------------------------------------

def _failure(what: str, rc: int, lines: Sequence[str], root: Path) -> str:
    text = [line.strip() for line in lines if line.strip()]
    pids: list[int] = []
    if any(LOCKED in line for line in text):  # the repo lock: DVC holds it while it plans or moves data
        pids = _lock_pids(root)
    elif any(BUSY in line for line in text):  # the rwlock: DVC holds it on a stage's paths while it runs
        pids = [int(m) for m in re.findall(r"^\(PID (\d+)\)", "\n".join(text), flags=re.MULTILINE)]
    else:
        return redact(f"{what} failed (exit {rc}): {_reason(text)}")
    holders = [_describe(pid) for pid in pids]
    if any(running for _, running in holders) or not holders:
        advice = "wait for it to finish or stop it (`kill PID`), then rerun; a DVC process that was killed frees it"
    else:  # a zombie (killed with its parent, never reaped) still counts as alive for DVC
        advice = f"it is no longer running: remove {root / '.dvc' / 'tmp' / 'rwlock'} and rerun"
    who = "; ".join(desc for desc, _ in holders) or "pid unknown"
    return redact(f"{what}: {root} is in use by another DVC process ({who}): {advice}")


def _reason(text: Sequence[str]) -> str:
    """The most useful line of a failed run: the stage's own `error: ...` line (the biocheck CLI), else the
    last line of a Python traceback, else DVC's own ERROR line, else the last line."""
    for line in reversed(text):
        if line.startswith("error:"):
            return line[len("error:"):].strip()
    if "Traceback (most recent call last):" in text:
        after = text[len(text) - text[::-1].index("Traceback (most recent call last):"):]
        own = [line for line in after if not line.startswith(("ERROR:", "WARNING:", "File ", "^"))]
        if own:
            return own[-1]
    for line in reversed(text):
        if line.startswith("ERROR:"):
            return line[len("ERROR:"):].strip()
    return text[-1] if text else "no output"


def failed_stage(lines: Sequence[str]) -> str | None:
    """The stage a failed `dvc repro` stopped in, read from its output: DVC's own "failed to reproduce" line,
    else the last stage it started (a killed run prints no error); None when no stage had started."""
    text = "\n".join(lines)
    found = FAILED.findall(text) or RUNNING.findall(text)
    return found[-1] if found else None


def failure_reason(lines: Sequence[str]) -> str:
    """The most useful line of a failed run's output (the stage's `error:` line first): `_reason`."""
    return _reason([line.strip() for line in lines if line.strip()])


def _lock_pids(root: Path) -> list[int]:
    """The owner of DVC's repo lock: the file holds its pid."""
    try:
        return [int((root / ".dvc" / "tmp" / "lock").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


def _describe(pid: int) -> tuple[str, bool]:
    """('pid N: its command', whether it is running)."""
    import psutil  # a DVC dependency

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return f"pid {pid}, exited", False
        return f"pid {pid}: {' '.join(proc.cmdline())[:160]}", True
    except psutil.NoSuchProcess:
        return f"pid {pid}, gone", False
    except psutil.Error:  # not ours to read: the pid alone still helps
        return f"pid {pid}", True
