"""Nothing is lost on a failed `dvc repro`: real DVC on the real dvc.yaml, with a typo in params.yaml.

DVC removes a stage's outputs before it runs the command, and a plain output (`cache: false`: the metrics,
reports and plots kept in git) has no copy in DVC's cache for `dvc checkout` to bring back. So every plain
output is `persist: true` (DVC leaves it in place) and the stage replaces it atomically once it has its
result; a cached output (data, models) that DVC removed comes back with `dvc checkout`.

The project is the repository's dvc.yaml, params.yaml and source, with every data dependency and output
stood in by a small file recorded by `dvc commit` (the previous results); the stage commands are the real
`biocheck` commands, which fail on the typo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers.builders import dvc_project
from tests.helpers.params import stages
from tests.helpers.paths import REPO

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.skipif(not (BIN / "dvc").exists(), reason="dvc is not installed beside this Python")


def _dvc(work: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    # the stage commands run `biocheck` from this environment, importing the project's copy of the source
    env = {**os.environ, "DVC_NO_ANALYTICS": "1", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(work / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    p = subprocess.run([str(BIN / "dvc"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert not check or p.returncode == 0, p.stdout + p.stderr
    return p


def _entries(entries) -> list[tuple[str, dict]]:
    return [(e, {}) if isinstance(e, str) else next(iter(e.items())) for e in entries or []]


def outputs(stage: str) -> dict[str, dict]:
    """{path: its options in dvc.yaml} of a stage's outs, metrics and plots (`foreach` items filled in)."""
    name, _, key = stage.partition("@")
    spec = stages()[stage]
    item = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][name]["foreach"][key] if key else {}
    out = {}
    for kind in ("outs", "metrics", "plots"):
        for path, opts in _entries(spec.get(kind)):
            for field, value in item.items():
                path = path.replace(f"${{item.{field}}}", str(value))
            out[path] = opts or {}
    return out


def snapshot(work: Path, paths) -> dict[str, bytes]:
    """{file: bytes} of every file under `paths` (a folder: each file in it)."""
    files = {}
    for path in paths:
        target = work / path
        for f in sorted(target.rglob("*")) if target.is_dir() else [target] if target.exists() else []:
            if f.is_file():
                files[f.relative_to(work).as_posix()] = f.read_bytes()
    return files


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    work = dvc_project(tmp_path_factory.mktemp("dvc"), REPO)
    for stage, spec in stages().items():
        for path in [p for p, _ in _entries(spec.get("deps"))] + list(outputs(stage)):
            target = work / path
            if target.exists() or "${" in path:
                continue
            if target.suffix:  # a file (jsonl, json, csv, sqlite): one line saying what it stands for
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps({"previous result": path}) + "\n")
            else:  # a folder (a model, an index, the gallery): one file in it
                target.mkdir(parents=True, exist_ok=True)
                (target / "stand-in.txt").write_text(f"previous result: {path}\n")
    _dvc(work, "init", "--no-scm", "-q")
    _dvc(work, "commit", "--force", "-q")
    assert json.loads(_dvc(work, "status", "--json").stdout or "{}") == {}
    return work


def _with_params(project: Path, edit):
    path = project / "params.yaml"
    saved = path.read_text()
    params = yaml.safe_load(saved)
    edit(params)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return saved


def _stage_errors(p: subprocess.CompletedProcess) -> list[str]:
    """The lines the stage's command printed as its error (DVC adds its own `ERROR: failed to reproduce`)."""
    return [line for line in (p.stdout + p.stderr).splitlines() if line.startswith("error:")]


def test_every_plain_output_persists():
    """A plain output without `persist` is removed by DVC before its stage runs, with nothing to restore it."""
    for file in ("dvc.yaml", "study/dvc.yaml"):
        spec = yaml.safe_load((REPO / file).read_text())["stages"]
        for name, body in spec.items():
            body = body.get("do", body)
            for kind in ("outs", "metrics", "plots"):
                for path, opts in _entries(body.get(kind)):
                    if opts.get("cache") is False:
                        assert opts.get("persist") is True, f"{file} {name}: {path} is cache: false without persist"


def _set(section: str, key: str, value):
    def edit(params):
        params[section][key] = value
    return edit


# (stage, the typo, what its one error line names)
TYPOS = [
    ("evaluate", _set("evaluate", "systems", ["base", "eg_grop"]), "'eg_grop'"),
    ("validate", _set("validate", "claim_min_chras", 10), "claim_min_chras"),
    ("select@eg_grpo", _set("select", "registred_model", "biocheck-agent"), "registred_model"),
    ("audit", _set("audit", "claimz", 8), "claimz"),
]


@pytest.mark.parametrize(("stage", "edit", "named"), TYPOS, ids=[t[0] for t in TYPOS])
def test_a_params_typo_loses_nothing(project, stage, edit, named):
    outs = outputs(stage)
    plain = [p for p, o in outs.items() if o.get("cache") is False]
    before = snapshot(project, outs)
    assert plain and before
    saved = _with_params(project, edit)
    try:
        p = _dvc(project, "repro", stage, check=False)
        assert p.returncode != 0, p.stdout + p.stderr
        errors = _stage_errors(p)
        assert len(errors) == 1 and named in errors[0], p.stdout + p.stderr  # one line: what, where, the fix
        assert "Traceback" not in p.stdout + p.stderr
        # the plain outputs (metrics, reports, plots) are exactly the previous ones
        assert snapshot(project, plain) == {k: v for k, v in before.items() if k.startswith(tuple(plain))}
        _dvc(project, "checkout", stage)  # the documented command: cached outputs DVC removed come back
        assert snapshot(project, outs) == before
    finally:
        (project / "params.yaml").write_text(saved)
    assert json.loads(_dvc(project, "status", "--json").stdout or "{}") == {}


def test_without_persist_dvc_removes_the_plain_outputs_before_the_stage_fails(project):
    """The check can fail: the same typo with evaluate's plain outputs not `persist` loses them for good."""
    dvc_yaml = project / "dvc.yaml"
    spec_text = dvc_yaml.read_text()
    spec = yaml.safe_load(spec_text)
    for entry in spec["stages"]["evaluate"]["outs"] + spec["stages"]["evaluate"]["metrics"]:
        for opts in entry.values() if isinstance(entry, dict) else []:
            if opts.get("cache") is False:
                opts.pop("persist")
    dvc_yaml.write_text(yaml.safe_dump(spec, sort_keys=False))
    plain = [p for p, o in outputs("evaluate").items() if o.get("cache") is False]
    before = snapshot(project, plain)
    saved = _with_params(project, _set("evaluate", "systems", ["eg_grop"]))
    try:
        assert _dvc(project, "repro", "evaluate", check=False).returncode != 0
        assert snapshot(project, plain) == {}  # gone, and `dvc checkout` has no copy of them
        _dvc(project, "checkout", "evaluate")
        assert snapshot(project, plain) == {}
    finally:
        (project / "params.yaml").write_text(saved)
        dvc_yaml.write_text(spec_text)
        for path, data in before.items():  # the stand-ins back, for any test after this one
            (project / path).parent.mkdir(parents=True, exist_ok=True)
            (project / path).write_bytes(data)
