"""The DVC pipeline's wiring.

- dvc.yaml against the code: every stage command is a real `biocheck` command, its params sections
  exist, its deps exist or come from an earlier stage, and the paths each stage's config reads and
  writes are the ones DVC tracks.
- `dvc repro evidence` (fetch -> prepare -> validate -> evidence) on a synthetic mirror sized like the
  official release (so the real params.yaml validates unchanged), and on the real data when
  BIOCHECK_DATA_MIRROR is set: each stage runs, a second repro does nothing, and a data param change
  reruns only what depends on it. (Training is exercised end to end in test_train.py.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers.builders import official_sizes, synthetic_corpus, write_release
from tests.helpers.paths import REPO
from tests.helpers.projects import workspace


def _dvc(work: Path, env: dict, *args: str) -> str:
    p = subprocess.run([str(Path(sys.executable).parent / "dvc"), *args], cwd=work, env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def _metric(work: Path, name: str) -> dict:
    return json.loads((work / "metrics" / f"{name}.json").read_text())


def _repro_twice_then_change_subset(work: Path, env: dict, corpus_docs: int) -> None:
    params = yaml.safe_load((work / "params.yaml").read_text())
    subset = params["data"]["subset"]["train"]

    out = _dvc(work, env, "repro", "evidence")
    for stage in ("fetch", "prepare", "validate", "evidence"):
        assert f"Running stage '{stage}'" in out
    assert _metric(work, "evidence")["index"]["docs"] == corpus_docs
    assert _metric(work, "validation")["success"] is True and _metric(work, "validation")["failed"] == 0
    assert _metric(work, "data")["working"]["scifact"]["train"]["total"] == subset

    out = _dvc(work, env, "repro", "evidence")
    assert "Running stage" not in out and "up to date" in out

    params["data"]["subset"]["train"] = subset - 24
    (work / "params.yaml").write_text(yaml.safe_dump(params))
    out = _dvc(work, env, "repro", "evidence")
    assert "Stage 'fetch' didn't change, skipping" in out
    assert "Running stage 'prepare'" in out and "Running stage 'validate'" in out
    assert "Running stage 'evidence'" not in out  # same corpus, validation still passing
    assert _metric(work, "data")["working"]["scifact"]["train"]["total"] == subset - 24


@pytest.mark.slow  # about a minute: three `dvc repro` runs, each stage a fresh `biocheck` process
def test_dvc_repro_on_a_synthetic_release(tmp_path):
    sizes = official_sizes()
    work, env = workspace(tmp_path, write_release(tmp_path / "mirror", **sizes))
    _repro_twice_then_change_subset(work, env, corpus_docs=len(synthetic_corpus()))
    full = _metric(work, "data")["full"]  # counts of the synthetic release, through fetch and prepare
    assert full["scifact"]["train"]["total"] + full["scifact"]["val"]["total"] == sizes["scifact_train"]
    assert full["scifact"]["test"]["total"] == sizes["scifact_dev"]
    assert full["healthfc"]["test"]["total"] == sizes["healthfc"]
    assert (work / "data" / "raw" / "scifact" / "data.tar.gz").read_bytes() == \
        (tmp_path / "mirror" / "scifact" / "data.tar.gz").read_bytes()


@pytest.mark.slow
def test_dvc_repro_on_the_real_data(real_mirror, tmp_path):
    work, env = workspace(tmp_path, real_mirror)
    _repro_twice_then_change_subset(work, env, corpus_docs=5183)


# --- dvc.yaml against the code ---------------------------------------------------------------------

def _paths(entries: list | None) -> list[str]:
    """dvc.yaml deps/outs/metrics entries (a path, or {path: options}) as paths."""
    return [e if isinstance(e, str) else next(iter(e)) for e in entries or []]


def _covers(declared: list[str], path: Path | str) -> bool:
    p = Path(path)
    return any(p == Path(d) or Path(d) in p.parents for d in declared)


VARIANTS = ("eg_grpo", "outcome_only")


def _stage_io(params: dict) -> dict[str, tuple[list, list]]:
    """stage -> (paths its config reads, paths it writes), from params.yaml through biocheck.pipeline."""
    from biocheck import pipeline as c
    from biocheck import wiring as b

    fetch, prep, val = b.fetch_config(params), b.prepare_config(params), b.validate_config(params)
    ev, model = b.evidence_config(params), b.model_config(params)
    io = {
        "fetch": ([], [fetch.raw_dir]),
        "prepare": ([prep.raw_dir], [prep.out_dir, prep.metrics_path]),
        "validate": ([val.prepared_dir], [val.report_path, val.metrics_path]),
        "evidence": ([ev.corpus], [ev.index_dir, ev.store, ev.metrics_path]),
        "model": ([model.corpus], [model.out_dir, model.metrics_path]),
    }
    judge = b.judge_config(params)
    io["judge"] = ([judge.base, prep.out_dir / "full" / "scifact.jsonl", prep.out_dir / "corpus.jsonl"],
                   [judge.out_dir, judge.metrics_path])
    eqs = b.judge_config(params, eqs=True)  # the second judge, which scores EQS
    io["judge_eqs"] = ([eqs.base, prep.out_dir / "full" / "scifact.jsonl", prep.out_dir / "corpus.jsonl"],
                       [eqs.out_dir, eqs.metrics_path])
    reward_judge = b.reward_config(params)[1].spec.partition(":")[2]  # the judge the reward asks
    sft_dir = c.train_setup(params).train.sft["out_dir"]  # shared: both variants start from it
    io["sft"] = ([model.out_dir, ev.index_dir, prep.out_dir / "scifact" / "train.jsonl"], [sft_dir])
    audit = c.audit_config(params)
    io["audit"] = ([model.out_dir, sft_dir, reward_judge, ev.index_dir, prep.out_dir / "scifact" / "train.jsonl",
                    prep.out_dir / "corpus.jsonl"], [audit.out_dir, audit.report_path, audit.metrics_path])
    for v in VARIANTS:  # one training run and one selection per reward variant (DVC foreach)
        train, sel = c.train_setup(params, variant=v).train, c.select_config(params, variant=v)
        assert train.sft["out_dir"] == sft_dir
        io[f"train@{v}"] = ([model.out_dir, sft_dir, reward_judge, ev.index_dir, prep.out_dir / "scifact" / "train.jsonl"],
                            [train.out_dir, train.metrics_path])
        io[f"select@{v}"] = ([sel.checkpoints], [sel.out_dir, sel.metrics_path, sel.curve_path])
    ev_cfg, models = c.evaluate_config(params), c.eval_models(params)
    eqs_judge = (ev_cfg.eqs_judge or "").partition(":")[2]
    io["evaluate"] = ([spec.partition(":")[2] for spec in set(models.values())] + [reward_judge, eqs_judge, ev.index_dir]
                      + [prep.out_dir / f"{split}.jsonl" for split in ("scifact/test", "healthfc/test")],
                      [ev_cfg.out_dir, ev_cfg.report_dir, ev_cfg.headline_dir, ev_cfg.metrics_path, ev_cfg.paired_path,
                       ev_cfg.plots_dir])
    nar = c.narratives_config(params)  # the passage benchmark: its passages, then every arm checked and scored
    io["narrative_passages"] = ([prep.out_dir / "full" / "scifact.jsonl"], [nar.passages_path])
    io["narratives"] = ([nar.passages_path, models[nar.system].partition(":")[2], reward_judge, eqs_judge, ev.index_dir,
                         prep.out_dir / "full" / "scifact.jsonl", prep.out_dir / "corpus.jsonl"],
                        [nar.out_dir, nar.report_dir, nar.metrics_path])
    return io


def _expand(stages: dict, params: dict) -> dict[str, dict]:
    """dvc.yaml stages with `foreach` (a mapping) expanded as DVC does: name@key, ${key}, ${item.field}, and
    ${section.key} from params.yaml."""
    import re

    def from_params(match: re.Match) -> str:
        node = params
        for part in match.group(1).split("."):
            node = node[part]
        return str(node)

    out = {}
    for name, stage in stages.items():
        text = yaml.safe_dump(stage)
        if "foreach" not in stage:
            out[name] = yaml.safe_load(re.sub(r"\$\{(\w+\.\w+)\}", from_params, text))
            continue
        for key, item in stage["foreach"].items():
            text = yaml.safe_dump(stage["do"]).replace("${key}", key)
            for field, value in item.items():
                text = text.replace(f"${{item.{field}}}", str(value))
            out[f"{name}@{key}"] = yaml.safe_load(re.sub(r"\$\{(\w+\.\w+)\}", from_params, text))
    return out


def test_dvc_stages_match_the_cli_params_and_configs():
    from biocheck.cli import app

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    stages = _expand(yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"], params)
    io = _stage_io(params)
    assert sorted(stages) == sorted(io)
    produced: list[str] = []
    for name, stage in stages.items():
        words = stage["cmd"].split()
        assert words[0] == "biocheck", name
        result = CliRunner().invoke(app, [*words[1:], "--help"], prog_name="biocheck")
        assert result.exit_code == 0, f"{name}: `{stage['cmd']}` is not a valid command:\n{result.output}"
        for key in stage.get("params") or []:
            node = params
            for part in key.split("."):
                assert isinstance(node, dict) and part in node, f"{name}: params.yaml has no '{key}'"
                node = node[part]
        deps = _paths(stage.get("deps"))
        for dep in deps:
            assert (REPO / dep).exists() or _covers(produced, dep), f"{name}: dep {dep} is neither in the repo " \
                "nor an output of an earlier stage"
        outs = _paths(stage.get("outs")) + _paths(stage.get("metrics")) + _paths(stage.get("plots"))
        reads, writes = io[name]
        for path in reads:
            assert _covers(deps, path), f"{name} reads {path}, which is not among its deps {deps}"
        for path in writes:
            assert str(path) in outs, f"{name} writes {path}, which is not among its outs {outs}"
        produced += outs


@pytest.mark.parametrize("model, alias", [
    ("selected", "selected"), ("outcome_only", "outcome_only"), ("champion", "champion"),
    ("models:/biocheck-agent@challenger", "challenger"), ("models:/biocheck-agent@outcome_only", "outcome_only"),
    ("transformers:models:/biocheck-agent@champion", "champion"), ("models:/someone-else@champion", "none"),
    ("models:/biocheck-agent/3", "none"), ("models/selected", "none")])
def test_the_model_alias_an_evaluation_logs_is_the_one_its_model_names(model, alias):
    """`evaluate --model` by name or by registry URI logs that name (MLflow `model_alias`), anything else none."""
    from biocheck.pipeline import model_alias

    assert model_alias(model, "biocheck-agent") == alias
