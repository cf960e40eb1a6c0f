"""The hashed locks (requirements/*.txt) agree with pyproject.toml, and every install path uses them."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import REPO

_spec = importlib.util.spec_from_file_location("biocheck_lock", REPO / "requirements" / "lock.py")
lock = importlib.util.module_from_spec(_spec)
sys.modules["biocheck_lock"] = lock
_spec.loader.exec_module(lock)

CPU = next(x for x in lock.LOCKS if x.name == "cpu")
STALE = "pyproject.toml changed since requirements/cpu.txt was generated: run `make lock`"


def edited(tmp_path: Path, src: Path, old: str, new: str) -> Path:
    """A copy of `src` with `old` replaced once (the test fails if `old` is gone from the real file)."""
    text = src.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{src.name} no longer contains {old!r}: update this test"
    out = tmp_path / src.name
    out.write_text(text.replace(old, new), encoding="utf-8")
    return out


@pytest.mark.parametrize("target", lock.LOCKS, ids=lambda t: t.name)
def test_lock_agrees_with_pyproject(target):
    assert lock.check(target) == []
    pins = lock.read_pins(target.path.read_text(encoding="utf-8"))
    assert len(pins) > 100 and all(p.hashes for p in pins.values())


def test_cpu_lock_pins_torch_cpu_build():
    pins = lock.read_pins(CPU.path.read_text(encoding="utf-8"))
    assert pins["torch"].version.endswith("+cpu")
    assert f"torch=={pins['torch'].version}" == lock.torch_cpu_pin()
    assert not any(name.startswith("nvidia-") for name in pins)  # no CUDA libraries dragged in


def test_editing_a_dependency_without_make_lock_is_reported(tmp_path):
    # Still satisfied by the pinned version: only the digest can notice.
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"pytest>=8"', '"pytest>=8.1"')
    assert lock.check(CPU, pyproject_path=pyproject) == [STALE]


def test_blanks_and_order_do_not_count(tmp_path):
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"pytest>=8", "pytest-timeout>=2.3"',
                       '"pytest-timeout >= 2.3",   "pytest >= 8"')
    assert lock.check(CPU, pyproject_path=pyproject) == []


def test_gpu_extra_is_covered_by_the_gpu_lock_only(tmp_path):
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"vllm>=0.10"', '"vllm>=0.11"')
    assert lock.check(CPU, pyproject_path=pyproject) == []
    gpu = next(x for x in lock.LOCKS if x.name == "gpu")
    assert lock.check(gpu, pyproject_path=pyproject) == [STALE.replace("cpu.txt", "gpu.txt")]


def test_range_the_pin_does_not_satisfy_is_reported(tmp_path):
    pinned = lock.read_pins(CPU.path.read_text(encoding="utf-8"))["pandas"].version
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"pandas>=2.1"', '"pandas>=99"')
    problems = lock.check(CPU, pyproject_path=pyproject)
    assert STALE in problems
    assert f"requirements/cpu.txt pins pandas=={pinned}, outside 'pandas>=99' (pyproject [dependencies]): run `make lock`" in problems


def test_new_dependency_without_pin_is_reported(tmp_path):
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"tqdm>=4.66",', '"tqdm>=4.66", "left-pad-nowhere>=1",')
    problems = lock.check(CPU, pyproject_path=pyproject)
    assert "requirements/cpu.txt has no pin for 'left-pad-nowhere>=1' (pyproject [dependencies]): run `make lock`" in problems


def test_dependency_for_another_platform_needs_no_pin(tmp_path):
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"tqdm>=4.66",',
                       '"tqdm>=4.66", "pywin32>=300; sys_platform == \'win32\'",')
    assert lock.check(CPU, pyproject_path=pyproject) == [STALE]


def test_dropped_dependency_left_in_the_lock_is_reported(tmp_path):
    pyproject = edited(tmp_path, REPO / "pyproject.toml", '"tantivy>=0.27,<0.28",', "")
    problems = lock.check(CPU, pyproject_path=pyproject)
    assert "requirements/cpu.txt pins tantivy for pyproject.toml, which no longer asks for it: run `make lock`" in problems


def test_pin_without_hash_is_reported(tmp_path):
    text = CPU.path.read_text(encoding="utf-8")
    six = lock.read_pins(text)["six"]
    for h in six.hashes:  # drop the hash lines, keep the pin
        text = text.replace(f" \\\n    --hash={h}", "")
    stripped = tmp_path / "cpu.txt"
    stripped.write_text(text, encoding="utf-8")
    assert lock.read_pins(text)["six"].hashes == []
    assert lock.check(CPU, lock_path=stripped) == [f"requirements/cpu.txt pins six=={six.version} without a --hash: run `make lock`"]


def test_torch_other_than_cpu_in_is_reported(tmp_path):
    version = lock.torch_cpu_pin().partition("==")[2]
    stale = edited(tmp_path, CPU.path, f"\ntorch=={version} ", "\ntorch==2.4.0+cpu ")
    assert lock.check(CPU, lock_path=stale) == [
        f"requirements/cpu.txt pins torch==2.4.0+cpu, requirements/cpu.in says torch=={version}: run `make lock`"]


def test_missing_lock_is_reported(tmp_path):
    assert lock.check(CPU, lock_path=tmp_path / "cpu.txt") == ["requirements/cpu.txt is missing: run `make lock`"]


def test_torch_hash_matches_the_local_wheel():
    """Where pip has the CPU wheel on disk (its find-links), the lock's hash is that file's."""
    version = lock.torch_cpu_pin().partition("==")[2]
    wheels = [w for d in lock.pip_find_links() if Path(d).is_dir() for w in Path(d).glob(f"torch-{version}-cp311-*x86_64.whl")]
    if not wheels:
        pytest.skip("no local torch CPU wheel in pip's find-links")
    digest = hashlib.sha256()
    with wheels[0].open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    assert f"sha256:{digest.hexdigest()}" in lock.read_pins(CPU.path.read_text(encoding="utf-8"))["torch"].hashes


def test_every_install_path_uses_the_lock():
    recipe = subprocess.run(["make", "-n", "-B", "setup", "VENV=/tmp/biocheck-make-n"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    assert "--require-hashes" in recipe and "-r requirements/cpu.txt" in recipe
    # pip itself (pinned, hashed) comes before the lock: an older pip cannot install it
    assert recipe.index("-r requirements/pip.txt") < recipe.index("-r requirements/cpu.txt")
    assert "--no-deps -e ." in recipe
    assert "make setup" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "run: make setup" in (REPO / ".github" / "workflows" / "ci.yml").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "--require-hashes" in readme and "-r requirements/cpu.txt" in readme and "--no-deps -e ." in readme
    assert readme.index("-r requirements/pip.txt") < readme.index("-r requirements/cpu.txt")
