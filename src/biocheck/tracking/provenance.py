"""Where a run comes from, as tags: git commit and dirty flag, the md5 of a DVC stage's inputs (dvc.lock's
view), the pipeline run a stage belongs to (Prefect flow run or the `dvc` process above), the Prefect flow run
and a study unit's tags from the environment, and `common_tags`, which every run carries."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from biocheck.tracking.config import FLOW_RUN_ENV, PARENT_NAME_ENV, PIPELINE_ENV, RUN_TAGS_ENV
from biocheck.tracking.store import current, repo_root

log = logging.getLogger(__name__)


def git_state(cwd: Path | None = None) -> dict[str, str]:
    """`git_commit` and `git_dirty` ("true"/"false") for run tags; "unknown" outside a git checkout. Dirty means
    a tracked file differs from the commit, leaving out what the pipeline itself writes (pipeline_outputs:
    dvc.lock and the outputs dvc.yaml names): `dvc repro` rewrites those in a fresh clone."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True,
                              timeout=30).stdout
    try:
        commit = git("rev-parse", "HEAD").strip()
        top = Path(git("rev-parse", "--show-toplevel").strip())
        changed = _changed_paths(git("status", "--porcelain=v1", "-z", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    written = pipeline_outputs(repo_root(cwd)) if changed else ()
    paths = [top.joinpath(c).resolve() for c in changed]
    dirty = any(not any(path == out or path.is_relative_to(out) for out in written) for path in paths)
    return {"git_commit": commit, "git_dirty": "true" if dirty else "false"}


def _changed_paths(porcelain: str) -> list[str]:
    """The paths `git status --porcelain=v1 -z` lists (a rename: both its paths)."""
    entries, paths = porcelain.split("\0"), []
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC":  # a rename or copy: the next entry is the original path
                i += 1
                paths.append(entries[i])
        i += 1
    return paths


def pipeline_outputs(root: Path) -> tuple[Path, ...]:
    """What `dvc repro` writes in the project at `root`: dvc.lock and every stage's outs, metrics and plots as
    dvc.yaml names them (foreach stages resolved by DVC's own parser); just dvc.lock where DVC cannot say."""
    root = Path(root).resolve()
    lock = root / "dvc.lock"
    if not (root / "dvc.yaml").is_file():
        return (lock,)
    mtime = (root / "dvc.yaml").stat().st_mtime_ns
    return (lock, *_stage_outputs(str(root), mtime))


@functools.lru_cache(maxsize=8)
def _stage_outputs(root: str, mtime: int) -> tuple[Path, ...]:  # noqa: ARG001 (mtime: a new dvc.yaml, a new answer)
    try:
        from dvc.repo import Repo

        with Repo(root) as repo:
            return tuple(Path(root, out.def_path).resolve() for stage in repo.index.stages for out in stage.outs)
    except Exception as e:  # noqa: BLE001 (a tag is not worth failing a stage for)
        log.debug("pipeline outputs of %s: %s", root, e)
        return ()


def pipeline_id() -> str | None:
    """The pipeline run this stage belongs to: $BIOCHECK_PIPELINE_ID (the Prefect flow run), else, when DVC
    runs the stage, the `dvc` process above it (pid + start time: one `dvc repro` = one pipeline)."""
    given = os.environ.get(PIPELINE_ENV, "").strip()
    if given:
        return re.sub(r"[^\w.:-]", "_", given)[:200]
    return _dvc_ancestor() if os.environ.get("DVC_STAGE") else None


@contextlib.contextmanager
def in_pipeline(value: str | None, name: str | None = None, tags: Mapping[str, Any] | None = None) -> Iterator[None]:
    """$BIOCHECK_PIPELINE_ID = `value` for the runs started inside and the DVC stages started inside (their
    environment is this process's); None leaves the environment as it is. The Prefect flows use it: one flow
    run = one pipeline in MLflow. `name`: the parent run's name when this creates it (default `pipeline <date>`;
    a study: `study <name>`); `tags`: added to every run inside (a study unit's variant and seed)."""
    if not value:
        yield
        return
    values = {PIPELINE_ENV: value, PARENT_NAME_ENV: name,
              RUN_TAGS_ENV: json.dumps({k: str(v) for k, v in tags.items()}) if tags else None}
    with _environ(values):
        yield


@contextlib.contextmanager
def _environ(values: Mapping[str, str | None]) -> Iterator[None]:
    """These environment variables (None: unset) inside, the old values after."""
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def in_flow_run(flow_run_id: str | None) -> Iterator[None]:
    """Tag every run started inside (and in the DVC stages and Dask workers started inside: the environment)
    with `prefect_flow_run` = `flow_run_id`, so the flow run can link to its MLflow runs (flow_run_links).
    None: as it is."""
    if not flow_run_id:
        yield
        return
    with _environ({FLOW_RUN_ENV: str(flow_run_id)}):
        yield


def in_study() -> bool:
    """This process runs a study unit (its runs carry the tag `study`)."""
    return "study" in _env_tags()


def _env_tags() -> dict[str, str]:
    """The tags `in_pipeline` asked every run to carry ($BIOCHECK_RUN_TAGS; unreadable: none)."""
    try:
        given = json.loads(os.environ.get(RUN_TAGS_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}


def _dvc_ancestor() -> str | None:
    """`dvc-<boot>-<pid>-<start ticks>` of the nearest `dvc` process above this one (Linux /proc; else None)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
        pid = os.getppid()
        for _ in range(64):
            if pid <= 1:
                return None
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = [os.path.basename(a) for a in Path(f"/proc/{pid}/cmdline").read_bytes().decode(
                errors="replace").split("\0")[:3]]
            after = stat[stat.rindex(")") + 2:].split()  # fields 3.. (the command name may hold spaces)
            if "dvc" in argv[:2] or argv[1:3] == ["-m", "dvc"]:  # dvc ..., python .../dvc ..., python -m dvc
                return f"dvc-{boot}-{pid}-{after[19]}"  # field 22: start time in clock ticks since boot
            pid = int(after[1])  # field 4: the parent
    except (OSError, ValueError, IndexError):
        return None
    return None


def lock_md5(entry: Mapping[str, Any]) -> str:
    """md5 of a stage's inputs as a dvc.lock stage entry records them: its command (a foreach stage's with its
    key filled in: `train@eg_grpo` runs `--variant eg_grpo`), each dep's (path, md5) and the params' values.
    The same inputs give the same value, any changed input a different one."""
    deps = sorted(({"path": d["path"], "md5": d.get("md5")} for d in entry.get("deps") or []), key=lambda d: d["path"])
    blob = json.dumps({"cmd": entry.get("cmd"), "deps": deps, "params": entry.get("params") or {}}, sort_keys=True,
                      default=str)
    return hashlib.md5(blob.encode()).hexdigest()  # noqa: S324 (an identity, as DVC's own md5s)


def locked_deps_md5(root: Path | str, stage: str) -> str | None:
    """lock_md5 of `stage`'s entry in ROOT/dvc.lock (read as DVC reads it); None when it has none."""
    from dvc.utils.serialize import load_yaml

    path = Path(root) / "dvc.lock"
    entry = (load_yaml(str(path)).get("stages") or {}).get(stage) if path.is_file() else None
    return lock_md5(entry) if entry else None


@functools.lru_cache(maxsize=8)
def stage_deps_md5(root: str, stage: str) -> str:
    """lock_md5 of the command and inputs of DVC stage `stage` as they are now: what dvc.lock will record when
    the stage ends (a stage does not change its inputs). DVC's own hashing (and its hash cache: the files were hashed
    moments ago when `dvc repro` checked them), without DVC's repo lock, which the running `dvc repro` holds.
    "unknown" when DVC cannot say."""
    try:
        from dvc.dependency.param import ParamsDependency
        from dvc.repo import Repo

        with Repo(root) as repo:
            # the project's dvc.yaml by its path: the stage is found from any working directory
            [found] = repo.stage.collect(stage if ":" in stage else f"{Path(root, 'dvc.yaml')}:{stage}")
            deps, params = [], {}
            for dep in found.deps:
                value = dep.get_hash().value
                if isinstance(dep, ParamsDependency):
                    params[dep.def_path] = dict(value)
                else:
                    deps.append({"path": dep.def_path, "md5": value})
        return lock_md5({"cmd": found.cmd, "deps": deps, "params": params})
    except Exception as e:  # noqa: BLE001 (a tag is not worth failing a stage for)
        log.debug("dvc_deps_md5 of %s: %s", stage, e)
        return "unknown"


def common_tags(stage: str) -> dict[str, str]:
    """The tags every run carries: profile, git commit and dirty flag, DVC stage and its inputs' md5."""
    dvc_stage = os.environ.get("DVC_STAGE") or stage  # DVC's own name when DVC runs it (foreach key included)
    dvc_root = os.environ.get("DVC_ROOT")
    tags = {"stage": stage.split("@")[0], "dvc_stage": dvc_stage,
            # outside `dvc repro` no dvc.lock entry describes this run's inputs
            "dvc_deps_md5": stage_deps_md5(dvc_root, dvc_stage) if dvc_root and os.environ.get("DVC_STAGE") else "none",
            **git_state(repo_root())}
    profile = current().profile
    if profile:
        tags["profile"] = str(profile)
    flow_run = os.environ.get(FLOW_RUN_ENV, "").strip()
    if flow_run:
        tags["prefect_flow_run"] = flow_run
    return {**tags, **_env_tags()}


def file_md5(path: Path) -> str:
    """md5 of a file's bytes (the value DVC records for it), read in blocks."""
    h = hashlib.md5()  # noqa: S324
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

