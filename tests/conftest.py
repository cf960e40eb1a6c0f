from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.builders import write_raw

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

REPO = Path(__file__).resolve().parents[1]
_MIRROR = os.environ.get("BIOCHECK_DATA_MIRROR", "").strip()
MIRROR = Path(_MIRROR).resolve() if _MIRROR else None


@pytest.fixture(scope="session", autouse=True)
def _isolated_tracking(tmp_path_factory):
    """Every test run logs to its own throw-away MLflow database, never the repo's mlflow.db."""
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{db}"
    yield db
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    """The rate limiter's shared state (and anything else per user) lives in a throw-away cache, never ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(autouse=True)
def _no_mirror_by_default(monkeypatch):
    """Tests opt in to a mirror explicitly; the developer's own env var must not leak into them."""
    monkeypatch.delenv("BIOCHECK_DATA_MIRROR", raising=False)


@pytest.fixture
def real_mirror() -> Path:
    if MIRROR is None or not (MIRROR / "scifact" / "data.tar.gz").is_file():
        pytest.skip("needs the real datasets: set BIOCHECK_DATA_MIRROR (e.g. ../shared/datasets)")
    return MIRROR


@pytest.fixture
def raw_dir(tmp_path) -> Path:
    return write_raw(tmp_path / "raw")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "real_mirror" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.realdata)


@pytest.fixture
def evidence(tmp_path):
    """The tiny corpus (tests.builders.CORPUS) in prepared format, built into an index + store."""
    import json

    from biocheck.pubmed.build import EvidenceConfig, build_evidence
    from tests.builders import CORPUS

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(d["doc_id"]), "title": d["title"], "abstract": d["abstract"],
                                          "structured": d["structured"]}) + "\n" for d in CORPUS))
    cfg = EvidenceConfig(corpus=corpus, index_dir=tmp_path / "index", store=tmp_path / "ev.sqlite",
                         metrics_path=tmp_path / "evidence.json", progress=False)
    return cfg, build_evidence(cfg)


@pytest.fixture
def evidence_workdir(evidence, tmp_path, monkeypatch):
    """cwd = a project folder whose params.yaml points at the `evidence` index and store."""
    import yaml

    cfg, _ = evidence
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["evidence"].update(index_dir=str(cfg.index_dir), store=str(cfg.store))
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A small tiny-Qwen3 (model + tokenizer with the real chat template), built once per test session."""
    from tests.builders import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


SERVER_FIXTURES = {"prefect_api", "prefect_test_server"}


@pytest.fixture(scope="session", autouse=True)
def _prefect_start(request, tmp_path_factory):
    """The shared Prefect server, begun at the start of the session in the background when a selected test
    needs it (a process of its own: its ~20 s start-up overlaps the tests before). When a test starts a
    server of its own too (prefect_db), a migrated database is made first and both start on copies: a new
    database costs a server's first start ~15 s of migrations."""
    needs = set().union(*(getattr(item, "fixturenames", ()) for item in request.session.items))
    if not needs & SERVER_FIXTURES:
        yield None
        return
    from concurrent.futures import ThreadPoolExecutor

    import prefect.server.api.server  # noqa: F401  (imported here, not in the thread: it holds the GIL)

    from tests.prefect_server import copy_db, migrated_db, start_test_api

    folder = tmp_path_factory.mktemp("prefect")
    pool = ThreadPoolExecutor(1)  # one thread: the server waits for the database
    db = pool.submit(migrated_db, folder / "migrated.db") if "prefect_db" in needs else None
    server = pool.submit(lambda: start_test_api(copy_db(db.result(), folder / "prefect.db") if db
                                                else folder / "prefect.db"))
    try:
        yield SimpleNamespace(db=db, server=server)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # a session that ended early starts no server
        if not server.cancelled() and server.exception() is None:
            server.result().stop()


@pytest.fixture(scope="session")
def prefect_db(_prefect_start) -> Path | None:
    """An empty Prefect database with every migration applied, to start a server on a copy of it
    (tests/prefect_server.py); None where no other server starts in this session (start on a new one:
    making it would cost as much as the migrations it saves)."""
    return _prefect_start.db.result() if _prefect_start is not None else None


@pytest.fixture(scope="session")
def prefect_test_server(_prefect_start):
    """One temporary Prefect API server (its own SQLite database) for every test that runs flows in this
    process, stopped at the end of the session."""
    return _prefect_start.server.result()


@pytest.fixture(scope="module")
def prefect_api(prefect_test_server):
    """The module's flows run against the session's Prefect server (its URL); the server is shared, so a test
    that reads runs, logs or artifacts back picks out its own (by flow run id, or the newest)."""
    from tests.prefect_server import using_api

    with using_api(prefect_test_server) as url:
        yield url
