"""`evaluate:` in params.yaml -> EvaluateConfig (the evaluation stage's settings, plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biocheck.bounds import Count, NonNegative

SYSTEMS = ("base", "eg_grpo", "outcome_only", "no_retrieval", "pmsearch", "cer", "fire")
# name -> prepared split; scifact_val (the claims that select checkpoints) for learning checks, not the default
DATASETS = {"scifact": "scifact/test", "healthfc": "healthfc/test", "scifact_val": "scifact/val"}
REFERENCE = "eg_grpo"  # the system every other one is compared against (paired tests)
BASELINES = ("no_retrieval", "pmsearch", "cer", "fire")
BASELINE_MODELS = ("base", "sft")  # the model the baselines run: the base model, or the SFT warm start
# Datasets whose claims chose the checkpoint (select): evaluated only as "selection claims", never held out.
SELECTION = {"scifact_val": "selection claims"}
# The corpus a dataset's gold evidence comes from (None: no corpus the project indexes holds it).
SOURCES = {"scifact": "scifact", "scifact_val": "scifact", "healthfc": None}


@dataclass
class EvaluateConfig:
    systems: list[str] = field(default_factory=lambda: list(SYSTEMS))
    datasets: list[str] = field(default_factory=lambda: ["scifact", "healthfc"])
    workers: Count = 1  # claims in flight per system
    # a transformers: model generates the greedy turns of the claims in flight as one batch (up to `workers`); on a
    # CPU the same tokens, 1.14x a smol agent episode (prefill-bound; docs/benchmarks.md); false: one at a time
    batch_turns: bool = True
    bootstrap: NonNegative = 1000  # resamples for the bootstrap intervals and the paired bootstrap (0: none)
    seed: int = 0
    limit: Count | None = None  # first N claims per dataset (ad-hoc runs; null = all)
    # the claims of the whole split (data/prepared/full/<dataset>.jsonl, data.keep_labels applied, the release's order)
    # instead of its data.subset; a study sets it to evaluate on more claims than the profile's subset
    full_split: bool = False
    out_dir: Path = Path("eval")  # predictions/<system>/<dataset>.jsonl, traces/, cache/
    report_dir: Path = Path("reports/eval")  # the static gallery (index.html)
    # DVC `metrics:`: one small file of headline numbers per dataset and system (headline.headline_row), so
    # `dvc metrics show` prints one readable row each; the details are plain outputs (`outs:`, in git).
    headline_dir: Path = Path("metrics/eval")  # <dataset>/<system>.json
    metrics_path: Path = Path("reports/eval_metrics.json")  # every number: intervals, confusion, per label, timings
    paired_path: Path = Path("reports/eval_paired.json")  # the paired tests against REFERENCE
    plots_dir: Path = Path("metrics/eval_plots")  # DVC plots data (confusion matrices, metric bars)
    eqs_judge: str | None = None  # the judge that scores EQS (a judge spec); null: reward.judge, said in every output
    # base | sft: the model the baselines run, or {baseline: base | sft} per baseline (a zero-shot model that
    # cannot answer a prompt makes a comparison against nothing; the SFT start may follow it)
    baseline_model: str | dict[str, str] = "base"
    cer: dict[str, Any] = field(default_factory=dict)  # CERConfig fields (retrieve, sentences, ranker, ...)
    fire: dict[str, Any] = field(default_factory=dict)  # FIREConfig fields (max_steps, similarity, max_retries, ...)

    @property
    def table_path(self) -> Path:
        """The headline numbers as a table a terminal shows (headline.headline_table), beside metrics_path."""
        return self.metrics_path.with_name("eval_headline.md")

    def model_of(self, baseline: str) -> str:
        """base or sft: the model `baseline` runs (a baseline the mapping leaves out runs the base model)."""
        if isinstance(self.baseline_model, dict):
            return self.baseline_model.get(baseline, "base")
        return self.baseline_model

    def __post_init__(self) -> None:
        for name in ("out_dir", "report_dir", "headline_dir", "metrics_path", "paired_path", "plots_dir"):
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
        chosen = self.baseline_model if isinstance(self.baseline_model, dict) else {"": self.baseline_model}
        bad = {k: v for k, v in chosen.items() if v not in BASELINE_MODELS or (k and k not in BASELINES)}
        if bad:
            raise ValueError(f"baseline_model: {self.baseline_model!r}; give one of {', '.join(BASELINE_MODELS)}, or "
                             f"a mapping from baselines ({', '.join(BASELINES)}) to one of them")


def dataset_about(dataset: str, corpus: str, corpus_kind: str) -> dict[str, Any]:
    """What a dataset's numbers can mean: whether its claims are held out (not the ones that chose the
    checkpoint) and which corpus its claims were searched in. `corpus_kind`: "scifact" (the local index of
    the SciFact corpus only), "mixed" (a local index with more than that corpus), or "pubmed" (live PubMed
    or its recorded answers)."""
    role = SELECTION.get(dataset, "held-out test")
    source = SOURCES.get(dataset)
    if corpus_kind == "scifact":
        has = source == "scifact"
    else:
        has = None  # not checked: PubMed, or an index holding more than the SciFact corpus
    caveat = None
    if has is False:
        caveat = "evidence corpus does not contain this dataset's sources"
    elif dataset in SELECTION:
        caveat = "selection claims: these claims chose the checkpoint, so they are not held-out evidence"
    return {"role": role, "held_out": dataset not in SELECTION, "evidence_corpus": corpus,
            "corpus_has_sources": has, "caveat": caveat}
