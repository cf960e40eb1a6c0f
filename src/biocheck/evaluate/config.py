"""`evaluate:` in params.yaml -> EvaluateConfig (the evaluation stage's settings, plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SYSTEMS = ("base", "eg_grpo", "outcome_only", "no_retrieval", "pmsearch", "cer", "fire")
# name -> prepared split; scifact_val (the claims that select checkpoints) for learning checks, not the default
DATASETS = {"scifact": "scifact/test", "healthfc": "healthfc/test", "scifact_val": "scifact/val"}
REFERENCE = "eg_grpo"  # the system every other one is compared against (paired tests)


@dataclass
class EvaluateConfig:
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    datasets: list[str] = field(default_factory=lambda: ["scifact", "healthfc"])
    workers: int = 1  # claims in flight per system
    bootstrap: int = 1000  # resamples for the 95% intervals and the paired bootstrap
    seed: int = 0
    limit: int | None = None  # first N claims per dataset (ad-hoc runs; null = all)
    out_dir: Path = Path("eval")  # predictions/<system>/<dataset>.jsonl, traces/, cache/
    report_dir: Path = Path("reports/eval")  # the static gallery (index.html)
    metrics_path: Path = Path("metrics/eval.json")
    paired_path: Path = Path("metrics/eval_paired.json")
    plots_dir: Path = Path("metrics/eval_plots")  # DVC plots data (confusion matrices, metric bars)
    cer: dict[str, Any] = field(default_factory=dict)  # CERConfig fields (retrieve, sentences, ranker, ...)
    fire: dict[str, Any] = field(default_factory=dict)  # FIREConfig fields (max_steps, similarity, max_retries, ...)

    def __post_init__(self) -> None:
        for name in ("out_dir", "report_dir", "metrics_path", "paired_path", "plots_dir"):
            setattr(self, name, Path(getattr(self, name)))
        self.systems, self.datasets = list(self.systems), list(self.datasets)
        unknown = [s for s in self.systems if s not in SYSTEMS]
        if unknown:
            raise ValueError(f"systems: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(SYSTEMS)}")
        unknown = [d for d in self.datasets if d not in DATASETS]
        if unknown:
            raise ValueError(f"datasets: unknown {', '.join(map(repr, unknown))}; choose from {', '.join(DATASETS)}")
        if not self.systems or not self.datasets:
            raise ValueError("systems and datasets must each name at least one")
        if self.workers < 1:
            raise ValueError(f"workers: {self.workers} must be >= 1")
        if self.bootstrap < 0:
            raise ValueError(f"bootstrap: {self.bootstrap} must be >= 0 (0: no intervals)")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: {self.limit} must be >= 1 (null: every claim)")
