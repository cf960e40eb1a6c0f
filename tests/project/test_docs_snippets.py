"""Every ```python block of README.md, DEVELOPERS.md and docs/*.md runs, in file order, in a small project.

The project (cwd) holds what the docs assume: params.yaml, data/prepared/corpus.jsonl, its local index and
evidence store under data/evidence, a tiny model in models/base, a trace in runs/check, an MLflow store
(mlflow.db) with an evaluation and a `champion`, and a fake E-utilities server (BIOCHECK_EUTILS_URL) for
PubMed. A fragment may use these names as given (each doc says what they are where it uses them):

    episode        an agent episode (biocheck.agent.episode.Episode) that cites one retrieved paper
    views          [EpisodeView.from_episode(episode)]
    model_text     the episode's final message (the report as the model wrote it)
    ledger         the papers the episode retrieved, {pmid: Article}
    claim          the episode's claim
    more_articles  a list of Article
"""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml

from tests.helpers.paths import REPO
from tests.helpers.turns import REPORT

DOCS = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def blocks() -> list[tuple[str, int, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            out.append((doc.relative_to(REPO).as_posix(), text[:m.start()].count("\n") + 1, m.group(1)))
    return out


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_model):
    """The project every block runs in (see the module docstring), and the names fragments may use."""
    import mlflow

    from biocheck.agent.episode import Agent, AgentConfig
    from biocheck.agent.run import trace_path, write_trace
    from biocheck.evidence.build import EvidenceConfig, build_evidence
    from biocheck.evidence.search import SearchConfig, search_tool
    from biocheck.evidence.types import Article
    from biocheck.llm.scripted import ScriptedChat
    from biocheck.rewards.components import EpisodeView
    from tests.helpers.builders import CORPUS

    root = tmp_path_factory.mktemp("docs")
    corpus = root / "data" / "prepared" / "corpus.jsonl"
    corpus.parent.mkdir(parents=True)
    docs = [*CORPUS, {**CORPUS[0], "doc_id": 4983}]
    corpus.write_text("".join(json.dumps({"id": str(d["doc_id"]), "title": d["title"], "abstract": d["abstract"],
                                          "structured": d["structured"]}) + "\n" for d in docs))
    evidence = EvidenceConfig(corpus=corpus, index_dir=root / "data/evidence/index",
                              store=root / "data/evidence/evidence.sqlite", metrics_path=root / "evidence.json",
                              progress=False)
    build_evidence(evidence)
    shutil.copytree(tiny_model, root / "models" / "base")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    tool = search_tool(SearchConfig(index_dir=evidence.index_dir, store=evidence.store, max_results=3))
    turns = [{"tool_calls": [{"name": "search_pubmed", "arguments": {"query": "vitamin D"}}]}, {"content": REPORT}]
    claim = "Vitamin D prevents fractures."
    episode = Agent(ScriptedChat(turns), tool, AgentConfig(llm="scripted:docs"), search_backend="local").run(claim)
    write_trace(episode, trace_path(root / "runs" / "check", "1"))

    mlflow.set_tracking_uri(f"sqlite:///{root / 'mlflow.db'}")
    exp = mlflow.create_experiment("biocheck-eval", artifact_location=str(root / "mlartifacts"))  # not ./mlruns
    mlflow.set_experiment(experiment_id=exp)
    for system, acc in (("eg_grpo", 0.5), ("outcome_only", 0.4), ("base", 0.3)):
        with mlflow.start_run(experiment_id=exp, tags={"system": system, "dataset": "scifact"}) as run:
            mlflow.log_metrics({"accuracy": acc, "macro_f1": acc, "eqs": 0.2, "ehr": 0.1})
    client = mlflow.MlflowClient()
    client.create_registered_model("biocheck-agent")
    from biocheck.train.select import log_model

    logged = log_model(root / "models" / "base", run.info.run_id)  # as `select` logs models/selected
    mlflow.log_metric("scifact.accuracy", 0.5, run_id=run.info.run_id, model_id=logged.model_id)
    version = client.create_model_version("biocheck-agent", source=logged.model_uri, run_id=run.info.run_id,
                                          tags={"validation_reward": "0.45"})
    client.set_registered_model_alias("biocheck-agent", "champion", version.version)
    mlflow.set_tracking_uri(None)

    given = {"episode": episode, "views": [EpisodeView.from_episode(episode)], "model_text": episode.messages[-1]["content"],
             "ledger": dict(episode.ledger), "claim": claim,
             "more_articles": [Article(pmid="9001", title="Zinc and colds", abstract="Zinc shortened colds in adults.")]}
    return root, given


@pytest.fixture(scope="module")
def eutils():
    from tests.helpers.fake_eutils import FakeEutils

    with FakeEutils() as server:
        yield server


BLOCKS = blocks()


@pytest.mark.parametrize(("doc", "line", "code"), BLOCKS, ids=[f"{d}:{n}" for d, n, _ in BLOCKS])
def test_the_snippet_runs(doc, line, code, project, eutils, monkeypatch):
    root, given = project
    monkeypatch.chdir(root)
    monkeypatch.setenv("BIOCHECK_EUTILS_URL", eutils.url)
    monkeypatch.setenv("NCBI_EMAIL", "docs@example.org")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    exec(compile(code, f"{doc}:{line}", "exec"), {"__name__": f"doc_{doc}", **given})  # noqa: S102


def test_the_docs_have_snippets_to_run():
    """The collection finds the blocks (a changed fence style would silently test nothing)."""
    found = {doc for doc, _, _ in BLOCKS}
    assert {"docs/evidence.md", "docs/report.md", "docs/rewards.md", "docs/models.md"} <= found
