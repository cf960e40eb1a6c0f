from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from biocheck.data.prepare import PrepareConfig, load_corpus, load_full, load_split, prepare
from biocheck.io import InputError
from biocheck.labels import Label
from tests.helpers.builders import (
    CORPUS,
    csv_bytes,
    healthfc_rows,
    jsonl_bytes,
    scifact_dev,
    scifact_train,
    write_raw,
    write_scifact_tar,
)


def cfg(raw: Path, tmp_path: Path, **kw) -> PrepareConfig:
    return PrepareConfig(raw_dir=raw, out_dir=tmp_path / "prepared", metrics_path=tmp_path / "metrics.json", **kw)


def test_labels_are_mapped_and_splits_assigned(raw_dir, tmp_path):
    c = cfg(raw_dir, tmp_path, keep_labels={"train": list(Label.__members__), "val": list(Label.__members__),
                                             "test": list(Label.__members__)})
    stats = prepare(c)
    sf = {r.id: r for r in load_full("scifact", c.out_dir)}
    assert sf["0"].label is Label.SUPPORTED and sf["0"].evidence[0].doc_id == "101"
    assert sf["10"].label is Label.REFUTED  # CONTRADICT
    assert sf["15"].label is Label.NEI and sf["15"].evidence == []  # empty evidence
    assert sf["15"].cited_doc_ids == ["105"]
    assert {r.split for r in sf.values() if int(r.id) >= 100} == {"test"}  # dev -> test
    assert {r.split for r in sf.values() if int(r.id) < 100} == {"train", "val"}
    hfc = load_full("healthfc", c.out_dir)
    assert [r.label for r in hfc] == [Label.SUPPORTED, Label.NEI, Label.REFUTED, Label.NEI, Label.SUPPORTED,
                                      Label.REFUTED, Label.NEI]  # 0/1/2 -> S/NEI/R
    assert {r.split for r in hfc} == {"test"}
    assert hfc[0].meta["url"] == "https://example.org/0"
    assert stats["full"]["scifact"]["test"] == {"SUPPORTED": 1, "REFUTED": 2, "NEI": 1, "total": 4}
    assert json.loads(c.metrics_path.read_text()) == stats
    assert [d.id for d in load_corpus(c.out_dir)] == [str(d["doc_id"]) for d in CORPUS]


def test_val_split_is_stratified_seeded_and_independent_of_label_filter(raw_dir, tmp_path):
    a = cfg(raw_dir, tmp_path / "a", val_fraction=0.2, seed=1)
    prepare(a)
    val = load_full("scifact", a.out_dir)
    counts = Counter(r.label.value for r in val if r.split == "val")
    assert counts == {"SUPPORTED": 2, "REFUTED": 1, "NEI": 2}  # round(10*.2), round(5*.2), round(8*.2)
    b = cfg(raw_dir, tmp_path / "b", val_fraction=0.2, seed=1, keep_labels={"train": ["SUPPORTED"],
                                                                            "val": ["SUPPORTED"]})
    prepare(b)
    val_b = load_full("scifact", b.out_dir)
    assert [(r.id, r.split) for r in val] == [(r.id, r.split) for r in val_b]
    c = cfg(raw_dir, tmp_path / "c", val_fraction=0.2, seed=2)
    prepare(c)
    assert {r.id for r in load_full("scifact", c.out_dir) if r.split == "val"} != \
        {r.id for r in val if r.split == "val"}


def test_keep_labels_and_stratified_subsets(raw_dir, tmp_path):
    c = cfg(raw_dir, tmp_path, val_fraction=0.2, seed=3, subset={"train": 6, "test": 2},
            keep_labels={"train": ["SUPPORTED", "REFUTED"], "val": ["SUPPORTED", "REFUTED"],
                         "test": ["SUPPORTED", "REFUTED", "NEI"]})
    stats = prepare(c)
    train = load_split("scifact", "train", c.out_dir)
    assert len(train) == 6
    assert Counter(r.label.value for r in train) == {"SUPPORTED": 4, "REFUTED": 2}  # 8:4 pool -> 4:2
    assert all(r.split == "train" for r in train)
    val = load_split("scifact", "val", c.out_dir)
    assert {r.label.value for r in val} <= {"SUPPORTED", "REFUTED"}
    assert len(load_split("healthfc", "test", c.out_dir)) == 2
    assert stats["working"]["scifact"]["train"]["total"] == 6
    again = tmp_path / "again"
    prepare(cfg(raw_dir, again, val_fraction=0.2, seed=3, subset={"train": 6, "test": 2}))
    assert [r.id for r in load_split("scifact", "train", again / "prepared")] == [r.id for r in train]


def test_bad_config_is_rejected_with_the_key():
    with pytest.raises(ValueError, match="keep_labels.train"):
        PrepareConfig(keep_labels={"train": ["MAYBE"]})
    with pytest.raises(ValueError, match="subset.val"):
        PrepareConfig(subset={"val": 0})
    with pytest.raises(ValueError, match="val_fraction"):
        PrepareConfig(val_fraction=1.5)


# --- bad input: each fails with what and where, and leaves no output ------------------------------

def _bad_scifact(tmp_path: Path, **files) -> Path:
    raw = write_raw(tmp_path / "raw")
    write_scifact_tar(raw / "scifact" / "data.tar.gz", **files)
    return raw


def _train_with(mutate) -> list[dict]:
    rows = scifact_train()
    mutate(rows)
    return rows


BAD_SCIFACT = {
    "unknown label": (dict(train=_train_with(lambda r: r[3]["evidence"]["101"][0].update(label="SUPPORTS"))),
                      r"claims_train.jsonl, record 4 \(id 3\): unknown evidence label 'SUPPORTS'"),
    "duplicate id": (dict(train=_train_with(lambda r: r[5].update(id=2))),
                     r"duplicate claim id '2' \(records 3 and 6\)"),
    "missing claim": (dict(train=_train_with(lambda r: r[7].pop("claim"))),
                      r"record 8 \(id 7\): missing field 'claim'"),
    "truncated last line": (dict(train=jsonl_bytes(scifact_train())[:-25]),
                            r"claims_train.jsonl, line 23: invalid JSON \(the last line is cut short"),
    "non-utf8": (dict(dev=jsonl_bytes(scifact_dev()).replace(b"Statins", b"Stat\xffns")),
                 r"claims_dev.jsonl, line 2: bytes that are not UTF-8"),
    "empty corpus": (dict(corpus=b""), r"corpus.jsonl: the file is empty"),
    "claim not a string": (dict(dev=[{**scifact_dev()[0], "claim": None}]),
                           r"field 'claim' should be str, got None"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCIFACT))
def test_bad_scifact_input_fails_clearly_and_writes_nothing(case, tmp_path):
    files, message = BAD_SCIFACT[case]
    raw = _bad_scifact(tmp_path, **files)
    c = cfg(raw, tmp_path)
    with pytest.raises(InputError, match=message):
        prepare(c)
    assert not c.out_dir.exists() and not c.metrics_path.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


BAD_HEALTHFC = {
    "unknown label": (csv_bytes([*healthfc_rows()[:2], {**healthfc_rows()[2], "label": "3"}]),
                      r"Datensatz.csv, row 4: unknown label '3' \(expected 0, 1 or 2\)"),
    "renamed column": (csv_bytes(healthfc_rows(), header=None).replace(b"en_claim", b"claim_en", 1),
                       r"missing column\(s\) \['en_claim'\].*was a column renamed"),
    "empty file": (b"", r"Datensatz.csv: the file is empty"),
    "non-utf8": (csv_bytes(healthfc_rows()).replace(b"zinc", b"z\xe9nc"), r"Datensatz.csv, line 3: bytes that are not UTF-8"),
}


@pytest.mark.parametrize("case", sorted(BAD_HEALTHFC))
def test_bad_healthfc_input_fails_clearly_and_writes_nothing(case, tmp_path):
    data, message = BAD_HEALTHFC[case]
    raw = write_raw(tmp_path / "raw")
    (raw / "healthfc" / "Datensatz.csv").write_bytes(data)
    c = cfg(raw, tmp_path)
    with pytest.raises(InputError, match=message):
        prepare(c)
    assert not c.out_dir.exists()


def test_failed_run_leaves_previous_output_untouched(raw_dir, tmp_path):
    c = cfg(raw_dir, tmp_path)
    prepare(c)
    before = {p.relative_to(c.out_dir): p.read_bytes() for p in c.out_dir.rglob("*") if p.is_file()}
    (raw_dir / "healthfc" / "Datensatz.csv").write_bytes(b"")
    with pytest.raises(InputError):
        prepare(c)
    after = {p.relative_to(c.out_dir): p.read_bytes() for p in c.out_dir.rglob("*") if p.is_file()}
    assert after == before


def test_missing_raw_files_point_to_fetch(tmp_path):
    with pytest.raises(InputError, match="Run `biocheck data fetch` first"):
        prepare(cfg(tmp_path / "nothing", tmp_path))



# --- recovery hints that recover: raw files come back through fetch, prepared ones through prepare --

REFETCH = ("dvc repro -f -s fetch", "biocheck data fetch --force")
REPREPARE = ("dvc repro -f -s prepare", "biocheck data prepare")


@pytest.mark.parametrize("case", ["cut tarball", "empty csv", "empty tar member"])
def test_a_damaged_raw_file_points_to_a_refetch_that_works_under_dvc(case, tmp_path):
    raw = write_raw(tmp_path / "raw")
    tar = raw / "scifact" / "data.tar.gz"
    if case == "cut tarball":
        tar.write_bytes(tar.read_bytes()[:-40])
    elif case == "empty csv":
        (raw / "healthfc" / "Datensatz.csv").write_bytes(b"")
    else:
        write_scifact_tar(tar, corpus=b"")
    with pytest.raises(InputError) as e:
        prepare(cfg(raw, tmp_path))
    assert all(hint in str(e.value) for hint in REFETCH), str(e.value)


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "not utf-8": data.replace(b"a", b"\xff", 1), "cut": data[:-7],
                      "not a record": data.replace(b'"claim"', b'"claim_text"', 1)}[how])


@pytest.mark.parametrize("how", ["empty", "not utf-8", "cut", "not a record", "missing"])
@pytest.mark.parametrize("load, rel", [(lambda d: load_split("scifact", "train", d), "scifact/train.jsonl"),
                                       (lambda d: load_full("healthfc", d), "full/healthfc.jsonl"),
                                       (load_corpus, "corpus.jsonl")], ids=["split", "full", "corpus"])
def test_a_damaged_prepared_file_points_to_prepare_not_fetch(raw_dir, tmp_path, load, rel, how):
    c = cfg(raw_dir, tmp_path)
    prepare(c)
    if how == "missing":
        (c.out_dir / rel).unlink()
    elif how == "not a record" and rel == "corpus.jsonl":
        _rewrite_first(c.out_dir / rel, "title")
    else:
        _damage(c.out_dir / rel, how)
    with pytest.raises(InputError) as e:
        load(c.out_dir)
    msg = str(e.value)
    assert rel in msg and all(hint in msg for hint in REPREPARE) and "fetch" not in msg, msg


def _rewrite_first(path: Path, key: str) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0].pop(key)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_working_split_left_empty_by_the_config_is_an_error_not_a_missing_file(raw_dir, tmp_path):
    # val_fraction 0.04 of 10/5/8 claims per label rounds to no val claim at all
    c = cfg(raw_dir, tmp_path, val_fraction=0.04)
    with pytest.raises(InputError, match=r"scifact/val: no claims.*data\.val_fraction"):
        prepare(c)
    assert not c.out_dir.exists()


def test_prepare_writes_every_working_split_of_the_schema(raw_dir, tmp_path):
    from biocheck.data.schema import DATASET_SPLITS, DATASETS

    assert DATASET_SPLITS == {"scifact": ("train", "val", "test"), "healthfc": ("test",)}
    assert tuple(DATASET_SPLITS) == DATASETS
    c = cfg(raw_dir, tmp_path, keep_labels={"train": ["NEI"]})
    stats = prepare(c)
    assert {ds: tuple(splits) for ds, splits in stats["working"].items()} == DATASET_SPLITS
    assert all(r.label.value == "NEI" for r in load_split("scifact", "train", c.out_dir))
