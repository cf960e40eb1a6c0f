"""Readers for the raw releases: turn official files into `ClaimRecord`s and `CorpusDoc`s.

Each reader is strict: a malformed file raises `InputError` naming the file, the line or row,
and the offending value, instead of silently dropping or guessing.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from pathlib import Path

import pandas as pd

from biocheck.data.schema import ClaimRecord, CorpusDoc, GoldEvidence
from biocheck.io import InputError, parse_jsonl
from biocheck.labels import Label

# How to get a good raw file back. Under DVC a plain `dvc repro` restores the cached (bad) copy of
# data/raw, so the fetch stage must be forced; outside DVC, `--force` skips the "already fetched" test.
REFETCH = "Re-fetch it with `dvc repro -f -s fetch` (under DVC) or `biocheck data fetch --force`."
SCIFACT_MEMBERS = ("claims_train.jsonl", "claims_dev.jsonl", "corpus.jsonl")
SCIFACT_LABELS = {"SUPPORT": Label.SUPPORTED, "CONTRADICT": Label.REFUTED}
HEALTHFC_LABELS = {0: Label.SUPPORTED, 1: Label.NEI, 2: Label.REFUTED}
HEALTHFC_COLUMNS = ("en_claim", "label")  # required; the rest are kept as metadata when present
HEALTHFC_META = {"en_explanation": "explanation", "url": "url", "date": "date"}


# --- SciFact --------------------------------------------------------------------------------------

def read_scifact_tar(path: Path, where: str | None = None, fix: str = REFETCH) -> dict[str, bytes]:
    """Return the bytes of claims_train/claims_dev/corpus from the release tarball, by base name.

    Every member is read to its end, so a cut or damaged file fails here (gzip checks its CRC).
    `where` names the file in errors (fetch checks a temporary file that stands for a URL) and
    `fix` says how to get a good one.
    """
    where = where or str(path)
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                f = tar.extractfile(member) if member.isfile() else None
                data = f.read() if f is not None else None  # read every file: a cut stream fails here
                if data is not None and Path(member.name).name in SCIFACT_MEMBERS:
                    out[Path(member.name).name] = data
    except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
        raise InputError(with_fix(f"{where}: not a readable gzip tar ({e}).", fix)) from None
    missing = [m for m in SCIFACT_MEMBERS if m not in out]
    if missing:
        raise InputError(with_fix(f"{where}: the SciFact release has no {', '.join(missing)} "
                                  f"(found: {sorted(out)}).", fix))
    return out


def with_fix(message: str, fix: str) -> str:
    return f"{message} {fix}" if fix else message


def parse_jsonl_file(data: bytes, where: str, fix: str) -> list[dict]:
    """`parse_jsonl` with `fix` as the way out: a raw file is re-fetched, a prepared one re-prepared."""
    return parse_jsonl(data, where, fix)


def _field(row: dict, key: str, kind: type | tuple[type, ...], where: str):
    if key not in row:
        raise InputError(f"{where}: missing field '{key}'.")
    value = row[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InputError(f"{where}: field '{key}' should be {getattr(kind, '__name__', kind)}, got {value!r}.")
    return value


def check_unique_ids(records: list[ClaimRecord], where: str) -> None:
    seen: dict[str, int] = {}
    for i, r in enumerate(records, start=1):
        if r.id in seen:
            raise InputError(f"{where}: duplicate claim id {r.id!r} (records {seen[r.id]} and {i}); ids must be unique.")
        seen[r.id] = i


def parse_scifact_claims(data: bytes, where: str, split: str) -> list[ClaimRecord]:
    """SciFact claims -> records. CONTRADICT -> REFUTED, SUPPORT -> SUPPORTED, no evidence -> NEI."""
    records = []
    for i, row in enumerate(parse_jsonl_file(data, where, REFETCH), start=1):
        at = f"{where}, record {i}" + (f" (id {row['id']})" if "id" in row else "")
        cid = _field(row, "id", int, at)
        claim = _field(row, "claim", str, at)
        evidence_raw = _field(row, "evidence", dict, at)
        cited = _field(row, "cited_doc_ids", list, at)
        evidence: list[GoldEvidence] = []
        for doc_id, sets in evidence_raw.items():
            if not isinstance(sets, list):
                raise InputError(f"{at}: evidence for doc {doc_id} should be a list, got {sets!r}.")
            for s in sets:
                raw_label = s.get("label") if isinstance(s, dict) else None
                if raw_label not in SCIFACT_LABELS:
                    raise InputError(
                        f"{at}: unknown evidence label {raw_label!r} for doc {doc_id} "
                        f"(expected one of {sorted(SCIFACT_LABELS)})."
                    )
                sentences = s.get("sentences")
                if not isinstance(sentences, list) or not all(isinstance(x, int) for x in sentences):
                    raise InputError(f"{at}: evidence sentences for doc {doc_id} should be a list of ints.")
                evidence.append(GoldEvidence(doc_id=str(doc_id), sentences=sentences,
                                             label=SCIFACT_LABELS[raw_label]))
        labels = {e.label for e in evidence}
        if len(labels) > 1:  # never happens in the official release; refuse rather than guess
            raise InputError(f"{at}: evidence mixes SUPPORT and CONTRADICT; the claim label is ambiguous.")
        records.append(ClaimRecord(
            id=str(cid), dataset="scifact", split=split, claim=claim,
            label=labels.pop() if labels else Label.NEI,
            evidence=evidence, cited_doc_ids=[str(d) for d in cited],
        ))
    check_unique_ids(records, where)
    return records


def parse_scifact_corpus(data: bytes, where: str) -> list[CorpusDoc]:
    docs = []
    for i, row in enumerate(parse_jsonl_file(data, where, REFETCH), start=1):
        at = f"{where}, record {i}" + (f" (doc_id {row['doc_id']})" if "doc_id" in row else "")
        doc_id = _field(row, "doc_id", int, at)
        title = _field(row, "title", str, at)
        abstract = _field(row, "abstract", list, at)
        if not all(isinstance(s, str) for s in abstract):
            raise InputError(f"{at}: 'abstract' should be a list of sentence strings.")
        docs.append(CorpusDoc(id=str(doc_id), title=title, abstract=abstract,
                              structured=bool(row.get("structured", False))))
    return docs


# --- HealthFC -------------------------------------------------------------------------------------

def healthfc_frame(path: Path, where: str | None = None, fix: str = REFETCH) -> pd.DataFrame:
    """The HealthFC CSV as text columns; InputError unless it is a UTF-8 CSV with the required columns."""
    where = where or str(path)
    data = Path(path).read_bytes()
    if not data.strip():
        raise InputError(with_fix(f"{where}: the file is empty.", fix))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputError(with_fix(f"{where}, line {line}: bytes that are not UTF-8 "
                                  f"({data[e.start:e.start + 8]!r}).", fix)) from None
    try:
        df = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise InputError(with_fix(f"{where}: not a readable CSV ({e}).", fix)) from None
    missing = [c for c in HEALTHFC_COLUMNS if c not in df.columns]
    if missing:  # an upstream change, not a damaged copy: re-fetching would not help
        raise InputError(
            f"{where}: missing column(s) {missing}; found {list(df.columns)[:20]}. "
            "HealthFC's Datensatz.csv must have 'en_claim' and 'label' (was a column renamed?)."
        )
    return df


def read_healthfc_csv(path: Path) -> list[ClaimRecord]:
    """HealthFC CSV -> records (all in the `test` split). Labels 0/1/2 -> SUPPORTED/NEI/REFUTED."""
    df = healthfc_frame(path)
    records = []
    for row_no, row in enumerate(df.to_dict("records")):
        at = f"{path}, row {row_no + 2}"  # +1 header, +1 one-based: the line a spreadsheet shows
        raw_label = row["label"].strip()
        if not raw_label.isdigit() or int(raw_label) not in HEALTHFC_LABELS:
            raise InputError(f"{at}: unknown label {raw_label!r} (expected 0, 1 or 2).")
        meta = {out: row[col] for col, out in HEALTHFC_META.items() if row.get(col)}
        records.append(ClaimRecord(
            id=str(row_no), dataset="healthfc", split="test", claim=row["en_claim"],
            label=HEALTHFC_LABELS[int(raw_label)], meta=meta,
        ))
    return records
