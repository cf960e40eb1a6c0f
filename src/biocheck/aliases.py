"""The names of the agent's models, stated once: the model registry's aliases and the names an evaluation
gives the model a system ran (`biocheck evaluate --model`, the MLflow param and tag `model_alias`).

The registry (`biocheck select`, docs/mlflow.md) keeps three aliases on `biocheck-agent`: `challenger`, the newest
EG-GRPO selection; `champion`, the best on the validation reward (or promoted by hand); `outcome_only`, the
outcome-only ablation's selection. An evaluation names a local model folder by what it holds (`selected`:
models/selected, the newest selection, whichever alias the registry gives it; `outcome_only`; `base`) and a
registered version by its alias (`champion`, or `models:/NAME@ALIAS` for any alias).
"""

from __future__ import annotations

CHAMPION = "champion"
CHALLENGER = "challenger"
OUTCOME_ONLY = "outcome_only"
REGISTRY = (CHAMPION, CHALLENGER, OUTCOME_ONLY)  # the aliases select and promote set, in this order

SELECTED = "selected"  # models/selected: what the DVC stage evaluate runs for eg_grpo
BASE = "base"
NONE = "none"  # a baseline's model, or one given by folder or spec
LOCAL = {SELECTED: "eg_grpo", OUTCOME_ONLY: "outcome_only", BASE: "base"}  # name -> the system whose folder it is
EVAL_MODELS = (*LOCAL, CHAMPION)  # what `evaluate --model` takes by name (champion: the registry's)


def renamed(name: str, registered: str) -> str | None:
    """Why `name` is refused as an evaluation's model name when it once meant another model, with the fix;
    None when it is not such a name. `challenger` named the outcome-only model before the registry gave that
    name to the newest EG-GRPO selection: taking it now would silently evaluate another model."""
    if name != CHALLENGER:
        return None
    return (f"'{CHALLENGER}' no longer names the outcome-only model (the registry's {CHALLENGER} is the newest "
            f"EG-GRPO selection); give {OUTCOME_ONLY} for the outcome-only model, or {SELECTED} (or "
            f"models:/{registered}@{CHALLENGER}) for the challenger")
