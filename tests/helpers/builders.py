"""Tiny, hand-written datasets in the official release formats (never copies of the real data)."""

from __future__ import annotations

import csv
import io
import json
import tarfile
from pathlib import Path

from tests.helpers.paths import REPO

CORPUS = [
    {"doc_id": 101, "title": "Vitamin D and fracture risk", "abstract": [
        "Vitamin D supplementation reduced hip fractures in older adults.", "The effect was dose dependent."],
     "structured": False},
    {"doc_id": 102, "title": "Statins and memory", "abstract": [
        "Statin use was not associated with cognitive decline.", "Memory scores were unchanged."],
     "structured": False},
    {"doc_id": 103, "title": "Aspirin in primary prevention", "abstract": [
        "Aspirin increased major bleeding.", "It did not reduce cardiovascular mortality."], "structured": True},
    {"doc_id": 104, "title": "Exercise and depression", "abstract": [
        "Aerobic exercise reduced depressive symptoms.", "Effects persisted at one year."], "structured": False},
    {"doc_id": 105, "title": "Coffee and arrhythmia", "abstract": [
        "Coffee intake was not linked to atrial fibrillation."], "structured": False},
]


def claim(cid: int, text: str, label: str | None, doc: int = 101, cited: list[int] | None = None) -> dict:
    evidence = {} if label is None else {str(doc): [{"sentences": [0], "label": label}]}
    return {"id": cid, "claim": text, "evidence": evidence, "cited_doc_ids": cited if cited is not None else [doc]}


def scifact_train() -> list[dict]:
    rows = []
    for i in range(10):
        rows.append(claim(i, f"Vitamin D supplementation lowers fracture risk, variant {i}.", "SUPPORT", 101))
    for i in range(10, 15):
        rows.append(claim(i, f"Aspirin lowers cardiovascular mortality, variant {i}.", "CONTRADICT", 103))
    for i in range(15, 23):
        rows.append(claim(i, f"Coffee causes arrhythmia in teenagers, variant {i}.", None, 105))
    return rows


def scifact_dev() -> list[dict]:
    return [
        claim(100, "Exercise reduces depressive symptoms.", "SUPPORT", 104),
        claim(101, "Statins cause memory loss.", "CONTRADICT", 102),
        claim(102, "Coffee consumption prevents dementia.", None, 105),
        claim(103, "Aerobic exercise worsens depression in adults.", "CONTRADICT", 104),
    ]


HEALTHFC_HEADER = ["en_claim", "en_explanation", "en_top_sentences", "de_claim", "de_explanation",
                   "de_top_sentences", "label", "de_verdict", "de_title", "authors", "date", "url"]


def healthfc_rows() -> list[dict]:
    texts = [("Can masks reduce corona infections?", 0), ("Does zinc shorten a cold?", 1),
             ("Does homeopathy cure allergies?", 2), ("Does fish oil protect the heart?", 1),
             ("Can vitamin C prevent colds in athletes?", 0), ("Do magnets relieve back pain?", 2),
             ("Does green tea help weight loss?", 1)]
    return [{"en_claim": t, "en_explanation": "Because studies.", "en_top_sentences": "", "de_claim": "",
             "de_explanation": "", "de_top_sentences": "", "label": str(lab), "de_verdict": "",
             "de_title": "", "authors": "", "date": "2023-01-01", "url": f"https://example.org/{i}"}
            for i, (t, lab) in enumerate(texts)]


def jsonl_bytes(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")


def write_scifact_tar(path: Path, train: list[dict] | bytes | None = None, dev: list[dict] | bytes | None = None,
                      corpus: list[dict] | bytes | None = None) -> Path:
    """A tarball laid out like the official release: data/claims_*.jsonl, data/corpus.jsonl."""
    files = {"claims_train.jsonl": scifact_train() if train is None else train,
             "claims_dev.jsonl": scifact_dev() if dev is None else dev,
             "claims_test.jsonl": [{"id": 900, "claim": "Hidden label claim."}],
             "corpus.jsonl": CORPUS if corpus is None else corpus}
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            data = content if isinstance(content, bytes) else jsonl_bytes(content)
            info = tarfile.TarInfo(f"data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def csv_bytes(rows: list[dict], header: list[str] | None = None) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header or HEALTHFC_HEADER, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return b"\xef\xbb\xbf" + buf.getvalue().encode("utf-8")  # UTF-8 with BOM, like the release


def write_raw(root: Path, **scifact) -> Path:
    """A complete raw folder (the layout `biocheck data fetch` and mirrors use)."""
    write_scifact_tar(root / "scifact" / "data.tar.gz", **scifact)
    (root / "healthfc").mkdir(parents=True, exist_ok=True)
    (root / "healthfc" / "Datensatz.csv").write_bytes(csv_bytes(healthfc_rows()))
    return root


# --- a synthetic release with the official row counts ------------------------------------------------
# Made-up claims in the release formats, sized like the real release so that prepare + validate run
# with the default row counts and the real params.yaml, without the real data.

def official_sizes(readme: Path | None = None) -> dict[str, int]:
    """The release sizes the README documents: SciFact train / dev claims and HealthFC rows."""
    import re

    text = (readme or REPO / "README.md").read_text(encoding="utf-8")
    patterns = {"scifact_train": r"SciFact train \((\d+) claims", "scifact_dev": r"SciFact dev \((\d+) claims",
                "healthfc": r"HealthFC \((\d+) claims"}
    sizes = {}
    for key, pattern in patterns.items():
        m = re.search(pattern, text)
        assert m, f"README.md no longer documents the release size /{pattern}/"
        sizes[key] = int(m.group(1))
    return sizes


TOPICS = ["vitamin D", "statins", "aspirin", "aerobic exercise", "coffee", "fish oil", "zinc", "green tea"]
OUTCOMES = ["fracture risk", "memory decline", "cardiovascular mortality", "depressive symptoms",
            "atrial fibrillation", "heart disease", "cold duration", "body weight"]


def synthetic_corpus(n_docs: int = 16) -> list[dict]:
    return [{"doc_id": 7000 + k, "title": f"{TOPICS[k % 8].capitalize()} and {OUTCOMES[k % 8]} (study {k})",
             "abstract": [f"In a cohort of {100 + k} adults, {TOPICS[k % 8]} was associated with {OUTCOMES[k % 8]}.",
                          f"The association held after adjustment (study {k})."],
             "structured": k % 3 == 0} for k in range(n_docs)]


def synthetic_claims(n: int, first_id: int, corpus: list[dict]) -> list[dict]:
    """n SciFact claims with ids first_id.. and labels cycling SUPPORT / CONTRADICT / no evidence."""
    rows = []
    for i in range(n):
        cid, doc = first_id + i, corpus[i % len(corpus)]["doc_id"]
        label = ("SUPPORT", "CONTRADICT", None)[i % 3]
        rows.append(claim(cid, f"Claim {cid}: {TOPICS[i % 8]} changes {OUTCOMES[(i // 8) % 8]} in adults.",
                          label, doc))
    return rows


def synthetic_healthfc(n: int) -> list[dict]:
    base = healthfc_rows()[0]
    return [{**base, "en_claim": f"Question {i}: does {TOPICS[i % 8]} help against {OUTCOMES[(i // 8) % 8]}?",
             "label": str(i % 3), "url": f"https://example.org/hfc/{i}"} for i in range(n)]


def write_release(root: Path, scifact_train: int, scifact_dev: int, healthfc: int, n_docs: int = 16) -> Path:
    """A raw folder (or mirror) like write_raw, with the given numbers of claims per file."""
    corpus = synthetic_corpus(n_docs)
    write_scifact_tar(root / "scifact" / "data.tar.gz", train=synthetic_claims(scifact_train, 0, corpus),
                      dev=synthetic_claims(scifact_dev, 100_000, corpus), corpus=corpus)
    (root / "healthfc").mkdir(parents=True, exist_ok=True)
    (root / "healthfc" / "Datensatz.csv").write_bytes(csv_bytes(synthetic_healthfc(healthfc)))
    return root


def build_tiny_model(folder: Path) -> Path:
    """The tests' small tiny-Qwen3 (vocab 600, hidden 64, 2 layers; the real chat template), built from
    the corpus above into folder/base in a few seconds (the `tiny_model` fixture and bench/eval_throughput.py)."""
    from biocheck.base_model.tiny import TinyModelConfig
    from biocheck.base_model.tiny import build_tiny_model as build

    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(c["doc_id"]), "title": c["title"], "abstract": c["abstract"]})
                              + "\n" for c in CORPUS * 20))
    from biocheck.agent.prompts import prompt_texts

    build(TinyModelConfig(out_dir=folder / "base", corpus=corpus, vocab_size=600, max_docs=100, prompt_repeats=5),
          prompt_texts())
    return folder / "base"


def write_test_splits(root, claims: dict) -> None:
    """data/prepared/<dataset>/test.jsonl under `root`, from {dataset: [(id, claim, label), ...]}."""
    from pathlib import Path

    from biocheck.data.schema import ClaimRecord

    for dataset, rows in claims.items():
        folder = Path(root) / "data" / "prepared" / dataset
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "test.jsonl").write_text("".join(
            ClaimRecord(id=i, dataset=dataset, split="test", claim=c, label=g).model_dump_json() + "\n"
            for i, c, g in rows))


def dvc_project(work: Path, repo: Path) -> Path:
    """`work` set up as a copy of the repo's pipeline: dvc.yaml, params.yaml and the package source (what DVC's
    stage commands and code dependencies read); the tests add the stage inputs they need."""
    import shutil

    for name in ("dvc.yaml", "params.yaml"):
        shutil.copy2(repo / name, work / name)
    shutil.copytree(repo / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return work


def model_files(folder: Path) -> Path:
    """A folder that passes the model-folder test (`llm.load.is_model_dir`: a config and a weights file) for
    code that never loads it; a load would refuse these placeholder files."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_text("{}")
    return folder
