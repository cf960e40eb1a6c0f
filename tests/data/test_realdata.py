"""The real SciFact/HealthFC releases (from BIOCHECK_DATA_MIRROR): exact counts and a clean validation."""

from __future__ import annotations

from collections import Counter

import pytest

from biocheck.data.fetch import FetchConfig, fetch
from biocheck.data.prepare import PrepareConfig, load_full, load_split, prepare
from biocheck.data.validate import ValidateConfig, validate


@pytest.fixture
def real(real_mirror, tmp_path):
    raw = tmp_path / "raw"
    fetch(FetchConfig(raw_dir=raw, mirror=real_mirror, progress=False))
    cfg = PrepareConfig(raw_dir=raw, out_dir=tmp_path / "prepared", metrics_path=tmp_path / "data.json",
                        val_fraction=0.2, seed=13, subset={"train": 64, "val": 16, "test": 32})
    return cfg, prepare(cfg)


def counts(records):
    c = Counter(r.label.value for r in records)
    return (c["SUPPORTED"], c["REFUTED"], c["NEI"])


def test_exact_label_counts_and_split_sizes(real):
    cfg, stats = real
    sf = load_full("scifact", cfg.out_dir)
    trainval = [r for r in sf if r.split in ("train", "val")]
    assert counts(trainval) == (332, 173, 304)
    assert counts([r for r in sf if r.split == "test"]) == (124, 64, 112)
    assert counts(load_full("healthfc", cfg.out_dir)) == (202, 125, 423)
    val = [r for r in sf if r.split == "val"]
    # val takes round(0.2 * n) of each label of SciFact train
    assert counts(val) == (round(332 * 0.2), round(173 * 0.2), round(304 * 0.2)) == (66, 35, 61)
    assert len(trainval) == 809 and len(val) == 162
    assert stats["corpus"]["docs"] == 5183
    # working splits: the quickstart subsets, label filters applied, label mix preserved
    train = load_split("scifact", "train", cfg.out_dir)
    assert len(train) == 64 and counts(train)[2] == 0
    assert abs(counts(train)[0] / 64 - 266 / (266 + 138)) < 0.02
    assert len(load_split("scifact", "val", cfg.out_dir)) == 16
    assert len(load_split("scifact", "test", cfg.out_dir)) == 32
    assert len(load_split("healthfc", "test", cfg.out_dir)) == 32


def test_real_data_passes_every_check_including_row_counts(real, tmp_path):
    cfg, _ = real
    result = validate(ValidateConfig(prepared_dir=cfg.out_dir, report_path=tmp_path / "r.json", metrics_path=None))
    assert result.success, result.summary()
    row_checks = [c for c in result.checks if c["rule"] == "expect_table_row_count_to_equal"]
    assert sorted(c["observed"] for c in row_checks) == [300, 750, 809]
