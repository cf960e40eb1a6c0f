"""Nothing lost: a command replaces only an output it wrote itself, and a bad count is refused when params load.

Each test names the case it pins from the second round of bad-input probes: before the fix `data prepare
--out-dir X` and `model init --out-dir X` deleted whatever was at X with exit 0, `sft.epochs: -1` replaced the
trained warm start with untrained weights, and `max_steps: -5` became a 192-step run.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from biocheck.cli import app
from biocheck.io import InputError, atomic_path
from biocheck.outputs import MARK_FILE, claim_dir, claim_file, output_dir
from biocheck.params import load_params
from biocheck.profiles import names, render
from tests.helpers.cli import one_error_line
from tests.helpers.paths import REPO

runner = CliRunner()


def a_store_folder(path: Path) -> dict[str, bytes]:
    """A folder holding what a user would hate to lose (an evidence store); returns its files' bytes."""
    path.mkdir(parents=True)
    (path / "evidence.sqlite").write_bytes(b"SQLite format 3\x00" + b"x" * 100)
    (path / "notes.txt").write_text("three weeks of PubMed answers\n")
    return {p.name: p.read_bytes() for p in path.iterdir()}


def unchanged(path: Path, before: dict[str, bytes]) -> bool:
    return {p.name: p.read_bytes() for p in path.iterdir()} == before


# --- the output guard ------------------------------------------------------------------------------------

def test_prepare_refuses_an_out_dir_it_did_not_write(workdir):
    before = a_store_folder(workdir / "store")
    one_error_line(runner.invoke(app, ["data", "prepare", "--out-dir", "store"]), "--out-dir", "store",
                   "biocheck data prepare", "another path")
    assert unchanged(workdir / "store", before)


def test_prepare_refuses_a_file_as_out_dir(workdir):
    (workdir / "precious.txt").write_text("keep me\n")
    one_error_line(runner.invoke(app, ["data", "prepare", "--out-dir", "precious.txt"]), "precious.txt", "is a file")
    assert (workdir / "precious.txt").read_text() == "keep me\n"


def test_prepare_replaces_its_own_output(workdir):
    assert runner.invoke(app, ["data", "prepare", "--out-dir", "prep"]).exit_code == 0
    assert (workdir / "prep" / MARK_FILE).read_text().strip() == "biocheck data prepare"
    (workdir / "prep" / "stale.txt").write_text("from the first run\n")
    r = runner.invoke(app, ["data", "prepare", "--out-dir", "prep"])
    assert r.exit_code == 0, r.output
    assert not (workdir / "prep" / "stale.txt").exists()  # replaced as a whole
    assert (workdir / "prep" / "corpus.jsonl").is_file()


def test_model_init_refuses_an_out_dir_it_did_not_write(workdir):
    before = a_store_folder(workdir / "data" / "evidence")
    one_error_line(runner.invoke(app, ["model", "init", "--out-dir", "data/evidence"]), "--out-dir",
                   "data/evidence", "biocheck model init")
    assert unchanged(workdir / "data" / "evidence", before)
    (workdir / "weights.bin").write_bytes(b"\x00" * 64)
    one_error_line(runner.invoke(app, ["model", "init", "--out-dir", "weights.bin"]), "is a file")
    assert (workdir / "weights.bin").read_bytes() == b"\x00" * 64


def test_a_folder_of_another_command_is_named_in_the_refusal(tmp_path):
    with output_dir(tmp_path / "prep", "biocheck data prepare", "--out-dir") as tmp:
        (tmp / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match=r"holds the output of `biocheck data prepare`"):
        claim_dir(tmp_path / "prep", "biocheck model init", "--out-dir")


def test_empty_missing_and_legacy_folders_may_be_claimed(tmp_path):
    claim_dir(tmp_path / "missing", "biocheck x", "--out-dir")
    (tmp_path / "empty").mkdir()
    claim_dir(tmp_path / "empty", "biocheck x", "--out-dir")
    old = tmp_path / "old"  # an output of an earlier version: no mark, but its own files
    old.mkdir()
    (old / "manifest.json").write_text("{}")
    (old / "corpus.jsonl").write_text("{}\n")
    claim_dir(old, "biocheck data prepare", "--out-dir", legacy=("manifest.json", "corpus.jsonl"))
    (tmp_path / "raw").mkdir()  # data/raw also has a manifest.json, but no corpus: not prepare's
    (tmp_path / "raw" / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="did not write"):
        claim_dir(tmp_path / "raw", "biocheck data prepare", "--out-dir", legacy=("manifest.json", "corpus.jsonl"))


def test_a_link_is_never_replaced(tmp_path):
    target = tmp_path / "elsewhere"
    a_store_folder(target)
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(InputError, match="is a link"):
        claim_dir(tmp_path / "link", "biocheck x", "--out-dir")


def test_a_failed_build_leaves_the_old_output(tmp_path):
    with output_dir(tmp_path / "out", "biocheck x", "--out-dir") as tmp:
        (tmp / "a.txt").write_text("first\n")
    with pytest.raises(RuntimeError), output_dir(tmp_path / "out", "biocheck x", "--out-dir") as tmp:
        (tmp / "a.txt").write_text("half\n")
        raise RuntimeError("killed mid-build")
    assert (tmp_path / "out" / "a.txt").read_text() == "first\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporaries left


def test_an_output_file_never_replaces_a_folder(tmp_path):
    (tmp_path / "report").mkdir()
    with pytest.raises(InputError, match="is a folder"):
        claim_file(tmp_path / "report", "--report")
    with pytest.raises(InputError, match="is a folder"), atomic_path(tmp_path / "report"):
        pass
    assert (tmp_path / "report").is_dir()


FOLDER = "is a folder; an output file cannot replace it (give a file name, e.g. {})"


@pytest.mark.parametrize("args, option, example, code", [
    (["score", "--traces", "runs", "--judge", "none", "--out", "taken"], "--out", "scores.json", 2),
    (["profile", "use", "quickstart", "--params", "taken"], "--params", "params.yaml", 2),
    (["data", "validate", "--report", "taken"], "--report", "out.json", 1),
    (["check", "A claim.", "--llm", "scripted:s.json", "--trace", "taken"], "--trace", "out.json", 1),
    (["reward", "audit", "--out", "taken"], "--out", "out.json", 1),
    (["report", "pr", "--base", "main", "--out", "taken"], "--out", "out.json", 1),
])
def test_every_output_file_option_refuses_a_folder_in_the_same_words(workdir, args, option, example, code):
    """One rule, one statement (io.output_file_problem, through outputs.claim_file): each command names its own
    option, the sentence is the same, the folder stays."""
    (workdir / "taken").mkdir()
    (workdir / "taken" / "keep.txt").write_text("mine\n")
    r = runner.invoke(app, args)
    line = one_error_line(r)
    assert r.exit_code == code
    assert line == f"error: {option} taken: {FOLDER.format(Path('taken') / example)}."
    assert (workdir / "taken" / "keep.txt").read_text() == "mine\n"
    with pytest.raises(InputError) as e, atomic_path(workdir / "taken"):  # the same words when a write gets there
        pass
    assert str(e.value) == f"{workdir / 'taken'}: {FOLDER.format(workdir / 'taken' / 'out.json')}."


def test_a_batch_into_a_file_is_refused_as_the_cli_refuses_it(tmp_path):
    from biocheck.agent.run import run_batch

    (tmp_path / "out").write_text("keep me\n")
    with pytest.raises(InputError, match=r"^--out .*out: is a file, not a folder; give a folder"):
        run_batch(None, [], tmp_path / "out")
    assert (tmp_path / "out").read_text() == "keep me\n"


def test_validate_report_given_a_folder(workdir):
    (workdir / "reports").mkdir()
    one_error_line(runner.invoke(app, ["data", "validate", "--report", "reports"]), "--report", "is a folder")


def test_profile_use_given_a_folder_as_params(workdir):
    (workdir / "conf").mkdir()
    one_error_line(runner.invoke(app, ["profile", "use", "quickstart", "--params", "conf"]), "--params conf",
                   "is a folder")
    assert list((workdir / "conf").iterdir()) == []


def test_profile_use_keeps_edits_that_are_in_no_profile(workdir):
    edited = (workdir / "params.yaml").read_text()  # the workdir's params point at the test data: an edit
    one_error_line(runner.invoke(app, ["profile", "use", "paper"]), "in no profile", "--force")
    assert (workdir / "params.yaml").read_text() == edited
    assert runner.invoke(app, ["profile", "use", "paper", "--force"]).exit_code == 0
    assert (workdir / "params.yaml").read_text() == render(workdir / "profiles" / "paper.yaml")
    r = runner.invoke(app, ["profile", "use", "smol"])  # a profile's own text is no edit
    assert r.exit_code == 0, r.output


# --- bounds checked when params load ------------------------------------------------------------------------

def edited_params(workdir: Path, section: str, key: str, value) -> None:
    params = yaml.safe_load((workdir / "params.yaml").read_text())
    target = params.setdefault(section, {})
    *parents, last = key.split(".")
    for k in parents:
        target = target.setdefault(k, {})
    target[last] = value
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))


@pytest.mark.parametrize("key, value, said", [
    ("sft.epochs", -1, "sft.epochs must be >= 1, not -1"),
    ("max_steps", -5, "max_steps must be >= 1, not -5"),
    ("max_steps", 0, "max_steps must be >= 1, not 0"),
    ("num_generations", 0, "num_generations must be >= 2"),
    ("sft.max_length", 0, "sft.max_length must be >= 1"),
    ("sft.epochs", "3", "sft.epochs must be an int"),
    ("sft.epoch", 3, "unknown key(s) sft.epoch"),
])
def test_sft_refuses_a_bad_count_before_anything_is_replaced(workdir, key, value, said):
    edited_params(workdir, "train", key, value)
    sft = workdir / "models" / "sft"
    sft.mkdir(parents=True)
    (sft / "model.safetensors").write_bytes(b"trained weights")
    one_error_line(runner.invoke(app, ["sft"]), "section 'train'", said)
    assert (sft / "model.safetensors").read_bytes() == b"trained weights"


@pytest.mark.parametrize("key, value, said", [
    ("tiny.vocab_size", 0, "tiny.vocab_size must be >= 1, not 0"),
    ("tiny.vocab_size", 100, "tiny.vocab_size=100: needs at least 512"),
    ("tiny.num_key_value_heads", 0, "tiny.num_key_value_heads must be >= 1"),
    ("tiny.seed", 3, "set model.seed instead"),
])
def test_model_init_refuses_bad_tiny_sizes(workdir, key, value, said):
    edited_params(workdir, "model", key, value)
    one_error_line(runner.invoke(app, ["model", "init"]), "section 'model'", said)
    assert not (workdir / "models").exists()


@pytest.mark.parametrize("key, value, said", [("max_attempts", 0, "max_attempts must be >= 1, not 0"),
                                              ("backoff_s", -1.0, "backoff_s must be >= 0, not -1.0"),
                                              ("timeout_s", 0, "timeout_s must be > 0, not 0")])
def test_fetch_refuses_counts_and_waits_that_cannot_work(workdir, key, value, said):
    edited_params(workdir, "fetch", key, value)
    one_error_line(runner.invoke(app, ["data", "fetch"]), said)
    assert not (workdir / "data" / "raw").exists()


def test_a_section_given_twice_is_an_error(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("train:\n  max_steps: 30\nmodel:\n  base: tiny\ntrain:\n  max_steps: 2\n")
    with pytest.raises(InputError, match=r"line 5.*key 'train' appears twice \(first on line 1\)"):
        load_params(path)
    path.write_text("train:\n  max_steps: 30\n  max_steps: 2\n")  # inside a section too
    with pytest.raises(InputError, match="key 'max_steps' appears twice"):
        load_params(path)


def test_every_profile_is_within_its_bounds():
    from tests.helpers.params import all_stages, stage_inputs

    for profile in names(REPO / "profiles").values():  # base.yaml is none: its optional keys show the code's defaults
        params = load_params(profile)
        for stage in all_stages():
            stage_inputs(params, stage)  # raises InputError naming the key when a bound is broken


def test_profile_use_writes_the_profile_verbatim_whatever_the_secrets(workdir, monkeypatch):
    """params.yaml is input: redacting it by value ("biocheck" as a password) would rewrite its settings."""
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "biocheck")
    assert runner.invoke(app, ["profile", "use", "smol", "--force"]).exit_code == 0
    assert (workdir / "params.yaml").read_text() == render(workdir / "profiles" / "smol.yaml")
    assert runner.invoke(app, ["profile", "use", "quickstart"]).exit_code == 0  # a profile's text: no --force


@pytest.mark.parametrize("section, key", [("select", "out_dir"), ("data", "out_dir"), ("train", "metrics_path")])
def test_an_empty_path_is_refused_not_taken_as_the_current_folder(workdir, section, key):
    """Found by `make fuzz`: select.out_dir "" became Path("."), and deriving the outcome-only path from it
    raised a ValueError traceback; as an output folder it would name the project itself."""
    from biocheck.pipeline import stage_inputs

    edited_params(workdir, section, key, "")
    with pytest.raises(InputError, match=rf"{section}\.{key} must be a non-empty path"):
        for stage in ("prepare", "select@outcome_only", "train@eg_grpo"):
            stage_inputs(load_params(workdir / "params.yaml"), stage)


def _special(tmp_path: Path, kind: str) -> Path:
    """A FIFO, a socket, or a link to a character device (/dev/null): nothing an output file may replace."""
    path = tmp_path / f"out-{kind}.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    else:
        path.symlink_to("/dev/null")
    return path


@pytest.mark.parametrize("kind, said", [("fifo", "is a named pipe (FIFO)"), ("socket", "is a socket"),
                                        ("device", "is a character device")])
def test_an_output_file_never_replaces_a_device_fifo_or_socket(tmp_path, kind, said):
    path = _special(tmp_path, kind)
    before = os.lstat(path)
    with pytest.raises(InputError, match=re.escape(f"--report {path}: {said}, not a regular file")):
        claim_file(path, "--report")
    ran = []
    with pytest.raises(InputError, match=re.escape(said)), atomic_path(path):
        ran.append(1)
    after = os.lstat(path)
    assert ran == [] and (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)  # still what it was


def test_an_output_under_a_file_or_an_unwritable_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="afile is not a folder"):
        claim_file(tmp_path / "afile" / "sub" / "out.json", "--out")
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder: the permission case cannot be made here")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(InputError, match=re.escape(f"cannot write in {locked}")):
            claim_file(locked / "out.json", "--out")
    finally:
        locked.chmod(0o700)


def test_validate_report_and_check_trace_given_a_fifo_are_one_line_before_any_work(workdir):
    fifo = _special(workdir, "fifo")
    one_error_line(runner.invoke(app, ["data", "validate", "--report", str(fifo)]), "--report", "named pipe (FIFO)")
    one_error_line(runner.invoke(app, ["check", "Vitamin D prevents fractures.", "--trace", str(fifo)]),
                   "--trace", "named pipe (FIFO)")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_report_pr_out_given_a_device_is_one_line_and_the_device_stays(workdir):
    dev = _special(workdir, "device")
    one_error_line(runner.invoke(app, ["report", "pr", "--base", "main", "--out", str(dev)]),
                   "--out", "character device")
    assert dev.is_symlink() and os.readlink(dev) == "/dev/null"


def test_reward_audit_out_given_a_folder_or_a_fifo_is_one_line_before_the_judge_loads(workdir):
    (workdir / "taken").mkdir()
    one_error_line(runner.invoke(app, ["reward", "audit", "--out", "taken"]), "--out taken", "is a folder")
    fifo = _special(workdir, "fifo")
    one_error_line(runner.invoke(app, ["reward", "audit", "--out", str(fifo)]), "--out", "named pipe (FIFO)")


def test_evaluate_out_given_a_file_or_a_fifo_is_one_line_before_any_work(workdir):
    (workdir / "afile").write_text("keep me\n")
    one_error_line(runner.invoke(app, ["evaluate", "--out", "afile"]), "--out afile", "is a file, not a folder")
    assert (workdir / "afile").read_text() == "keep me\n"
    fifo = _special(workdir, "fifo")
    one_error_line(runner.invoke(app, ["evaluate", "--out", str(fifo)]), "--out", "named pipe (FIFO), not a folder")


def test_check_claims_out_under_a_file_is_one_line_before_any_work(workdir):
    (workdir / "afile").write_text("x")
    (workdir / "claims.jsonl").write_text('{"id": "1", "claim": "Vitamin D prevents fractures."}\n')
    one_error_line(runner.invoke(app, ["check", "--claims", "claims.jsonl", "--out", "afile/traces"]),
                   "--out afile/traces", "afile is not a folder")


def test_an_output_folder_that_cannot_be_made_is_refused(tmp_path):
    from biocheck.outputs import claim_folder

    claim_folder(tmp_path / "new" / "deeper", "--out")  # missing folders are made later: fine
    claim_folder(tmp_path, "--out")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match="afile is not a folder"):
        claim_folder(tmp_path / "afile" / "out", "--out")
    with pytest.raises(InputError, match="is a socket, not a folder"):
        claim_folder(_special(tmp_path, "socket"), "--out")


# --- issue 50, item 8: parameters files that are no parameters, and profile use --------------------------

LONG = "a" * 300 + ".yaml"  # longer than a file name may be (255 bytes)


@pytest.mark.parametrize("content, said", [(b"", "the parameters file is empty"),
                                           (b"   \n\n", "the parameters file is empty"),
                                           (b"# all commented out\n", "holds no sections, only comments")])
def test_an_empty_params_file_is_one_line_not_the_codes_defaults(workdir, content, said):
    (workdir / "p.yaml").write_bytes(content)
    one_error_line(runner.invoke(app, ["search", "vitamin D", "--params", "p.yaml"]), "p.yaml", said)


def test_an_empty_section_is_one_line_not_the_codes_defaults(workdir):
    text = (workdir / "params.yaml").read_text()
    (workdir / "params.yaml").write_text(re.sub(r"(?ms)^agent:\n(?:[ #].*?\n|\n)*", "agent:\n", text))
    assert load_params(workdir / "params.yaml")["agent"] is None
    one_error_line(runner.invoke(app, ["check", "A claim."]), "params.yaml", "section 'agent' is empty")


def test_params_that_are_a_device_a_fifo_or_a_name_too_long_say_what_they_are(workdir):
    os.mkfifo(workdir / "fifo.yaml")
    for given, said in (("/dev/zero", "is a character device, not a parameters file"),
                        ("fifo.yaml", "is a named pipe (FIFO), not a parameters file"),
                        (LONG, "cannot open the parameters file (File name too long)")):
        one_error_line(runner.invoke(app, ["search", "vitamin D", "--params", given]), given, said)


def test_an_output_file_name_too_long_is_one_line(workdir):
    one_error_line(runner.invoke(app, ["check", "A claim.", "--trace", LONG]), "--trace", "File name too long")
    one_error_line(runner.invoke(app, ["profile", "use", "smol", "--params", LONG]), "--params",
                   "File name too long")


def test_profile_use_writes_params_readable_as_the_umask_allows_and_keeps_a_files_mode(workdir):
    """atomic_path's temporary file is 0600: params.yaml became private to its writer."""
    old = os.umask(0o022)
    try:
        assert runner.invoke(app, ["profile", "use", "smol", "--params", "new.yaml"]).exit_code == 0
        assert stat.S_IMODE(os.stat(workdir / "new.yaml").st_mode) == 0o644
        (workdir / "new.yaml").chmod(0o640)
        assert runner.invoke(app, ["profile", "use", "quickstart", "--params", "new.yaml"]).exit_code == 0
        assert stat.S_IMODE(os.stat(workdir / "new.yaml").st_mode) == 0o640
    finally:
        os.umask(old)


def test_profile_use_refuses_a_profile_whose_values_a_stage_refuses(workdir):
    profile = yaml.safe_load((workdir / "profiles" / "smol.yaml").read_text())
    profile["train"]["max_steps"] = -5
    (workdir / "profiles" / "broken.yaml").write_text(yaml.safe_dump(profile))
    before = (workdir / "params.yaml").read_bytes()
    one_error_line(runner.invoke(app, ["profile", "use", "broken", "--force"]), "broken.yaml",
                   "max_steps must be >= 1, not -5")
    assert (workdir / "params.yaml").read_bytes() == before


def test_profile_use_onto_an_immutable_file_is_one_line_before_any_work(workdir):
    params = workdir / "params.yaml"
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(params)]).returncode != 0:
        pytest.skip("no immutable attribute here (chattr needs root and a file system that has it)")
    try:
        before = params.read_bytes()
        one_error_line(runner.invoke(app, ["profile", "use", "smol", "--force"]), "--params params.yaml",
                       "immutable or append-only file")
        assert params.read_bytes() == before
        assert [p.name for p in workdir.iterdir() if p.name.startswith(".tmp-")] == []
    finally:
        subprocess.run(["chattr", "-i", str(params)], check=True)
