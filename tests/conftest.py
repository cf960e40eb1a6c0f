from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from tests.helpers.builders import write_raw
from tests.helpers.paths import REPO

# Fixtures that tests in several folders use, each defined once in a helper module.
pytest_plugins = ["tests.helpers.checkpoints", "tests.helpers.cli", "tests.helpers.eval_project",
                  "tests.helpers.narrative_project", "tests.helpers.projects", "tests.helpers.tiny"]

os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

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


@pytest.fixture(scope="session")
def _empty_mlflow_db(tmp_path_factory) -> Path:
    """An MLflow database with its tables made: MLflow's migrations take 1-2 s, a copy of their result 50 ms."""
    import mlflow

    db = tmp_path_factory.mktemp("mlflow-empty") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{db}").search_experiments()
    return db


@pytest.fixture
def mlflow_db(tmp_path, _empty_mlflow_db) -> Path:
    """tmp_path/mlflow.db: an empty MLflow database of this test's own (point MLFLOW_TRACKING_URI at it)."""
    import shutil

    db = tmp_path / "mlflow.db"
    shutil.copyfile(_empty_mlflow_db, db)
    return db


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


@pytest.fixture(scope="session")
def _evidence_built(tmp_path_factory):
    """The tiny corpus built once a session; `evidence` copies it (a build costs ~0.1 s, used by hundreds of tests)."""
    import json

    from biocheck.evidence.build import EvidenceConfig, build_evidence
    from tests.helpers.builders import CORPUS

    root = tmp_path_factory.mktemp("evidence")
    (root / "corpus.jsonl").write_text("".join(json.dumps({"id": str(d["doc_id"]), "title": d["title"],
                                                         "abstract": d["abstract"], "structured": d["structured"]})
                                               + "\n" for d in CORPUS))
    cfg = EvidenceConfig(corpus=root / "corpus.jsonl", index_dir=root / "index", store=root / "ev.sqlite",
                         metrics_path=root / "evidence.json", progress=False)
    return root, build_evidence(cfg)


@pytest.fixture
def evidence(tmp_path, _evidence_built):
    """The tiny corpus (tests.helpers.builders.CORPUS) in prepared format, built into an index + store in tmp_path."""
    import shutil

    from biocheck.evidence.build import EvidenceConfig

    root, stats = _evidence_built
    shutil.copytree(root, tmp_path, dirs_exist_ok=True)
    cfg = EvidenceConfig(corpus=tmp_path / "corpus.jsonl", index_dir=tmp_path / "index", store=tmp_path / "ev.sqlite",
                         metrics_path=tmp_path / "evidence.json", progress=False)
    return cfg, copy.deepcopy(stats)


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
    from tests.helpers.builders import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"))
