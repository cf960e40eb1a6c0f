"""Each DVC stage lists exactly the params its code reads (dvc.yaml), in every profile.

What a stage reads is found, not declared: every key of the profile is changed in turn (to another value,
the other profiles' value, or another word it accepts), and the key counts when the configs the stage builds
(`pipeline.stage_inputs`) change. A key a stage
lists but never reads would rerun it for nothing (an evaluation knob rerunning training, say); a key it
reads but does not list would leave DVC blind to a real change.

`python tests/project/test_dvc_params.py` prints each stage's keys over all profiles, as dvc.yaml lists them.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.helpers.params import all_stages, changed, profile, stage_inputs, stages

PROFILES = ("quickstart", "smol", "paper")
NOT_INPUTS = ("profile", "tracking", "orchestrate")  # MLflow names and how a stage is launched, not its inputs


def leaves(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every leaf key (dotted) of a params dict; an empty dict or list is a leaf."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(leaves(v, key + "."))
        else:
            out[key] = v
    return out


def _set(params: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(params)
    *path, last = dotted.split(".")
    d = out
    for k in path:
        d = d[k]
    d[last] = value
    return out


# Other valid values of keys that take one of a few words (a changed word would be refused, not read).
ALTERNATIVES = {"reward.variant": ["outcome_only"], "search.backend": ["replay", "entrez"], "search.mode": ["bm25"],
                "model.source": ["wheel", "hub"], "judge.recipe": ["align", "head"], "judge.level": ["sentence"],
                "train.search_backend": ["replay", "local"], "train.loss_type": ["grpo"],
                "train.vllm_mode": ["server"], "evaluate.baseline_model": ["sft", "base"],
                "evaluate.cer.ranker": ["encoder:some/model"], "train.vllm_server_base_url": ["http://gpu0:8000"],
                "train.lora": [{"r": 16, "lora_alpha": 32}], "agent.cache": ["static"],
                "train.cache_implementation": ["static"], "train.generation_dtype": ["bfloat16"],
                "study.reference": ["outcome_only"], "train.curriculum": ["reachable"],
                "narratives.system": ["base"], "narratives.extractor": ["sentences"]}


def candidates(key: str, value: Any, others: list[dict[str, Any]]) -> list[Any]:
    # a key's own alternatives, or its parent's (evaluate.baseline_model.cer takes what baseline_model takes)
    prefix = max((k for k in ALTERNATIVES if key == k or key.startswith(k + ".")), key=len, default=None)
    out = [changed(value), *ALTERNATIVES.get(prefix, [])]
    out += ["x" + value] if isinstance(value, str) else []  # another spec KIND too (transformers: -> xtransformers:)
    out += [value / 2] if isinstance(value, float) else []  # inside a range that ends at the value (top_p 1.0)
    out += [o[key] for o in others if key in o]
    return [v for v in out if v != value]


def reads(params: dict[str, Any], stage: str) -> set[str]:
    """The leaf keys of `params` some valid change of which changes the stage's configs (a value the
    configs refuse says nothing: several stages build a config only to read one of its keys)."""
    before = stage_inputs(params, stage)
    others = [leaves(profile(n)) for n in PROFILES]
    out = set()
    for key, value in leaves(params).items():
        if key.split(".")[0] in NOT_INPUTS:
            continue
        for candidate in candidates(key, value, others):
            try:
                after = stage_inputs(_set(params, key, candidate), stage)
            except Exception:  # refused: try the next value
                continue
            if after != before:
                out.add(key)
                break
    return out


def listed(params: dict[str, Any], spec: dict[str, Any]) -> set[str]:
    """dvc.yaml's params of a stage, as the profile's leaf keys they cover."""
    keys = set()
    for entry in spec.get("params") or []:
        names = entry if isinstance(entry, str) else list(entry)
        for name in [names] if isinstance(names, str) else names:
            keys |= {k for k in leaves(params) if k == name or k.startswith(name + ".")}
    return keys


def test_every_stage_of_dvc_yaml_is_a_stage_the_pipeline_knows():
    for stage in all_stages():
        assert stage_inputs(profile("quickstart"), stage)


@pytest.fixture(scope="module")
def read_by_profile() -> dict[str, dict[str, set[str]]]:
    return {name: {stage: reads(profile(name), stage) for stage in all_stages()} for name in PROFILES}


@pytest.mark.parametrize("name", PROFILES)
def test_each_stage_lists_every_key_its_code_reads(name, read_by_profile):
    params = profile(name)
    missing = {stage: sorted(read_by_profile[name][stage] - listed(params, spec)) for stage, spec in all_stages().items()}
    assert not any(missing.values()), {k: v for k, v in missing.items() if v}


def test_each_stage_reads_every_key_it_lists(read_by_profile):
    """dvc.yaml serves every profile: a listed key must be read in at least one (some values are valid in one
    profile only, e.g. train.save_steps must divide train.eval_steps)."""
    unread = {}
    for stage, spec in all_stages().items():
        lists = set().union(*(listed(profile(n), spec) for n in PROFILES))
        read = set().union(*(read_by_profile[n][stage] for n in PROFILES))
        unread[stage] = sorted(lists - read)
    assert not any(unread.values()), {k: v for k, v in unread.items() if v}


def test_the_check_sees_a_key_a_stage_stops_reading(monkeypatch):
    """The check can fail: a stage whose configs drop a key it used to read shows that key as listed, never read."""
    from biocheck import pipeline

    real = pipeline.stage_inputs

    def forgetful(params, stage):
        out = real(params, stage)
        if stage == "select@eg_grpo":
            out["select"].pop("registered_model")
        return out

    monkeypatch.setattr(pipeline, "stage_inputs", forgetful)
    params = profile("quickstart")
    spec = stages()["select@eg_grpo"]
    assert "select.registered_model" in listed(params, spec) - reads(params, "select@eg_grpo")


def collapsed(keys: set[str]) -> list[str]:
    """`keys` (read in some profile) as dvc.yaml lists them: a section or sub-section whose every key (in any
    profile) is read becomes one entry."""
    every = set().union(*(leaves(profile(n)) for n in PROFILES))
    out = set(keys)
    for k in sorted(keys, key=lambda k: -k.count(".")):
        parts = k.split(".")
        for depth in range(1, len(parts)):
            prefix = ".".join(parts[:depth])
            under = {x for x in every if x.startswith(prefix + ".")}
            if under and under <= keys:
                out -= under
                out.add(prefix)
                break
    # a collapsed entry can swallow a longer one left behind
    return sorted(k for k in out if not any(k.startswith(o + ".") for o in out))


if __name__ == "__main__":
    for stage in all_stages():
        read = set().union(*(reads(profile(n), stage) for n in PROFILES))
        print(stage, collapsed(read))
