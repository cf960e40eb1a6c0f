"""Same inputs, same bytes (issue 49): the outputs of the stages (fetch, prepare, validate, evidence; model, sft, train
and select on the tiny model, a slow test; evaluate and audit) hold no absolute path, timestamp or duration, so a
run in another folder or on another machine gives byte-identical files and DVC hashes: what dvc.lock records, and
what a `dvc pull` brings, is current wherever the pipeline ran. An evaluation episode's times lie beside its trace
in a file .dvcignore leaves out of DVC's hash (evaluate/harness.py); DVC itself is asked that it does."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from pathlib import Path

import pathspec
import pytest
import yaml

from biocheck import pipeline
from biocheck.data.fetch import MIRROR_ENV
from biocheck.evaluate.harness import read_episode, times_path
from tests.helpers.builders import write_raw
from tests.helpers.paths import REPO

STAGES = ("fetch", "prepare", "validate", "evidence")


def _outputs() -> list[str]:
    """Every output (outs and metrics) dvc.yaml declares for STAGES."""
    return _stage_outputs(STAGES)


def _stage_outputs(names: tuple[str, ...]) -> list[str]:
    """Every output (outs and metrics) dvc.yaml declares for the stages `names` (none of them a foreach)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    entries = [e for s in names for key in ("outs", "metrics") for e in stages[s].get(key) or []]
    return [e if isinstance(e, str) else next(iter(e)) for e in entries]


def _run(work: Path, mirror: Path, monkeypatch) -> dict[str, str]:
    """The stages as `dvc repro evidence` runs them, in `work` from its own copy of the mirror: path -> sha256."""
    shutil.copytree(mirror, work / "mirror")
    work.joinpath("run").mkdir()
    monkeypatch.chdir(work / "run")
    # an absolute mirror path, as a user sets it: each folder's is another
    monkeypatch.setenv(MIRROR_ENV, str((work / "mirror").resolve()))
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # the tiny release's sizes (params.yaml expects the official release's)
    params["validate"]["expected_rows"] = {"scifact": {"train+val": 23, "test": 4}, "healthfc": {"test": 7}}
    pipeline.fetch_stage(params, progress=False)
    pipeline.prepare_stage(params)
    assert pipeline.validate_stage(params).success
    pipeline.evidence_stage(params, progress=False)
    return _digests(_outputs())


def _digests(outputs: list[str]) -> dict[str, str]:
    """path -> sha256 of every file of `outputs` that DVC hashes (not one .dvcignore leaves out), each output
    existing."""
    ignored = pathspec.GitIgnoreSpec.from_lines((REPO / ".dvcignore").read_text().splitlines())
    hashes = {}
    for out in outputs:
        path = Path(out)
        assert path.exists(), f"{out}: declared in dvc.yaml, not written"
        for f in sorted([path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())):
            if not ignored.match_file(f.as_posix()):
                hashes[f.as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return hashes


def test_the_early_stages_give_the_same_bytes_in_another_folder(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "release")
    first = _run(tmp_path / "a", mirror, monkeypatch)
    second = _run(tmp_path / "elsewhere" / "b", mirror, monkeypatch)
    # the files in one run only, or with other bytes (a segment file named by chance is both)
    differ = sorted(f for f in first.keys() | second.keys() if first.get(f) != second.get(f))
    assert not differ, "not the same in both folders:\n" + "\n".join(differ)


# --- the model stages: model, sft, train and select on the tiny model ----------------------------------

LATER = ("model", "sft", "train", "select")


def _later_outputs() -> list[str]:
    """Every output dvc.yaml declares for LATER (the eg_grpo entry of a foreach stage)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    out = []
    for name in LATER:
        stage = stages[name]
        if "foreach" in stage:
            item = stage["foreach"]["eg_grpo"]
            stage = stage["do"]
        else:
            item = {}
        for key in ("outs", "metrics"):
            for e in stage.get(key) or []:
                path = e if isinstance(e, str) else next(iter(e))
                out.append(path.replace("${key}", "eg_grpo").replace("${item.", "{").format(**item))
    return out


def _train_run(work: Path, mirror: Path, monkeypatch) -> dict[str, str]:
    """model -> sft -> train (2 steps) -> select, as `dvc repro select@eg_grpo` runs them, in `work`."""
    _run(work, mirror, monkeypatch)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["reward"]["judge"] = "transformers:models/base"  # the judge stage has its own test (test_judge_train)
    params["agent"].update(max_searches=1, max_new_tokens=64)
    params["train"].update(max_steps=2, save_steps=1, eval_steps=1, num_generations=2, num_generations_eval=2,
                           per_device_train_batch_size=2, per_device_eval_batch_size=4, max_completion_length=256,
                           sft={**params["train"]["sft"], "epochs": 1})
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    pipeline.model_stage(params)
    pipeline.sft_stage(params, progress=False)
    pipeline.train_stage(params, progress=False)
    pipeline.select_stage(params, register=False)
    return _digests(_later_outputs())


@pytest.mark.slow  # two tiny pipelines up to select: 2-3 min on 2 busy cores (117 s, 186 s measured)
def test_the_model_stages_give_the_same_bytes_in_another_folder(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "release")
    first = _train_run(tmp_path / "a", mirror, monkeypatch)
    second = _train_run(tmp_path / "elsewhere" / "b", mirror, monkeypatch)
    assert any("checkpoint-2" in f for f in first) and "models/sft/model.safetensors" in first
    differ = sorted(f for f in first.keys() | second.keys() if first.get(f) != second.get(f))
    assert not differ, "not the same in both folders:\n" + "\n".join(differ)


# --- the evaluation stages: evaluate and audit, on the tiny model -------------------------------------

EVALUATION = ("evaluate", "audit")


def _eval_run(work: Path, mirror: Path, monkeypatch) -> dict[str, str]:
    """model, then evaluate (every system, 2 claims a dataset) and the reward audit (2 claims, groups of 2) as
    `dvc repro evaluate audit` runs them, in `work`; the tiny base model in every trained model's place."""
    _run(work, mirror, monkeypatch)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["reward"]["judge"] = "transformers:models/base"  # the judge stages have their own test (test_judge_train)
    params["agent"].update(max_searches=1, max_new_tokens=48)
    params["evaluate"].update(limit=2, eqs_judge=None)
    params["train"]["num_generations"] = 2
    params["audit"]["claims"] = 2
    monkeypatch.setenv("BIOCHECK_TRACKING", "off")
    pipeline.model_stage(params)
    for stage in ("sft", "selected", "selected_outcome_only"):  # their stages: the model stages' test above
        shutil.copytree("models/base", f"models/{stage}")
    pipeline.evaluate_stage(params, progress=False)
    pipeline.audit_stage(params, progress=False)
    return _digests(_stage_outputs(EVALUATION))


def test_the_evaluation_stages_give_the_same_bytes_in_another_folder(tmp_path, monkeypatch):
    """evaluate and audit write each episode's times (when it ran, how long each step took) beside its trace,
    in a file DVC does not hash, and no seconds in the predictions or the metrics: the rest is the same."""
    mirror = write_raw(tmp_path / "release")
    first = _eval_run(tmp_path / "a", mirror, monkeypatch)
    second = _eval_run(tmp_path / "elsewhere" / "b", mirror, monkeypatch)
    traces = [f for f in first if "/traces/" in f]
    assert any(f.startswith("eval/traces/fire/") for f in traces) and any(f.startswith("audit/traces/") for f in traces)
    differ = sorted(f for f in first.keys() | second.keys() if first.get(f) != second.get(f))
    assert not differ, "not the same in both folders:\n" + "\n".join(differ)
    # a coarse stamp (a date, a minute) may be the same in two runs close together: no output holds today's date
    today = {time.strftime("%Y-%m-%d", t) for t in (time.gmtime(), time.localtime())}
    dated = [f for f in second if any(d.encode() in Path(f).read_bytes() for d in today)]
    assert not dated, "today's date in:\n" + "\n".join(dated)
    # the times are kept, beside each trace, and an episode read back has them (MLflow's spans, the cost seconds)
    for trace in traces:
        path = Path(trace)  # in the second folder (cwd)
        assert times_path(path).is_file() and "clock" not in json.loads(path.read_text()), trace
        ep = read_episode(path)
        (began, ended), = ep.clock["episode"]
        assert 0 < began <= ended and ep.timing["total_s"] >= 0 and ep.started_at, trace


DVC = shutil.which("dvc", path=str(REPO / ".venv" / "bin")) or shutil.which("dvc")


@pytest.mark.skipif(DVC is None, reason="dvc is not installed")
def test_dvc_hashes_an_evaluation_folder_without_its_times(tmp_path):
    """The project's .dvcignore, read by DVC itself: the times beside a trace change nothing DVC records."""
    trace = tmp_path / "eval" / "traces" / "base" / "fp" / "scifact" / "1.json"
    trace.parent.mkdir(parents=True)
    trace.write_text('{"claim": "c"}\n')
    shutil.copy(REPO / ".dvcignore", tmp_path / ".dvcignore")
    (tmp_path / "dvc.yaml").write_text("stages:\n  evaluate:\n    cmd: 'true'\n    outs:\n      - eval\n")

    def dvc(*args: str) -> str:
        r = subprocess.run([DVC, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        return r.stdout

    dvc("init", "--no-scm", "-q")
    times_path(trace).write_text('{"timing": {"total_s": 1.5}}\n')
    dvc("commit", "-f", "-q")
    lock = (tmp_path / "dvc.lock").read_text()
    assert "nfiles: 1" in lock and f"size: {trace.stat().st_size}" in lock  # the trace alone
    times_path(trace).write_text('{"timing": {"total_s": 2.5}}\n')  # another run's times
    assert "up to date" in dvc("status")
    trace.write_text('{"claim": "d"}\n')  # the control: a trace that changed is seen
    assert "modified" in dvc("status")
