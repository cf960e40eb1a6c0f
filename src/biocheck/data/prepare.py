"""`biocheck data prepare`: normalise SciFact and HealthFC into one schema and write the splits.

Output (`data/prepared/`, replaced as a whole, never half-written):
  full/scifact.jsonl, full/healthfc.jsonl   every claim of the release, with its split and label
  scifact/{train,val,test}.jsonl            working splits: label filter + seeded stratified subset
  healthfc/test.jsonl
  corpus.jsonl                              the SciFact abstracts (id, title, abstract sentences)
  manifest.json                             parameters and input checksums that produced this
plus dataset statistics as a small DVC metrics file (`metrics/data.json`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ValidationError

from biocheck.data.fetch import MANIFEST as RAW_MANIFEST
from biocheck.data.schema import DATASET_SPLITS, SPLITS, ClaimRecord, CorpusDoc
from biocheck.data.sources import (
    check_unique_ids,
    parse_jsonl_file,
    parse_scifact_claims,
    parse_scifact_corpus,
    read_healthfc_csv,
    read_scifact_tar,
)
from biocheck.data.split import stratified_split, stratified_subset
from biocheck.io import InputError, dump_jsonl, write_json_atomic
from biocheck.labels import LABELS, Label
from biocheck.outputs import claim_dir, output_dir
from biocheck.params import plain

log = logging.getLogger(__name__)

# How to get a good prepared file back (re-fetching would not help: the raw data is fine). Under DVC a
# plain `dvc repro` restores the cached copy of data/prepared, so the stage must be forced.
REPREPARE = "Re-create it with `dvc repro -f -s prepare` (under DVC) or `biocheck data prepare`."


def _default_keep() -> dict[str, list[str]]:
    return {"train": ["SUPPORTED", "REFUTED"], "val": ["SUPPORTED", "REFUTED"], "test": list(LABELS)}


@dataclass
class PrepareConfig:
    raw_dir: Path = Path("data/raw")
    out_dir: Path = Path("data/prepared")
    metrics_path: Path | None = Path("metrics/data.json")
    val_fraction: float = 0.2  # share of SciFact train (per label) that becomes `val`
    seed: int = 13
    keep_labels: dict[str, list[str]] = field(default_factory=_default_keep)  # per split
    subset: dict[str, int | None] = field(default_factory=dict)  # per split; None/missing = all
    # Splits whose subset takes as many claims of each label as it can (not the split's own mix): a validation set
    # on which a constant answer scores 1 / labels, so checkpoint selection cannot reward one.
    balanced: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.raw_dir, self.out_dir = Path(self.raw_dir), Path(self.out_dir)
        self.metrics_path = Path(self.metrics_path) if self.metrics_path else None
        for split, labels in self.keep_labels.items():
            if split not in SPLITS:
                raise ValueError(f"data.keep_labels: unknown split {split!r} (expected {list(SPLITS)})")
            bad = [x for x in labels if x not in LABELS]
            if bad or not labels:
                raise ValueError(f"data.keep_labels.{split}: {labels} must be a non-empty subset of {list(LABELS)}")
        for split, k in self.subset.items():
            if split not in SPLITS:
                raise ValueError(f"data.subset: unknown split {split!r} (expected {list(SPLITS)})")
            if k is not None and (not isinstance(k, int) or k < 1):
                raise ValueError(f"data.subset.{split}: {k!r} must be a positive integer or null (all)")
        bad = [x for x in self.balanced if x not in SPLITS]
        if bad:
            raise ValueError(f"data.balanced: unknown split(s) {bad} (expected some of {list(SPLITS)})")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"data.val_fraction: {self.val_fraction} must be between 0 and 1")


@dataclass
class Prepared:
    full: dict[str, list[ClaimRecord]]  # dataset -> every record
    working: dict[str, dict[str, list[ClaimRecord]]]  # dataset -> split -> kept records
    corpus: list[CorpusDoc]


def load_raw(raw_dir: Path) -> tuple[dict[str, list[ClaimRecord]], list[CorpusDoc]]:
    tar = raw_dir / "scifact" / "data.tar.gz"
    csv = raw_dir / "healthfc" / "Datensatz.csv"
    for p in (tar, csv):
        if not p.is_file():
            raise InputError(f"{p}: missing. Run `biocheck data fetch` first.")
    files = read_scifact_tar(tar)
    sf_train = parse_scifact_claims(files["claims_train.jsonl"], f"{tar}:claims_train.jsonl", "train")
    sf_dev = parse_scifact_claims(files["claims_dev.jsonl"], f"{tar}:claims_dev.jsonl", "test")
    corpus = parse_scifact_corpus(files["corpus.jsonl"], f"{tar}:corpus.jsonl")
    check_unique_ids(sf_train + sf_dev, f"{tar}: claims_train.jsonl + claims_dev.jsonl")
    return {"scifact": sf_train + sf_dev, "healthfc": read_healthfc_csv(csv)}, corpus


def build(full: dict[str, list[ClaimRecord]], corpus: list[CorpusDoc], cfg: PrepareConfig) -> Prepared:
    """Assign SciFact train/val, then apply per-split label filters and subsets."""
    sf = full["scifact"]
    # Split on the whole of SciFact train (all labels) so val never depends on the label filter.
    _, val_ids = stratified_split([r for r in sf if r.split == "train"], cfg.val_fraction, cfg.seed)
    full = {**full, "scifact": [r.model_copy(update={"split": "val"}) if r.split == "train" and r.id in val_ids
                                else r for r in sf]}
    working: dict[str, dict[str, list[ClaimRecord]]] = {}
    for ds, records in full.items():
        for split in DATASET_SPLITS[ds]:  # every one is written, and `validate` requires every one
            keep = set(cfg.keep_labels.get(split, LABELS))
            rows = [r for r in records if r.split == split and r.label.value in keep]
            if not rows:  # an empty file would only fail later, in a stage that cannot say why
                n = sum(r.split == split for r in records)
                raise InputError(f"{ds}/{split}: no claims to write ({n} {split} claims, none labelled "
                                 f"{sorted(keep)}). Check data.keep_labels.{split} and data.val_fraction "
                                 "in params.yaml.")
            working.setdefault(ds, {})[split] = stratified_subset(rows, cfg.subset.get(split), cfg.seed,
                                                                  balanced=split in cfg.balanced)
    return Prepared(full=full, working=working, corpus=corpus)


def label_counts(records: list[ClaimRecord]) -> dict[str, int]:
    c = Counter(r.label.value for r in records)
    return {**{label: c.get(label, 0) for label in LABELS}, "total": len(records)}


def stats(p: Prepared) -> dict:
    def per_split(records):
        return {s: label_counts([r for r in records if r.split == s]) for s in SPLITS
                if any(r.split == s for r in records)}

    return {
        "full": {ds: per_split(recs) for ds, recs in p.full.items()},
        "working": {ds: {s: label_counts(recs) for s, recs in splits.items()} for ds, splits in p.working.items()},
        "corpus": {"docs": len(p.corpus)},
    }


# Who may replace data.out_dir, how the user named it, and the files of an unmarked (older) output.
OUTPUT = ("biocheck data prepare", "--out-dir / data.out_dir", ("manifest.json", "corpus.jsonl"))


def write(p: Prepared, cfg: PrepareConfig, inputs: dict) -> dict:
    st = stats(p)
    with output_dir(cfg.out_dir, *OUTPUT) as tmp:
        (tmp / "full").mkdir()
        for ds, recs in p.full.items():
            dump_jsonl(tmp / "full" / f"{ds}.jsonl", recs)
        for ds, splits in p.working.items():
            (tmp / ds).mkdir()
            for split, recs in splits.items():
                dump_jsonl(tmp / ds / f"{split}.jsonl", recs)
        dump_jsonl(tmp / "corpus.jsonl", p.corpus)
        cfg_dict = plain(cfg)
        write_json_atomic(tmp / "manifest.json", {"config": cfg_dict, "inputs": inputs, "stats": st})
    if cfg.metrics_path:
        write_json_atomic(cfg.metrics_path, st)
    return st


def prepare(cfg: PrepareConfig | None = None) -> dict:
    """Run the whole stage; return the dataset statistics."""
    cfg = cfg or PrepareConfig()
    claim_dir(cfg.out_dir, *OUTPUT)  # before the work: a wrong --out-dir is refused at once
    full, corpus = load_raw(cfg.raw_dir)
    try:
        inputs = json.loads((cfg.raw_dir / RAW_MANIFEST).read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError):
        inputs = {}
    p = build(full, corpus, cfg)
    st = write(p, cfg, {k: v.get("sha256") for k, v in inputs.items()})
    for ds, splits in st["working"].items():
        for split, counts in splits.items():
            log.debug("%s/%s: %d claims %s", ds, split, counts["total"],
                     {k: v for k, v in counts.items() if k != "total"})
    return st


# --- readers for later stages ---------------------------------------------------------------------

def read_prepared(path: Path | str) -> list[dict]:
    """The rows of one prepared JSONL file; a missing or damaged file points to `prepare`."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file. {REPREPARE}")
    return parse_jsonl_file(path.read_bytes(), str(path), REPREPARE)


def _records(path: Path, model: type[BaseModel]) -> list:
    out = []
    for i, row in enumerate(read_prepared(path), start=1):
        try:
            out.append(model.model_validate(row))
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "record"
            raise InputError(f"{path}, record {i} (id {row.get('id')!r}): {where}: {first['msg']}. "
                             f"{REPREPARE}") from None
    return out


def load_split(dataset: str, split: str, prepared_dir: Path | str = "data/prepared") -> list[ClaimRecord]:
    return _records(Path(prepared_dir) / dataset / f"{split}.jsonl", ClaimRecord)


def load_full(dataset: str, prepared_dir: Path | str = "data/prepared") -> list[ClaimRecord]:
    return _records(Path(prepared_dir) / "full" / f"{dataset}.jsonl", ClaimRecord)


def load_corpus(prepared_dir: Path | str = "data/prepared") -> list[CorpusDoc]:
    return _records(Path(prepared_dir) / "corpus.jsonl", CorpusDoc)


__all__ = ["REPREPARE", "Label", "PrepareConfig", "load_corpus", "load_full", "load_split", "prepare",
           "read_prepared"]
