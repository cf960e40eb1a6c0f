"""Every key of params.yaml and the profiles is read by some config, and a key nothing reads is an error.

A key that parses but is silently dropped (as `reward.judge_batch_size` once was) is the worst kind of
config bug: the run looks configured and is not. So each leaf key of each profile is changed in turn,
and the configs built through `biocheck.pipeline` must change with it (or reject the new value, which
shows that something read it too).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

import pytest

from biocheck import pipeline as pl
from biocheck import wiring as b
from biocheck.io import InputError
from biocheck.params import load_params
from biocheck.study.units import study_config
from tests.helpers.params import changed
from tests.helpers.paths import REPO

PROFILES = ["quickstart", "smol", "paper"]
NOT_A_CONFIG = {"profile"}  # the profile's name: `biocheck profile list` and MLflow read it, no stage config


def _plain(value: Any) -> Any:
    """A config value as YAML would hold it: dataclasses as dicts, paths as strings, enums as values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def build_all(params: dict[str, Any]) -> dict[str, Any]:
    """Every config the pipeline builds from params, as plain data."""
    p = b.params_of(params)
    reward, judge = b.reward_config(p)
    built = {"fetch": b.fetch_config(p), "data": b.prepare_config(p), "validate": b.validate_config(p),
             "evidence": b.evidence_config(p), "search": b.search_config(p), "model": b.model_config(p),
             "agent": b.agent_config(p), "reward": reward, "reward_judge": judge, "judge": b.judge_config(p),
             "judge_eqs": b.judge_config(p, eqs=True) if (p.get("judge") or {}).get("eqs") else None,
             "audit": pl.audit_config(p), "train": pl.train_config(p),
             "select": pl.select_config(p), "train_setup": pl.train_setup(p), "evaluate": pl.evaluate_config(p),
             "narratives": pl.narratives_config(p), "orchestrate": pl.orchestrate_config(p),
             "tracking": b.tracking_config(p), "study": study_config(p)}
    return _plain(built)


def leaves(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of the leaf keys (a list or an empty mapping is a leaf)."""
    out = []
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out += leaves(v, (*prefix, k))
        else:
            out.append((*prefix, k))
    return out


def profile(name: str):
    return load_params(REPO / "profiles" / f"{name}.yaml")


def _get(params: dict[str, Any], path: tuple[str, ...]) -> Any:
    d = params
    for k in path:
        d = d[k]
    return d


def _set(params: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    d = params
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value


def _reads(params: dict[str, Any], path: tuple[str, ...], value: Any, before: dict[str, Any]) -> bool:
    """Whether setting `path` to `value` changes a built config (or is rejected)."""
    mutated = copy.deepcopy(params)
    _set(mutated, path, value)
    try:
        return build_all(mutated) != before
    except InputError:
        return True


@pytest.mark.parametrize("name", PROFILES)
def test_every_key_of_each_profile_is_read(name):
    params = profile(name)
    before = build_all(params)
    dropped = [".".join(path) for path in leaves(params) if path[0] not in NOT_A_CONFIG
               and not _reads(params, path, changed(_get(params, path)), before)]
    assert not dropped, f"{name}: keys that no config reads: {dropped}"


# Keys a section accepts but the profiles leave out: the same check, from each field's default.
ACCEPTED = {
    "fetch": "biocheck.data.fetch:FetchConfig", "data": "biocheck.data.prepare:PrepareConfig",
    "validate": "biocheck.data.validate:ValidateConfig", "evidence": "biocheck.evidence.build:EvidenceConfig",
    "search": "biocheck.evidence.search:SearchConfig", "model": "biocheck.base_model.build:ModelConfig",
    "agent": "biocheck.agent.episode:AgentConfig", "reward": "biocheck.rewards.components:RewardConfig",
    "judge": "biocheck.rewards.judge_train.train:JudgeTrainConfig", "train": "biocheck.train.grpo:TrainConfig", "select": "biocheck.train.select:SelectConfig",
    "audit": "biocheck.evaluate.audit:AuditConfig",
    "evaluate": "biocheck.evaluate.config:EvaluateConfig",
    "orchestrate": "biocheck.orchestration.config:OrchestrateConfig",
    "tracking": "biocheck.tracking:TrackingConfig", "study": "biocheck.study.units:StudyConfig",
}


# A path two stages share is one key, in its owner's section; set in the other section too, it is rejected.
SHARED = {("fetch", "raw_dir"): "data.raw_dir", ("validate", "prepared_dir"): "data.out_dir",
          ("search", "index_dir"): "evidence.index_dir", ("search", "store"): "evidence.store",
          ("judge", "prepared_dir"): "data.out_dir"}


@pytest.mark.parametrize("where, owner", SHARED.items(), ids=lambda x: ".".join(x) if isinstance(x, tuple) else x)
def test_a_path_two_stages_share_is_one_key(where, owner):
    """Set in its own section too, it would be silently overridden: it is an error naming both keys."""
    section, key = where
    params = profile("quickstart")
    params.setdefault(section, {})[key] = "somewhere/else"
    with pytest.raises(InputError, match=rf"{section}\.{key} is not a key of its own: it is {owner.replace('.', '[.]')}"):
        build_all(params)
    params[section].pop(key)
    owner_section, owner_key = owner.split(".")
    params[owner_section][owner_key] = "moved/here"
    assert "moved/here" in json.dumps(build_all(params), default=str)  # the owner's value reaches the config


def _accepted_keys() -> list:
    import importlib

    out = []
    for section, ref in ACCEPTED.items():
        module, cls = ref.split(":")
        for f in dataclasses.fields(getattr(importlib.import_module(module), cls)):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            out.append((section, f.name, _plain(default)))
    judge = b.JudgeConfig()
    out += [("reward", key, _plain(getattr(judge, field))) for key, field in b.JUDGE_KEYS.items()]
    return [pytest.param(*x, id=f"{x[0]}.{x[1]}") for x in out]


@pytest.mark.parametrize("section, key, default", _accepted_keys())
def test_every_key_a_section_accepts_is_read(section, key, default):
    params = profile("quickstart")
    params.setdefault(section, {}).pop(key, None)
    before = build_all(params)
    assert _reads(params, (section, key), changed(default), before), f"{section}.{key} is accepted but never read"


def test_the_check_catches_a_dropped_key(monkeypatch):
    """The bug this file exists for: reward.judge_batch_size accepted, then never reaching the judge."""
    real = b.reward_config

    def dropping(params, **overrides):
        params = copy.deepcopy(params)
        params.get("reward", {}).pop("judge_batch_size", None)
        return real(params, **overrides)

    params = profile("quickstart")
    before = build_all(params)
    assert _reads(params, ("reward", "judge_batch_size"), 3, before)
    monkeypatch.setattr(b, "reward_config", dropping)
    monkeypatch.setattr(pl.configs, "reward_config", dropping)  # train_setup reads it in pipeline/configs.py
    assert not _reads(params, ("reward", "judge_batch_size"), 3, before)


@pytest.mark.parametrize("section", [s for s in b.SECTIONS if s not in NOT_A_CONFIG])
def test_an_unknown_key_is_rejected_naming_it(section):
    params = profile("quickstart")
    params[section]["judge_batchsize"] = 8
    with pytest.raises(InputError, match=rf"profiles/quickstart.yaml: unknown key\(s\) {section}\.judge_batchsize"):
        build_all(params)


def test_an_unknown_section_is_rejected_naming_it():
    params = profile("quickstart")
    params["rewards"] = {"judge_batch_size": 8}
    with pytest.raises(InputError, match=r"quickstart.yaml: unknown section\(s\) rewards; known sections: profile"):
        build_all(params)


def test_judge_keys_reach_the_judge_config():
    params = profile("quickstart")
    params["reward"].update(judge="openai:m", judge_cache="j.sqlite", judge_batch_size=3)
    _, judge = b.reward_config(params)
    assert (judge.spec, judge.cache, judge.batch_size) == ("openai:m", Path("j.sqlite"), 3)
    params["reward"]["judge_cache"] = None
    assert b.reward_config(params)[1].cache is None


@pytest.mark.parametrize("name", PROFILES)
def test_every_stage_config_builds_from_each_profile(name):
    p = profile(name)
    built = build_all(p)
    # every value the profile sets reaches its stage's config unchanged (nothing dropped or defaulted)
    for section, values in p.items():
        if section in NOT_A_CONFIG:
            continue
        for key, value in values.items():
            if (section, key) == ("judge", "eqs"):  # the EQS judge's own config takes each key it changes
                assert all(built["judge_eqs"][k] == v for k, v in value.items()), f"{name}: judge.eqs"
                continue
            where = ("reward_judge", b.JUDGE_KEYS[key]) if section == "reward" and key in b.JUDGE_KEYS else (section, key)
            assert built[where[0]][where[1]] == value, f"{name}: {section}.{key}"


@pytest.mark.parametrize("name", PROFILES)
def test_paths_shared_between_stages_come_from_one_key(name):
    p = profile(name)
    # move every shared path away from its default, so that a stage reading its own default shows
    for section, key in [("data", "raw_dir"), ("data", "out_dir"), ("evidence", "index_dir"), ("evidence", "store"),
                         ("train", "out_dir")]:
        p[section][key] = f"elsewhere/{section}_{key}"
    search, evidence = b.search_config(p), b.evidence_config(p)
    assert (str(search.index_dir), str(search.store)) == (p["evidence"]["index_dir"], p["evidence"]["store"])
    assert str(b.fetch_config(p).raw_dir) == p["data"]["raw_dir"]
    assert str(b.validate_config(p).prepared_dir) == p["data"]["out_dir"]
    corpus = str(Path(p["data"]["out_dir"]) / "corpus.jsonl")
    assert str(evidence.corpus) == corpus and str(b.model_config(p).corpus) == corpus
    assert str(pl.select_config(p).checkpoints) == p["train"]["out_dir"]


def test_an_error_from_a_params_file_names_that_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("search: {max_results: 0}\n")
    with pytest.raises(InputError, match=r"mine.yaml, section 'search': search.max_results"):
        b.search_config(b.params_of(path))


def test_an_error_from_an_override_names_the_option_not_the_file(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("search: {max_results: 3}\n")
    with pytest.raises(InputError, match=r"^-n 0: search.max_results must be >= 1, not 0$") as e:
        b.search_config(b.params_of(path), options={"max_results": "-n"}, max_results=0)
    assert "mine.yaml" not in str(e.value)
    with pytest.raises(InputError, match=r"^--max-results 0: "):  # the default option name
        b.search_config(b.params_of(path), max_results=0)
    with pytest.raises(InputError, match=r"^--mode x: search.mode"):  # only the option that broke it
        b.search_config(b.params_of(path), mode="x", max_results=4)


def test_judge_stage_reads_model_and_data_and_refuses_an_untrained_judge_as_reward_judge():
    params = profile("quickstart")
    params["judge"].pop("base")
    params["model"]["out_dir"] = "models/other"
    assert b.judge_config(params).base == Path("models/other")  # the policy's backbone by default
    params["judge"]["train"] = False  # while reward.judge still names models/judge
    with pytest.raises(InputError, match=r"reward.judge is transformers:models/judge but judge.train is false"):
        b.judge_config(params)
    params["reward"]["judge"] = "transformers:models/other"
    assert b.judge_config(params).train is False


def test_the_judges_default_folder_is_stated_once(monkeypatch):
    """judge.out_dir's default is JudgeTrainConfig's, read where a params.yaml leaves it out: the EQS judge may
    not share it (judge.eqs.out_dir), and the evaluation looks for the training judge there."""
    from biocheck.rewards.judge_train.train import JudgeTrainConfig

    monkeypatch.setattr(JudgeTrainConfig, "out_dir", Path("models/judge_elsewhere"))
    params = profile("quickstart")
    params["judge"].pop("out_dir")
    params["judge"]["eqs"] = {"out_dir": "models/judge_elsewhere"}
    with pytest.raises(InputError, match=r"judge.eqs.out_dir is the training judge's folder"):
        b.judge_config(params, eqs=True)
    params["judge"]["eqs"] = {"out_dir": "models/judge"}  # the old literal: now another folder
    assert b.judge_config(params, eqs=True).out_dir == Path("models/judge")


def test_selection_reads_the_checkpoints_where_training_saves_them_by_default():
    from biocheck.train.grpo import TrainConfig
    from biocheck.train.select import SelectConfig

    assert SelectConfig.checkpoints is TrainConfig.out_dir  # one statement of models/checkpoints
    params = profile("quickstart")
    params["train"].pop("out_dir", None)
    params.get("select", {}).pop("checkpoints", None)
    assert pl.select_config(params).checkpoints == pl.train_config(params).out_dir == Path("models/checkpoints")
