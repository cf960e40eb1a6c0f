"""biocheck.orchestration.dvc on a tiny DVC project (git + dvc init, stages that are small Python scripts).

DVC itself decides: a stage runs once, is skipped while nothing changed, reruns when an input changes.
Failures are one line naming the stage and the cause (the stage's own `error:` line, a traceback's last
line, DVC's message), secrets blanked. A remote round trip restores outputs in a fresh copy; a missing
remote folder is "nothing to pull", an unknown remote name an error. A run that is stopped (timeout) or
whose caller is killed leaves no lock behind that blocks the rerun.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from biocheck.orchestration import dvc
from biocheck.orchestration.dvc import DvcError
from tests.helpers.paths import REPO

SCRIPTS = {
    # a: out/a.txt = in.txt twice
    "a.py": "import pathlib\npathlib.Path('out').mkdir(exist_ok=True)\n"
            "pathlib.Path('out/a.txt').write_text(pathlib.Path('in.txt').read_text() * 2)\n",
    # bad: chatter on stdout, then the biocheck CLI's way of failing (`error: ...` on stderr, exit 1)
    "bad.py": "import os, sys\nprint('working on it')\n"
              "sys.stderr.write('error: in.txt: bad input ' + os.environ.get('OPENAI_API_KEY', '') + '; fix in.txt\\n')\n"
              "sys.exit(1)\n",
    "crash.py": "raise ValueError('boom: the stage crashed')\n",
    # slow: records its pid, then sleeps while SLOW is set (a long stage to stop or kill mid-run)
    "slow.py": "import os, pathlib, time\npathlib.Path('slow.pid').write_text(str(os.getpid()))\n"
               "time.sleep(120 if os.environ.get('SLOW') else 0)\npathlib.Path('slow.txt').write_text('done')\n",
    # grow: adds one line to a kept output (as the evidence stage keeps its store)
    "grow.py": "import pathlib\np = pathlib.Path('store.txt')\np.write_text((p.read_text() if p.exists() else '') + 'built\\n')\n",
}
STAGES = {
    "a": {"cmd": "python a.py", "deps": ["in.txt", "a.py"], "outs": ["out"]},
    "bad": {"cmd": "python bad.py", "deps": ["bad.py"], "outs": ["bad.txt"]},
    "crash": {"cmd": "python crash.py", "deps": ["crash.py"], "outs": ["crash.txt"]},
    "slow": {"cmd": "python slow.py", "deps": ["slow.py"], "outs": ["slow.txt"]},
    "grow": {"cmd": "python grow.py", "deps": ["grow.py"], "outs": [{"store.txt": {"persist": True}}]},
}


@pytest.fixture
def proj(tmp_path) -> Path:
    """A DVC project with the stages above and a local remote `local` at ../remote (not created yet)."""
    root = tmp_path / "proj"
    root.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / ".dvc").mkdir()  # what `dvc init` + `dvc remote add -d local ../remote` write, without two DVC starts
    (root / ".dvc" / "config").write_text("[core]\n    analytics = false\n    remote = local\n"
                                          "['remote \"local\"']\n    url = ../../remote\n")
    (root / ".dvc" / ".gitignore").write_text("/config.local\n/tmp\n/cache\n")
    for name, text in SCRIPTS.items():
        (root / name).write_text(text)
    (root / "in.txt").write_text("hello\n")
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": STAGES}))
    (root / "params.yaml").write_text("{}\n")
    return root


def _lock_stages(root: Path) -> set[str]:
    return set(yaml.safe_load((root / "dvc.lock").read_text())["stages"])


def test_not_a_dvc_project_and_not_its_params_file(tmp_path):
    with pytest.raises(DvcError, match=r"^not a DVC project: .*no \.dvc/ folder"):
        dvc.repro("a", tmp_path)
    (tmp_path / ".dvc").mkdir()
    with pytest.raises(DvcError, match="has no dvc.yaml"):
        dvc.status(tmp_path)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    with pytest.raises(DvcError, match=r"DVC stages read .*params\.yaml, not .*other\.yaml"):
        dvc.params_file(tmp_path, "other.yaml")
    with pytest.raises(DvcError, match=r"no .*params\.yaml: every DVC stage reads"):
        dvc.params_file(tmp_path)
    (tmp_path / "params.yaml").write_text("{}\n")
    assert dvc.params_file(tmp_path) == (tmp_path / "params.yaml").resolve()


def test_a_stage_runs_once_is_skipped_while_unchanged_and_reruns_on_change(proj):
    first = dvc.repro("a", proj)
    assert first.ran and first.stage == "a"
    assert (proj / "out" / "a.txt").read_text() == "hello\n" * 2
    assert _lock_stages(proj) == {"a"}
    mtime = (proj / "out" / "a.txt").stat().st_mtime_ns

    again = dvc.repro("a", proj)
    assert not again.ran
    assert (proj / "out" / "a.txt").stat().st_mtime_ns == mtime
    assert "a" not in dvc.status(proj)

    (proj / "in.txt").write_text("bye\n")
    assert dvc.status(proj)["a"] == [{"changed deps": {"in.txt": "modified"}}]
    assert dvc.repro("a", proj).ran
    assert (proj / "out" / "a.txt").read_text() == "bye\n" * 2


def test_a_failing_stage_is_one_line_with_its_own_error_and_no_secret(proj, monkeypatch, caplog):
    secret = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    with caplog.at_level(logging.INFO, logger="biocheck.orchestration.dvc"):
        with pytest.raises(DvcError) as e:
            dvc.repro("bad", proj)
    message = str(e.value)
    assert message.startswith("dvc repro bad failed (exit ")
    assert message.endswith("in.txt: bad input ***; fix in.txt")
    assert "\n" not in message and secret not in message
    logged = caplog.text
    assert "working on it" in logged  # the stage's output streamed into logging
    assert secret not in logged and "***" in logged
    assert not (proj / "dvc.lock").exists()  # a failed stage is not recorded as done


def test_a_crash_names_the_exception_and_an_unknown_stage_says_so(proj):
    with pytest.raises(DvcError, match=r"^dvc repro crash failed \(exit \d+\): ValueError: boom: the stage crashed$"):
        dvc.repro("crash", proj)
    with pytest.raises(DvcError, match=r"^dvc repro nope failed \(exit \d+\): Stage 'nope' not found inside 'dvc.yaml'"):
        dvc.repro("nope", proj)


def test_an_unknown_remote_is_a_clear_error_before_anything_moves(proj):
    for call in (dvc.pull, dvc.push, dvc.check_remote):
        with pytest.raises(DvcError, match=r"^no DVC remote named 'nope' in .*config \(this project has local\): "
                                           r"add one with `dvc remote add nope <url>`.*orchestrate.dvc_remote: null"):
            call(proj, "nope")
    assert not (proj.parent / "remote").exists()


def test_push_then_pull_into_a_fresh_copy_restores_the_outputs(proj, tmp_path):
    assert dvc.pull(proj, "local") is True  # the remote folder does not exist yet: nothing to pull, no error
    dvc.repro("a", proj)
    dvc.push(proj, "local")
    assert any((tmp_path / "remote").rglob("*")), "push wrote nothing to the remote folder"

    copy = tmp_path / "copy"  # a fresh clone: the committed files, no outputs, no cache
    copy.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=copy, check=True)
    shutil.copytree(proj / ".dvc", copy / ".dvc", ignore=shutil.ignore_patterns("cache", "tmp"))
    for name in ("dvc.yaml", "dvc.lock", "params.yaml", "in.txt", *SCRIPTS):
        shutil.copy2(proj / name, copy / name)
    assert not (copy / "out").exists()

    assert dvc.pull(copy, "local") is True
    assert (copy / "out" / "a.txt").read_text() == "hello\n" * 2
    assert "a" not in dvc.status(copy)
    assert dvc.repro("a", copy).ran is False  # restored, so DVC has nothing to recompute

    (copy / "out" / "a.txt").write_text("edited here\n")  # local changes to an output are never overwritten
    assert dvc.pull(copy, "local") is False
    assert (copy / "out" / "a.txt").read_text() == "edited here\n"


def test_a_remote_that_lacks_the_files_means_recompute(proj, tmp_path):
    dvc.repro("a", proj)
    shutil.rmtree(proj / ".dvc" / "cache")
    shutil.rmtree(proj / "out")
    assert dvc.pull(proj, "local") is True  # nothing there (never pushed): not an error
    assert dvc.repro("a", proj).ran and (proj / "out" / "a.txt").is_file()


def test_commit_records_a_kept_output_changed_outside_its_stage(proj):
    """What the evidence refresh does to the evidence stage's store: after `dvc commit` DVC sees it as the
    stage's output (status clean, dvc.lock and the cache hold the new file), and reruns nothing."""
    import hashlib

    dvc.repro("grow", proj)
    store = proj / "store.txt"
    store.write_text(store.read_text() + "refreshed\n")
    assert dvc.status(proj, ["grow"]) == {"grow": [{"changed outs": {"store.txt": "modified"}}]}

    dvc.commit(proj, "grow")
    assert dvc.status(proj, ["grow"]) == {}
    md5 = hashlib.md5(store.read_bytes()).hexdigest()
    [out] = yaml.safe_load((proj / "dvc.lock").read_text())["stages"]["grow"]["outs"]
    assert out["md5"] == md5
    assert (proj / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]).read_text() == "built\nrefreshed\n"
    assert dvc.repro("grow", proj).ran is False
    with pytest.raises(DvcError, match=r"^dvc commit nope failed \(exit \d+\): .*nope"):
        dvc.commit(proj, "nope")


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gone(pid: int, seconds: float = 10) -> bool:
    """Whether `pid` is gone (exited and reaped: DVC counts an unreaped zombie as a live lock holder)."""
    import psutil

    deadline = time.monotonic() + seconds
    while psutil.pid_exists(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not psutil.pid_exists(pid)


def _wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.is_file():
        if time.monotonic() > deadline:  # a wait limit against a hung run, not a timing check
            pytest.fail(f"{path} never appeared within {seconds:g} s")
        time.sleep(0.1)


def test_a_stopped_run_stops_its_stage_and_leaves_no_lock(proj, monkeypatch):
    """What a Prefect task timeout does: an exception raised into the waiting caller."""
    monkeypatch.setenv("SLOW", "1")

    def timeout(*_):
        raise TimeoutError("task timed out")

    old = signal.signal(signal.SIGALRM, timeout)
    try:
        signal.setitimer(signal.ITIMER_REAL, 4.0)
        with pytest.raises(TimeoutError):
            dvc.repro("slow", proj)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    pid = int((proj / "slow.pid").read_text())
    assert not _alive(pid), "the stage kept running after its caller stopped"
    monkeypatch.delenv("SLOW")
    assert dvc.repro("slow", proj).ran  # no lock left behind
    assert (proj / "slow.txt").read_text() == "done"


CALLER = "import sys; from biocheck.orchestration import dvc; dvc.repro('slow', sys.argv[1])"


def _start(proj: Path, cmd: list[str]) -> tuple[subprocess.Popen, int]:
    """Start `cmd` (a process group of its own) with a slow stage; return it and the stage's pid once the
    stage runs."""
    (proj / "slow.pid").unlink(missing_ok=True)
    # SIGINT at its default, as in a terminal: a suite started in the background (`make test &`) ignores it, and
    # children inherit that, so `_stop`'s Ctrl-C did nothing and waited out its 30 s
    proc = subprocess.Popen(cmd, cwd=proj, env={**os.environ, "SLOW": "1", "DVC_NO_ANALYTICS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    _wait_for(proj / "slow.pid")
    return proc, int((proj / "slow.pid").read_text())


def _stop(holder: subprocess.Popen) -> None:
    """Clean-up: Ctrl-C to the holder's group (DVC and its stage), then SIGKILL if DVC is still there after
    30 s (a safety net: with SIGINT at its default, DVC exits at once)."""
    os.killpg(holder.pid, signal.SIGINT)
    try:
        holder.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)


def test_a_caller_killed_outright_takes_its_stage_down_and_the_rerun_runs(proj):
    """A Prefect worker killed with SIGKILL cannot clean up: the guard notices and stops DVC and the stage."""
    caller, stage = _start(proj, [sys.executable, "-c", CALLER, str(proj)])
    dvc_group = os.getpgid(stage)
    caller.kill()
    caller.wait()
    assert _gone(stage, 30), "the stage ran on after its caller was killed"
    assert _gone(dvc_group, 30), "DVC ran on after its caller was killed"
    (proj / "slow.pid").unlink()
    assert dvc.repro("slow", proj).ran  # no lock left behind
    assert (proj / "slow.txt").read_text() == "done"


def test_a_live_dvc_holding_the_project_is_named_in_the_error(proj):
    holder, stage = _start(proj, [sys.executable, "-m", "dvc", "repro", "slow"])  # e.g. someone's terminal
    try:
        with pytest.raises(DvcError, match=rf"^dvc repro slow: .* is in use by another DVC process \(pid {holder.pid}: "
                                           r".*-m dvc repro slow\): wait for it to finish or stop it"):
            dvc.repro("slow", proj)
    finally:
        _stop(holder)
    assert _gone(stage)
    assert dvc.repro("slow", proj).ran  # the stopped holder released the lock: the rerun runs


def test_the_repo_has_a_default_local_remote_outside_the_checkout():
    remotes = dvc.remotes(REPO)
    assert Path(remotes["local"]) == REPO.parent / "biocheck-dvc-remote"
    assert yaml.safe_load((REPO / "params.yaml").read_text())["orchestrate"]["dvc_remote"] in remotes


def test_status_is_json_of_the_changed_stages(proj):
    changed = dvc.status(proj)
    assert set(changed) == set(STAGES)  # nothing ran yet
    assert json.loads(json.dumps(changed)) == changed
