"""Which flow runs which DVC stage, read from DVC's own graph of dvc.yaml: one statement of the stage order.

The pipeline flow runs every stage of dvc.yaml in the order `dvc repro` runs them, in four areas (the flows
data, evidence, train and the pipeline's last step). An area is not a hand-written list: it is named after
the stage that closes it, and holds whatever dvc.yaml puts upstream of that stage:

- data: `validate` and every stage upstream of it (fetch, prepare);
- evidence: `evidence` and every stage upstream of it not already in data;
- evaluate: `evaluate` (and `narratives`, the passage benchmark, when dvc.yaml has it) and every stage downstream;
- train: every other stage (base model, judges, warm start, reward audit, training, selection), so a stage
  added to dvc.yaml is run by the pipeline with no flow edited; with orchestrate.train_deployment set, it runs
  on that deployment's (GPU) host.

Each area's stages keep DVC's order, and no stage depends on a later area's (upstream sets are closed; a stage
downstream of `evaluate` is in evaluate), so running the areas one after another is a valid `dvc repro`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from biocheck.io import InputError

AREAS = ("data", "evidence", "train", "evaluate")  # the order the pipeline flow runs them in
# The stage that names each area's boundary (see above); train is what the other three leave.
ANCHORS = {"data": "validate", "evidence": "evidence", "evaluate": "evaluate"}
ALSO_EVALUATE = ("narrative_passages", "narratives")  # the passage benchmark: evaluate area too, when present


@dataclass(frozen=True)
class Pipeline:
    """The stages of one dvc.yaml: `order` is how `dvc repro` runs them (dependencies first), `upstream` each
    stage's direct dependencies (the stages whose outputs it reads)."""

    order: tuple[str, ...]
    upstream: Mapping[str, frozenset[str]]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for stage in self.order:  # the order must put every dependency first: a plan may rely on it
            missing = self.upstream.get(stage, frozenset()) - seen
            if missing:
                raise ValueError(f"{stage} comes before its dependencies {sorted(missing)}")
            seen.add(stage)

    def ancestors(self, stages: Iterable[str]) -> set[str]:
        """`stages` and every stage upstream of them."""
        found, todo = set(), list(stages)
        while todo:
            stage = todo.pop()
            if stage not in found:
                found.add(stage)
                todo.extend(self.upstream.get(stage, ()))
        return found

    def descendants(self, stages: Iterable[str]) -> set[str]:
        """`stages` and every stage downstream of them."""
        found = set(stages)
        for stage in self.order:  # dependencies come first, so one pass reaches every descendant
            if self.upstream.get(stage, frozenset()) & found:
                found.add(stage)
        return found

    def ordered(self, stages: Iterable[str]) -> list[str]:
        keep = set(stages)
        return [s for s in self.order if s in keep]


def areas(pipeline: Pipeline, source: str = "dvc.yaml") -> dict[str, list[str]]:
    """{area: its stages in DVC's order} for AREAS; every stage of `pipeline` is in exactly one area."""
    missing = [stage for stage in ANCHORS.values() if stage not in pipeline.order]
    if missing:
        raise InputError(f"{source} has no stage {', '.join(map(repr, missing))}: the Prefect flows' areas end at "
                         f"{', '.join(ANCHORS.values())} (biocheck/orchestration/plan.py); restore the stage or "
                         "rename it there too")
    data = pipeline.ancestors([ANCHORS["data"]])
    evidence = pipeline.ancestors([ANCHORS["evidence"]]) - data
    evaluations = [ANCHORS["evaluate"], *(s for s in ALSO_EVALUATE if s in pipeline.order)]
    evaluate = pipeline.descendants(evaluations) - data - evidence
    train = set(pipeline.order) - data - evidence - evaluate
    return {name: pipeline.ordered(stages) for name, stages in
            (("data", data), ("evidence", evidence), ("train", train), ("evaluate", evaluate))}


def training(pipeline: Pipeline, variants: Iterable[str] | None = None, init_model: bool = True,
             model_stage: str = "model") -> list[str]:
    """The train area's stages to run: all of them (`variants` None), or those the named variants' train@V and
    select@V stages need; without `model_stage` when `init_model` is False (the base model is already there)."""
    stages = areas(pipeline)["train"]
    if variants is not None:
        targets = [s for v in variants for s in (f"train@{v}", f"select@{v}") if s in stages]
        stages = pipeline.ordered(pipeline.ancestors(targets) & set(stages))
    return [s for s in stages if init_model or s != model_stage]
