"""bench/learning_check.py's runs leave the pipeline's metrics/train.json alone."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path

from tests.helpers.paths import REPO


def test_a_learning_check_run_writes_no_pipeline_metrics(monkeypatch, tmp_path):
    """An override of None means "not given" to params.section, so `metrics_path=None` passed as an override
    left metrics/train.json as the file each run wrote; the run's params carry it instead."""
    import yaml

    from biocheck.pipeline import train_config

    # the script sets these two with setdefault and puts src on sys.path: all undone after this test
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("learning_check", REPO / "bench" / "learning_check.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    seen = []
    monkeypatch.setattr(bench, "train_stage", lambda params, progress, **kw: seen.append(train_config(params, **kw)))
    monkeypatch.setattr(bench, "summarise", lambda *a, **k: {})
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    before = copy.deepcopy(params)
    assert train_config(params).metrics_path == Path("metrics/train.json")  # what the pipeline writes
    bench.train_run(params, "eg_grpo", 0.0, 3, tmp_path / "run", max_steps=2)
    assert [(c.metrics_path, c.seed, c.max_steps, c.out_dir) for c in seen] == [(None, 3, 2, tmp_path / "run")]
    assert params == before  # the caller's params are not changed
