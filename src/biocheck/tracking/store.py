"""Where the tracking store is, whether it can be used, and the experiments in it.

What this process knows about the store lives in one object, STORE (a `Store`): the current stage's Context,
what each tracking URI's probe said, which URIs tracking gave up on, which legacy experiments were warned
about. `context()` starts each stage with a fresh probe and no give-up; `STORE.reset()` is a fresh process's
state (for tests).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.secrets import redact
from biocheck.tracking.config import (
    ARTIFACT_DIR,
    ARTIFACT_SCHEME,
    DESCRIPTIONS,
    HTTP_DEFAULTS,
    MARKERS,
    NOTE_TAG,
    PROBE_TIMEOUT_S,
    STAGES,
    Context,
)

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """The tracking store cannot be used (the probe said why)."""


@dataclass
class Store:
    """This process's view of the tracking store (one instance: STORE)."""

    context: Context = field(default_factory=Context)  # the current stage's (context())
    probed: dict[str, str | None] = field(default_factory=dict)  # URI -> why it cannot be used (None: fine)
    broken: dict[str, str] = field(default_factory=dict)  # URI -> why tracking stopped using it (until the next stage)
    warned_legacy: set[str] = field(default_factory=set)  # experiments with a legacy artifact location, warned once

    def retry(self) -> None:
        """Try the store afresh (a new stage): a failure stops tracking for one stage only."""
        self.broken.clear()
        self.probed.clear()

    def reset(self) -> None:
        """Back to a fresh process's state: default context, nothing probed, given up on or warned about."""
        self.context = Context()
        self.retry()
        self.warned_legacy.clear()

    def problem(self, uri: str) -> str | None:
        """Why the tracking store at `uri` cannot be used (None: it looks fine). One short probe per URI."""
        if uri not in self.probed:
            self.probed[uri] = _probe(uri)
        return self.probed[uri]

    def give_up(self, what: str, error: BaseException) -> None:
        """Turn tracking off for the rest of this stage with one warning line on stderr (results are written as
        usual)."""
        uri = tracking_uri()
        if uri in self.broken:
            return
        why = str(error) if isinstance(error, Unavailable) else f"{type(error).__name__}: {error}"
        why = self.broken[uri] = " ".join(redact(why).split())[:300]
        # stderr, not logging: one line whatever the log handler's width; a log record would be wrapped.
        sys.stderr.write(f"warning: MLflow tracking off: {what} at {shown_uri(uri)} failed ({why}); the results are "
                         "written as usual. Fix MLFLOW_TRACKING_URI (or start that server), or set "
                         "BIOCHECK_TRACKING=off to run untracked.\n")
        sys.stderr.flush()


STORE = Store()


@contextlib.contextmanager
def context(**values: Any) -> Iterator[Context]:
    """Runs started inside use these experiment names, profile, prepared data and registry names. A new
    context (a new stage) tries the tracking store afresh: a failure stops tracking for one stage only."""
    STORE.retry()
    old, STORE.context = STORE.context, Context(**values)
    try:
        yield STORE.context
    finally:
        STORE.context = old


def current() -> Context:
    return STORE.context


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
    return not off and tracking_uri() not in STORE.broken


def experiment(stage: str) -> str:
    """The experiment a stage (`train@eg_grpo`, `check`, ...) logs into."""
    name = stage.split("@")[0]
    if name not in STAGES:
        raise ValueError(f"tracking: unknown stage {stage!r}; add it to tracking.STAGES with its experiment")
    return STORE.context.config.experiments[STAGES[name]]


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


def store_folder(uri: str | None = None) -> Path | None:
    """The folder of the SQLite database `uri` (default: the tracking URI) names; None for another store."""
    uri = uri or tracking_uri()
    if not uri.lower().startswith("sqlite:"):
        return None
    path = urllib.parse.urlsplit(uri).path[1:]  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db
    return Path(path).resolve().parent if path and path != ":memory:" else None


# --- can it be used ----------------------------------------------------------------------------------

def _probe(uri: str) -> str | None:
    """Why the tracking store at `uri` cannot be used (None: it looks fine), from one short look."""
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
    return why


def http_defaults() -> None:
    """Bound MLflow's HTTP retries (HTTP_DEFAULTS) unless the user set them."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)


def quiet_artifact_progress() -> None:
    """MLflow's artifact upload/download bars are for a person at a terminal: off when stderr is not one (logs,
    CI, DVC's output), unless MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR says otherwise."""
    if not sys.stderr.isatty():
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def store_problem() -> str | None:
    """Why the tracking store cannot be used now (None: it looks fine); one short probe per store and stage."""
    http_defaults()
    return STORE.problem(tracking_uri())


@contextlib.contextmanager
def guard(what: str) -> Iterator[None]:
    """Run tracking calls; any failure turns tracking off with one warning line instead of raising."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 (a tracking failure must never cost the stage's results)
        STORE.give_up(what, e)


# --- experiments -------------------------------------------------------------------------------------

def ensure_experiment(name: str, purpose: str | None = None) -> str:
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
    if found.artifact_location.startswith(f"{ARTIFACT_SCHEME}:") and name not in STORE.warned_legacy:
        STORE.warned_legacy.add(name)
        log.warning("MLflow experiment %s keeps its artifacts at %s, a location only BioCheck reads (made by an "
                    "older BioCheck): MLflow without BioCheck cannot download them. To start afresh, move mlflow.db "
                    "and mlartifacts/ away.", name, found.artifact_location)
    note = DESCRIPTIONS.get(purpose or "")
    if note and found.tags.get(NOTE_TAG) != note:
        client.set_experiment_tag(found.experiment_id, NOTE_TAG, note)
    return found.experiment_id
