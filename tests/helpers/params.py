"""The parameters DVC gives each stage: the profiles, dvc.yaml's stages (the study's too) and the keys each lists."""

from __future__ import annotations

from typing import Any

import yaml

from biocheck.params import load_params
from tests.helpers.paths import REPO


def profile(name: str) -> dict[str, Any]:
    return load_params(REPO / "profiles" / f"{name}.yaml")  # base.yaml with the profile's values


STUDY = "study/dvc.yaml"


def stages() -> dict[str, dict[str, Any]]:
    """dvc.yaml's stages, `foreach` expanded (name@key)."""
    out = {}
    for name, spec in yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"].items():
        if "foreach" in spec:
            out.update({f"{name}@{key}": spec["do"] for key in spec["foreach"]})
        else:
            out[name] = spec
    return out


def all_stages() -> dict[str, dict[str, Any]]:
    """stages() and study/dvc.yaml's (`study/dvc.yaml:name`; a `matrix` stage by one of its items, the first
    variant and seed for training, the last for evaluation: every item shares one spec, and a unit's own
    variant and seed are not params it reads, tests/study/test_units.py)."""
    out = stages()
    study = profile("quickstart")["study"]
    first, last = f"{study['variants'][0]}-{study['seeds'][0]}", f"{study['variants'][-1]}-{study['seeds'][-1]}"
    for name, spec in yaml.safe_load((REPO / STUDY).read_text())["stages"].items():
        if "matrix" in spec:
            out[f"{STUDY}:{name}@{first if name == 'train' else last}"] = spec
        else:
            out[f"{STUDY}:{name}"] = spec
    return out


def stage_inputs(params: dict[str, Any], stage: str) -> dict[str, Any]:
    """pipeline.stage_inputs, or for study/dvc.yaml's stages study.stage_inputs."""
    from biocheck import pipeline
    from biocheck.study import units as study

    if stage.startswith(STUDY + ":"):
        return study.stage_inputs(params, stage.removeprefix(STUDY + ":"))
    return pipeline.stage_inputs(params, stage)


def changed(value: Any) -> Any:
    """A different value of the same shape (valid or not: a config that rejects it has read it too)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 0.25
    if isinstance(value, str):
        return value + "_x"
    if isinstance(value, list):
        return value[:-1] if value else ["x"]
    if isinstance(value, dict):
        return {"x": 1}
    return 1  # None
