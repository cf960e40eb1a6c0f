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
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import logging
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.secrets import contains_secret, redact, secret_values

log = logging.getLogger(__name__)

MARKERS = ("dvc.yaml", ".git")
PURPOSES = ("data", "train", "eval")
EXPERIMENTS = {"data": "biocheck-data", "train": "biocheck-train", "eval": "biocheck-eval"}  # the defaults
# Which experiment a stage logs into (a stage name before any `@key` of a DVC foreach).
STAGES = {"prepare": "data", "validate": "data", "evidence": "data", "evidence-refresh": "data", "model": "data",
          "judge": "train", "audit": "train", "train": "train", "select": "train", "evaluate": "eval", "check": "eval",
          "study": "eval"}
PIPELINE_ENV = "BIOCHECK_PIPELINE_ID"  # set by the Prefect pipeline flow; else the ancestor `dvc` process
PARENT_NAME_ENV = "BIOCHECK_PIPELINE_NAME"  # the parent run's name (a study: `study <name>`)
RUN_TAGS_ENV = "BIOCHECK_RUN_TAGS"  # JSON tags every run carries (a study unit: study, variant, seed)
FLOW_RUN_ENV = "BIOCHECK_PREFECT_FLOW_RUN"  # the Prefect flow run a run belongs to (tag `prefect_flow_run`)
UI_URL_ENV = "BIOCHECK_MLFLOW_UI"  # where `mlflow ui` serves a SQLite store, for links (default DEFAULT_UI)
DEFAULT_UI = "http://127.0.0.1:5000"
PROBE_TIMEOUT_S = 5  # one short look at an HTTP tracking server before any MLflow call
# MLflow's own HTTP retries would take minutes against a server that is down mid-run (a user's setting wins).
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


@dataclass
class TrackingConfig:
    """`tracking:` in params.yaml. No DVC stage lists it as a param: renaming an experiment reruns nothing."""

    experiments: dict[str, str] = field(default_factory=lambda: dict(EXPERIMENTS))  # purpose -> experiment name
    trace_samples: int = 3  # episodes per evaluated system and dataset logged as MLflow traces (0: none)

    def __post_init__(self) -> None:
        if not isinstance(self.experiments, dict):
            raise ValueError(f"experiments must map {', '.join(PURPOSES)} to experiment names")
        unknown = sorted(set(self.experiments) - set(PURPOSES))
        if unknown:
            raise ValueError(f"experiments: unknown purpose(s) {', '.join(map(str, unknown))}; "
                             f"choose from {', '.join(PURPOSES)}")
        for purpose, name in self.experiments.items():
            if not isinstance(name, str) or not name.strip():
                raise ValueError(f"experiments.{purpose} must be a non-empty experiment name, not {name!r}")
        self.experiments = {**EXPERIMENTS, **{k: v.strip() for k, v in self.experiments.items()}}
        if isinstance(self.trace_samples, bool) or not isinstance(self.trace_samples, int) or self.trace_samples < 0:
            raise ValueError(f"trace_samples must be a whole number >= 0 (0: no traces), not {self.trace_samples!r}")


@dataclass
class Context:
    """What the runs of one stage share (pipeline.py sets it per stage; tests and ad-hoc calls get defaults)."""

    config: TrackingConfig = field(default_factory=TrackingConfig)
    profile: str | None = None
    prepared_dir: Path | None = None  # the prepared splits (datasets logged with `log_dataset`)
    registered_model: str | None = None  # select.registered_model: evaluate reads and tags its versions
    model_aliases: dict[str, str] = field(default_factory=dict)  # evaluated system -> name of the model it ran


_context = Context()
_broken: dict[str, str] = {}  # tracking URI -> why tracking stopped using it (until the next stage's context)
_reachable: dict[str, str | None] = {}  # tracking URI -> why it cannot be used (None: fine), probed once


@contextlib.contextmanager
def context(**values: Any) -> Iterator[Context]:
    """Runs started inside use these experiment names, profile, prepared data and registry names. A new
    context (a new stage) tries the tracking store afresh: a failure stops tracking for one stage only."""
    global _context
    _broken.clear()
    _reachable.clear()
    old, _context = _context, Context(**values)
    try:
        yield _context
    finally:
        _context = old


def current() -> Context:
    return _context


# --- where -------------------------------------------------------------------------------------------

def repo_root(start: Path | None = None) -> Path:
    """The nearest folder above `start` (default: cwd) holding dvc.yaml or .git; else `start`."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if any((d / m).exists() for m in MARKERS):
            return d
    return start


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{repo_root() / 'mlflow.db'}"


def enabled() -> bool:
    """Tracking is on (BIOCHECK_TRACKING) and its store has not failed in this process."""
    off = os.environ.get("BIOCHECK_TRACKING", "on").lower() in ("0", "off", "false", "no")
    return not off and tracking_uri() not in _broken


def experiment(stage: str) -> str:
    """The experiment a stage (`train@eg_grpo`, `check`, ...) logs into."""
    name = stage.split("@")[0]
    if name not in STAGES:
        raise ValueError(f"tracking: unknown stage {stage!r}; add it to tracking.STAGES with its experiment")
    return _context.config.experiments[STAGES[name]]


def shown_uri(uri: str) -> str:
    """The URI for a message: password and query values masked, environment secrets blanked."""
    parts = urllib.parse.urlsplit(uri)
    if not parts.password and not parts.query:
        return redact(uri)  # as given (a round trip would turn sqlite:////abs into sqlite://abs)
    netloc = parts.netloc
    if parts.password:
        netloc = netloc.replace(f":{parts.password}@", ":***@")
    query = "&".join(f"{k}=***" for k, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
    return redact(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment)))


def _unusable(uri: str) -> str | None:
    """Why the tracking store at `uri` cannot be used (None: it looks fine). One short probe per URI."""
    if uri in _reachable:
        return _reachable[uri]
    why = None
    scheme = uri.split(":", 1)[0].lower()
    if scheme == "sqlite":
        path = urllib.parse.urlsplit(uri).path[1:]  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db
        folder = Path(path or ".").parent if path and path != ":memory:" else None
        db = Path(path) if path and path != ":memory:" else None
        if db is not None and (db.is_dir() or (db.exists() and not db.is_file())):
            # else SQLAlchemy retries opening it for well over a minute before MLflow gives up
            why = f"{db} is {'a folder' if db.is_dir() else 'not a regular file'}, not a database file"
        elif folder is not None and not folder.is_dir():
            why = f"its folder {folder} does not exist"
        elif folder is not None and not os.access(folder, os.W_OK):
            why = f"its folder {folder} is not writable"
    elif scheme in ("http", "https"):
        try:
            urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=PROBE_TIMEOUT_S).close()  # noqa: S310
        except urllib.error.HTTPError:
            pass  # the server answered: it is there (a proxy, a login, an old server without /health)
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None)
            if not isinstance(reason, ssl.SSLError):  # TLS settings are MLflow's business (its own env vars)
                why = f"no answer ({reason or e})"
    _reachable[uri] = why
    return why


def quiet_artifact_progress() -> None:
    """MLflow's artifact upload/download bars are for a person at a terminal: off when stderr is not one (logs,
    CI, DVC's output), unless MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR says otherwise."""
    if not sys.stderr.isatty():
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def store_problem() -> str | None:
    """Why the tracking store cannot be used now (None: it looks fine); one short probe per store and stage."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    return _unusable(tracking_uri())


class Unavailable(Exception):
    """The tracking store cannot be used (the probe said why)."""


def _give_up(what: str, error: BaseException) -> None:
    """Turn tracking off for the rest of this stage with one warning line on stderr (results are written as
    usual)."""
    uri = tracking_uri()
    if uri in _broken:
        return
    why = str(error) if isinstance(error, Unavailable) else f"{type(error).__name__}: {error}"
    why = _broken[uri] = " ".join(redact(why).split())[:300]
    # stderr, not logging: one line whatever the log handler's width; a log record would be wrapped.
    sys.stderr.write(f"warning: MLflow tracking off: {what} at {shown_uri(uri)} failed ({why}); the results are "
                     "written as usual. Fix MLFLOW_TRACKING_URI (or start that server), or set BIOCHECK_TRACKING=off "
                     "to run untracked.\n")
    sys.stderr.flush()


@contextlib.contextmanager
def guard(what: str) -> Iterator[None]:
    """Run tracking calls; any failure turns tracking off with one warning line instead of raising."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 (a tracking failure must never cost the stage's results)
        _give_up(what, e)


# --- where artifacts go -----------------------------------------------------------------------------

# `biocheck-artifacts:/mlartifacts/...`: the artifact locations of experiments an older BioCheck created, still
# read here and through the package's entry point; new experiments get plain file locations (_experiment_id).
ARTIFACT_SCHEME = "biocheck-artifacts"
ARTIFACT_DIR = "mlartifacts"  # beside mlflow.db (gitignored), where `mlflow server` keeps its own artifacts
SERVER_STORE_ENV = "_MLFLOW_SERVER_FILE_STORE"  # the backend store of a running `mlflow server` / `mlflow ui`


def store_folder(uri: str | None = None) -> Path | None:
    """The folder of the SQLite database `uri` (default: the tracking URI) names; None for another store."""
    uri = uri or tracking_uri()
    if not uri.lower().startswith("sqlite:"):
        return None
    path = urllib.parse.urlsplit(uri).path[1:]  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db
    return Path(path).resolve().parent if path and path != ":memory:" else None


def use_project_artifacts() -> None:
    """Let MLflow read and write `biocheck-artifacts:` locations (experiments an older BioCheck created) in this
    process (the package's entry point does the same for `mlflow ui` and any other MLflow process of this
    environment)."""
    from mlflow.store.artifact.artifact_repository_registry import _artifact_repository_registry

    _artifact_repository_registry.register(ARTIFACT_SCHEME, __getattr__("ProjectArtifactRepository"))


def _experiment_id(name: str, purpose: str | None = None) -> str:
    """The id of experiment `name`, created when missing with its description (DESCRIPTIONS[purpose], the
    `mlflow.note.content` tag the UI shows) and, with a SQLite store, the artifact location
    `file:///<the database's folder>/mlartifacts/<name>`: a plain local folder that any MLflow reads (where
    `mlflow server` keeps its own, `./mlartifacts`), not MLflow's default `./mlruns` of the working directory."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    found = client.get_experiment_by_name(name)
    if found is None:
        location = None
        db_folder = store_folder()
        if db_folder is not None:
            location = (db_folder / ARTIFACT_DIR / re.sub(r"[^\w.-]", "_", name)).as_uri()
        try:
            found = client.get_experiment(client.create_experiment(name, artifact_location=location))
        except MlflowException:  # another stage created it meanwhile
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.artifact_location.startswith(f"{ARTIFACT_SCHEME}:") and name not in _warned_legacy:
        _warned_legacy.add(name)
        log.warning("MLflow experiment %s keeps its artifacts at %s, a location only BioCheck reads (made by an "
                    "older BioCheck): MLflow without BioCheck cannot download them. To start afresh, move mlflow.db "
                    "and mlartifacts/ away.", name, found.artifact_location)
    note = DESCRIPTIONS.get(purpose or "")
    if note and found.tags.get(NOTE_TAG) != note:
        client.set_experiment_tag(found.experiment_id, NOTE_TAG, note)
    return found.experiment_id


_warned_legacy: set[str] = set()
NOTE_TAG = "mlflow.note.content"  # the experiment's description in the MLflow UI
DESCRIPTIONS = {
    "data": "BioCheck's data stages: prepare, validate, evidence (the search index), evidence refresh, model "
            "init. One run per stage; a `dvc repro` or a Prefect pipeline run nests them under `pipeline <date>`.",
    "train": "BioCheck's training: the judges, the warm start, the reward audit, `train <variant> seed=<n>` "
             "(GRPO curves: rewards/* and eval_rewards/*) and `select <variant>` (the checkpoint registered as "
             "biocheck-agent).",
    "eval": "BioCheck's evaluations: each `evaluate` run (config, gallery) with one child run "
            "`eval <system> <dataset>` per system and dataset (accuracy, macro_f1, eqs, ehr, ... with their n); "
            "`check` runs; agent episodes in the Traces tab. Filters: params.system = 'eg_grpo' and "
            "params.model_alias = 'selected' (the newest selection); tags.registry_aliases LIKE '%champion%' (the "
            "weights the registry's champion held then).",
}


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


# --- tags --------------------------------------------------------------------------------------------

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


def ui_url(experiment_id: str, run_id: str) -> str:
    """The run's page in the MLflow UI: on the tracking server when the URI is one, else where `mlflow ui`
    serves the SQLite store by default ($BIOCHECK_MLFLOW_UI to say another address)."""
    uri = tracking_uri()
    base = uri if uri.lower().startswith(("http://", "https://")) else os.environ.get(UI_URL_ENV) or DEFAULT_UI
    parts = urllib.parse.urlsplit(base.rstrip("/"))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host  # never a user or password in a link
    return redact(f"{parts.scheme}://{netloc}{parts.path}/#/experiments/{experiment_id}/runs/{run_id}")


def flow_run_links(flow_run_id: str) -> list[dict[str, str]]:
    """The MLflow runs a Prefect flow run logged (tag `prefect_flow_run`), the top ones only (a run whose
    parent is also listed is left out): [{experiment, name, run_uri, url}], oldest first. Empty when tracking
    is off or the store cannot be read (never raises: a link is not worth failing a flow for)."""
    if not enabled() or _unusable(tracking_uri()):
        return []
    try:
        import mlflow

        mlflow.set_tracking_uri(tracking_uri())
        client = mlflow.MlflowClient()
        names = {e.experiment_id: e.name for e in client.search_experiments()}
        value = str(flow_run_id).replace("'", "")
        runs = client.search_runs(list(names), filter_string=f"tags.prefect_flow_run = '{value}'",
                                  order_by=["attributes.start_time ASC"], max_results=500)
    except Exception as e:  # noqa: BLE001
        log.warning("MLflow runs of flow run %s not found: %s", flow_run_id, redact(str(e)))
        return []
    ids = {r.info.run_id for r in runs}
    return [{"experiment": names.get(r.info.experiment_id, r.info.experiment_id), "name": r.info.run_name or "",
             "run_uri": f"runs:/{r.info.run_id}", "url": ui_url(r.info.experiment_id, r.info.run_id)}
            for r in runs if r.data.tags.get("mlflow.parentRunId") not in ids]


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
    if _context.profile:
        tags["profile"] = str(_context.profile)
    flow_run = os.environ.get(FLOW_RUN_ENV, "").strip()
    if flow_run:
        tags["prefect_flow_run"] = flow_run
    return {**tags, **_env_tags()}


# --- runs --------------------------------------------------------------------------------------------

def _mlflow_key(key: str) -> str:
    """MLflow names allow letters, digits and `_-. :/`; anything else (e.g. "train+val") becomes `_`."""
    return re.sub(r"[^\w\-. :/]", "_", redact(key))


def flatten(d: Mapping[str, Any], prefix: str = "", sep: str = ".") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{sep}{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key, sep))
        else:
            out[key] = v
    return out


def _start(stage: str, params: Mapping[str, Any] | None, tags: Mapping[str, Any] | None, run_name: str | None,
           parent: str | None, pipeline_parent_run: bool = True) -> tuple[Any, str | None]:
    """(the active run, the pipeline parent's id when this run nests under one). A run whose `parent` is the
    active run (an evaluation's `eval <system> <dataset>` inside `evaluate`) starts nested in it."""
    uri = tracking_uri()
    why = _unusable(uri)
    if why:
        raise Unavailable(why)
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)
    quiet_artifact_progress()
    import mlflow

    mlflow.set_tracking_uri(uri)
    use_project_artifacts()
    exp_id = mlflow.set_experiment(experiment_id=_experiment_id(experiment(stage),
                                                                   STAGES[stage.split('@')[0]])).experiment_id
    all_tags = {**common_tags(stage), **{k: str(v) for k, v in (tags or {}).items() if v is not None}}
    pipeline_parent, pid = None, pipeline_id()
    if pid is not None:
        all_tags["pipeline_id"] = pid
        if parent is None and pipeline_parent_run:
            parent = pipeline_parent = _pipeline_parent(exp_id, pid, all_tags)
    if parent is not None:
        all_tags["mlflow.parentRunId"] = parent
    name, clean = redact(run_name or stage), {k: redact(v) for k, v in all_tags.items()}
    outer = mlflow.active_run()
    nested = outer is not None and parent == outer.info.run_id
    active = mlflow.start_run(experiment_id=exp_id, run_name=name, tags=clean, nested=nested)
    try:
        if params:  # redact before the cut: half a key would no longer match
            mlflow.log_params({_mlflow_key(k): redact(v)[:500] for k, v in flatten(params).items()})
    except Exception:
        mlflow.end_run("FAILED")
        raise
    return active, pipeline_parent


@contextlib.contextmanager
def run(stage: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, Any] | None = None,
        run_name: str | None = None, parent: str | None = None, nest_in_pipeline: bool = True) -> Iterator[Any]:
    """An MLflow run of `stage` (a DVC stage name such as `train@eg_grpo`, or `check`) in its purpose's
    experiment, named `run_name` (default: the stage), with the common tags plus `tags`. It nests under
    `parent` (a run id), else under this pipeline's parent run when the stage runs in one (unless
    `nest_in_pipeline` is False: then it only carries the pipeline's tag); a `parent` that is the active run
    (`with run(...) as outer`) nests this run inside it. The run is RUNNING while the body runs and ends
    FINISHED, FAILED when the body raises, KILLED on Ctrl-C. Yields the run, or None when tracking is off or
    fails (then one warning line; the body runs either way)."""
    experiment(stage)  # an unknown stage is a bug to fix, not a tracking failure to warn about
    if not enabled():
        yield None
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # offline machines: no phone-home attempts
    active = pipeline_parent = None
    try:
        active, pipeline_parent = _start(stage, params, tags, run_name, parent, nest_in_pipeline)
    except Exception as e:  # noqa: BLE001 (a tracking failure must never cost the stage's results)
        _give_up(f"starting the {stage} run", e)
    status = "FINISHED"
    try:
        yield active
    except BaseException as e:
        status = "KILLED" if isinstance(e, KeyboardInterrupt) else "FAILED"
        raise
    finally:
        if active is not None:
            with guard(f"ending the {stage} run"):
                import mlflow

                mlflow.end_run(status)
                if pipeline_parent is not None:  # the pipeline's run ends with its latest stage, as it ended
                    mlflow.MlflowClient().set_terminated(pipeline_parent, status)


def _pipeline_parent(exp_id: str, pid: str, tags: Mapping[str, str]) -> str:
    """The id of pipeline `pid`'s parent run in this experiment, created by the first stage that needs it.

    Two stages starting at once may both create one: the earliest wins, the other is deleted."""
    from mlflow import MlflowClient

    client = MlflowClient()
    query = f"tags.pipeline_id = '{pid}' and tags.kind = 'pipeline'"

    def parents(experiment_ids: list[str]) -> list[Any]:
        runs = client.search_runs(experiment_ids, filter_string=query, max_results=50)
        return sorted(runs, key=lambda r: (r.info.start_time, r.info.run_id))

    found = parents([exp_id])
    if not found:
        other = [e.experiment_id for name in _context.config.experiments.values()
                 if (e := client.get_experiment_by_name(name)) is not None and e.experiment_id != exp_id]
        earlier = parents(other) if other else []  # the same pipeline's parent elsewhere: the same name
        name = (earlier[0].info.run_name if earlier else os.environ.get(PARENT_NAME_ENV)
                or f"pipeline {datetime.datetime.now():%Y-%m-%d %H:%M}")
        keep = ("profile", "git_commit", "git_dirty", "study", "prefect_flow_run")
        mine = client.create_run(exp_id, run_name=name, tags={
            **{k: redact(tags[k]) for k in keep if k in tags}, "pipeline_id": pid, "kind": "pipeline"})
        found = parents([exp_id])
        for r in found[1:]:
            if r.info.run_id == mine.info.run_id:
                client.delete_run(mine.info.run_id)
    parent = found[0].info.run_id
    client.update_run(parent, status="RUNNING")
    return parent


def version_model_id(version: Any) -> str | None:
    """The logged model (`m-...`) a registry version was created from: its `model_id`, else its source
    `models:/m-...` (MLflow's SQL registry keeps only the source); None for a version registered from a folder."""
    source = str(getattr(version, "source", "") or "")
    found = getattr(version, "model_id", None) or (source.removeprefix("models:/") if source.startswith("models:/m-")
                                                     else None)
    return found if found and "/" not in found else None


def run_link(run: Any) -> dict[str, str]:
    """How to find `run` again: `runs:/<id>` (MLflow APIs) and the path in `mlflow ui`."""
    return {"run_uri": f"runs:/{run.info.run_id}",
            "run_link": f"#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}"}


# --- what a run logs -----------------------------------------------------------------------------------

def _active() -> bool:
    if not enabled():
        return False
    import mlflow

    return mlflow.active_run() is not None


def set_tags(tags: Mapping[str, Any]) -> None:
    """Tags on the active run, known only once its work has run (a model's fingerprint), secrets blanked
    (no-op outside a run or when tracking is off)."""
    if not _active():
        return
    import mlflow

    with guard("setting tags"):
        mlflow.set_tags({k: redact(str(v)) for k, v in tags.items() if v is not None})


def log_metrics(metrics: Mapping[str, Any], prefix: str = "") -> None:
    """Log the numeric leaves of a nested dict (no-op outside a run or when tracking is off)."""
    if not _active():
        return
    import mlflow

    flat = {_mlflow_key(k): float(v) for k, v in flatten(metrics, prefix).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}
    with guard("logging metrics"):
        mlflow.log_metrics(flat)


def file_md5(path: Path) -> str:
    """md5 of a file's bytes (the value DVC records for it), read in blocks."""
    h = hashlib.md5()  # noqa: S324
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def log_dataset(path: Path | str, context: str, name: str | None = None) -> None:
    """The prepared split at `path` as the run's input: name `dataset/split` (e.g. scifact/train), digest its
    md5, source its path (repo-relative when inside the repo); `context` training/validation/evaluation.
    No-op outside a run, when tracking is off, or when the file is missing."""
    path = Path(path)
    if not _active() or not path.is_file():
        return
    import mlflow
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.data.sources import LocalArtifactDatasetSource

    root, full = repo_root(), path.resolve()
    source = full.relative_to(root).as_posix() if full.is_relative_to(root) else full.as_posix()
    with guard("logging a dataset"):
        dataset = MetaDataset(LocalArtifactDatasetSource(source), name=name or f"{path.parent.name}/{path.stem}",
                              digest=file_md5(path))
        mlflow.log_input(dataset, context=context)


def log_artifacts(path: Path | str, artifact_path: str | None = None) -> None:
    """Log a file or a folder as run artifacts, secrets blanked from text files; a binary file holding a
    secret is left out with a warning (no-op outside a run or when tracking is off)."""
    path = Path(path)
    if not path.exists() or not _active():
        return
    import mlflow

    with tempfile.TemporaryDirectory(prefix="biocheck-artifacts-") as tmp, guard("logging artifacts"):
        clean = Path(tmp) / path.name
        if path.is_dir():
            clean.mkdir()
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                copy_redacted(f, clean / f.relative_to(path))
            mlflow.log_artifacts(str(clean), artifact_path=artifact_path)
        elif copy_redacted(path, clean):
            mlflow.log_artifact(str(clean), artifact_path=artifact_path)


def log_text(text: str, artifact_file: str, run_id: str | None = None) -> None:
    """`mlflow.log_text` with the secrets blanked, into the active run or the run `run_id` (one whose work has
    ended: a file that needs later work, an evaluation's paired tests); no-op outside a run or when tracking is off."""
    if not (enabled() if run_id else _active()):
        return
    import mlflow

    with guard("logging a text artifact"):
        mlflow.log_text(redact(text), artifact_file, run_id=run_id)


def log_table(rows: Sequence[Mapping[str, Any]], artifact_file: str) -> None:
    """Rows of plain values as an MLflow table (the UI's artifact view lists and filters them), every text
    cell with the secrets blanked (no-op outside a run or when tracking is off, or without rows)."""
    if not rows or not _active():
        return
    import mlflow

    columns = list(dict.fromkeys(k for r in rows for k in r))
    data = {c: [redact(v) if isinstance(v, str) else v for v in (r.get(c) for r in rows)] for c in columns}
    with guard("logging a table"):
        mlflow.log_table(data=data, artifact_file=artifact_file)


_TEXT_MAX = 64 << 20  # a larger file is scanned in chunks and never rewritten (weights, not text)
_CHUNK = 16 << 20


def _binary_holds_secret(src: Path) -> bool:
    """Whether a large file holds a secret, read in overlapping chunks (a secret may straddle two)."""
    overlap = max(len(v.encode("utf-8")) for v in secret_values())
    tail = b""
    with src.open("rb") as f:
        while chunk := f.read(_CHUNK):
            if contains_secret(tail + chunk):
                return True
            tail = chunk[-overlap:]
    return False


def copy_redacted(src: Path, dest: Path) -> bool:
    """Copy `src` to `dest` with secrets blanked; False (nothing copied) for a binary file holding one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not secret_values() or (src.stat().st_size > _TEXT_MAX and not _binary_holds_secret(src)):
        shutil.copyfile(src, dest)  # streamed: a model's weights are never read into memory
        return True
    if src.stat().st_size > _TEXT_MAX:
        log.warning("not logged to MLflow: %s holds a secret from the environment and is not text", src)
        return False
    data = src.read_bytes()
    if not contains_secret(data):
        shutil.copyfile(src, dest)
        return True
    try:
        dest.write_text(redact(data.decode("utf-8")), encoding="utf-8")
    except UnicodeDecodeError:
        log.warning("not logged to MLflow: %s holds a secret from the environment and is not text", src)
        return False
    return True
