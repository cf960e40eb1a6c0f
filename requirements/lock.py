"""The hashed lock files: `make lock` writes them from pyproject.toml, tests/project/test_lock.py checks them.

    requirements/cpu.txt   runtime + dev, PyTorch's CPU build: the README, `make setup`, CI, cpu workers
    requirements/gpu.txt   runtime + gpu + dev, torch as vLLM pins it (PyPI's CUDA build): gpu workers

Both are for CPython 3.11 on Linux x86_64 (glibc >= 2.28), the platform CI runs on. uv resolves for
that platform without installing anything, so the GPU lock is made on a CPU-only machine too. Each
lock starts with a digest of the pyproject dependency lists it was made from: editing those lists
without `make lock` fails the check. Usage (from the repository root, with the dev extra installed):

    python requirements/lock.py            # refresh both, keeping every pin pyproject still allows
    python requirements/lock.py --upgrade  # move every pin to the newest allowed release
    python requirements/lock.py --check    # exit 1 with one line per disagreement
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-manylinux_2_28"  # torch's CPU wheel needs glibc 2.28
# Markers as pip evaluates them on the locked platform (uv drops the lines that do not apply there).
TARGET_ENV = {
    "python_version": PYTHON_VERSION, "python_full_version": f"{PYTHON_VERSION}.0", "sys_platform": "linux",
    "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
    "implementation_name": "cpython", "platform_python_implementation": "CPython",
}
# PyPI's Linux torch is the CUDA build; the CPU build (`+cpu`) lives on PyTorch's own index.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
DIGEST_KEY = "# pyproject-digest: sha256:"
VIA_PYPROJECT = "biocheck (pyproject.toml)"  # uv's annotation of a pin that pyproject asks for directly


@dataclass(frozen=True)
class Lock:
    name: str
    extras: tuple[str, ...]
    inputs: tuple[str, ...] = ()  # requirement files beside pyproject.toml, relative to ROOT

    @property
    def path(self) -> Path:
        return ROOT / "requirements" / f"{self.name}.txt"

    @property
    def rel(self) -> str:
        return f"requirements/{self.name}.txt"


LOCKS = (
    Lock("cpu", ("dev",), ("requirements/cpu.in",)),
    Lock("gpu", ("gpu", "dev")),
)


@dataclass
class Pin:
    name: str
    version: str
    hashes: list[str]
    via: list[str]


# --- reading -------------------------------------------------------------------------------------

def load_pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def declared(pyproject: dict, extras: tuple[str, ...]) -> dict[str, list[str]]:
    """The dependency lists a lock covers: runtime first, then each extra, as written in pyproject."""
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    return {"dependencies": list(project.get("dependencies", [])), **{e: list(optional.get(e, [])) for e in extras}}


def digest(pyproject: dict, extras: tuple[str, ...]) -> str:
    """Hash of the covered lists; blanks and order don't count, any other edit does."""
    lists = {k: sorted("".join(r.split()) for r in v) for k, v in declared(pyproject, extras).items()}
    return hashlib.sha256(json.dumps(lists, sort_keys=True).encode()).hexdigest()


def read_pins(text: str) -> dict[str, Pin]:
    """Parse uv's `name==version \\ --hash=... # via ...` blocks, keyed by canonical name."""
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    for raw in text.splitlines():
        line = raw.strip().rstrip("\\").strip()
        if not line:
            continue
        if not raw[0].isspace() and not line.startswith(("#", "-")):  # `-` : pip options, never pins here
            name, _, version = line.split(";")[0].strip().partition("==")
            current = Pin(canonicalize_name(name), version.strip(), [], [])
            pins[current.name] = current
        elif current is not None and line.startswith("--hash="):
            current.hashes.append(line.removeprefix("--hash="))
        elif current is not None and raw[0].isspace() and line.startswith("#"):
            via = line.lstrip("#").strip()  # `# via a` or `# via` then one `#   b` per line
            if via == "via" or via.startswith("via "):
                via = via[3:].strip()
            if via:
                current.via.append(via)
    return pins


def torch_cpu_pin() -> str:
    """The exact CPU torch requirement, from requirements/cpu.in (its one home)."""
    lines = (ROOT / "requirements" / "cpu.in").read_text(encoding="utf-8").splitlines()
    return next(x.split("#")[0].strip() for x in lines if x.strip().startswith("torch=="))


# --- checking ------------------------------------------------------------------------------------

def check(lock: Lock, pyproject_path: Path | None = None, lock_path: Path | None = None) -> list[str]:
    """Every way `lock` disagrees with pyproject.toml, one line each (empty: they agree)."""
    pyproject_path = pyproject_path or ROOT / "pyproject.toml"
    lock_path = lock_path or lock.path
    if not lock_path.exists():
        return [f"{lock.rel} is missing: run `make lock`"]
    text = lock_path.read_text(encoding="utf-8")
    pyproject = load_pyproject(pyproject_path)
    problems = []
    stored = next((x.removeprefix(DIGEST_KEY).split()[0] for x in text.splitlines() if x.startswith(DIGEST_KEY)), None)
    if stored != digest(pyproject, lock.extras):
        problems.append(f"pyproject.toml changed since {lock.rel} was generated: run `make lock`")

    pins = read_pins(text)
    wanted: set[str] = set()
    for where, reqs in declared(pyproject, lock.extras).items():
        for spec in reqs:
            req = Requirement(spec)
            if req.marker and not req.marker.evaluate({**TARGET_ENV, "extra": ""}):
                continue  # not installed on the locked platform
            name = canonicalize_name(req.name)
            wanted.add(name)
            pin = pins.get(name)
            if pin is None:
                problems.append(f"{lock.rel} has no pin for {spec!r} (pyproject [{where}]): run `make lock`")
            elif not req.specifier.contains(Version(pin.version), prereleases=True):
                problems.append(f"{lock.rel} pins {name}=={pin.version}, outside {spec!r} (pyproject [{where}]): run `make lock`")
    for pin in pins.values():
        if not pin.hashes:
            problems.append(f"{lock.rel} pins {pin.name}=={pin.version} without a --hash: run `make lock`")
        if VIA_PYPROJECT in pin.via and pin.name not in wanted:
            problems.append(f"{lock.rel} pins {pin.name} for pyproject.toml, which no longer asks for it: run `make lock`")
    if lock.inputs:  # the CPU build of torch, exactly as requirements/cpu.in says
        want = torch_cpu_pin().partition("==")[2]
        have = pins["torch"].version if "torch" in pins else "<none>"
        if have != want:
            problems.append(f"{lock.rel} pins torch=={have}, requirements/cpu.in says torch=={want}: run `make lock`")
    return problems


# --- writing -------------------------------------------------------------------------------------

def pip_find_links() -> list[str]:
    """pip's configured find-links (uv reads no pip configuration)."""
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                         capture_output=True, text=True).stdout
    return [*os.environ.get("PIP_FIND_LINKS", "").split(), *out.split()]


def torch_sources() -> list[str]:
    """Where uv finds the CPU torch wheel: TORCH_FIND_LINKS if set; else a local folder in pip's
    find-links that holds it (the file pip installs here); else PyTorch's CPU index page for torch.
    The x86_64 CPython 3.11 file is the same in each, so the lock's hash installs from any of them."""
    if os.environ.get("TORCH_FIND_LINKS"):
        return os.environ["TORCH_FIND_LINKS"].split()
    version = torch_cpu_pin().partition("==")[2]
    local = [d for d in dict.fromkeys(pip_find_links()) if Path(d).is_dir() and any(Path(d).glob(f"torch-{version}-*.whl"))]
    return local or [f"{TORCH_CPU_INDEX}/torch/"]


def header(lock: Lock, pyproject: dict) -> str:
    extras = " + ".join(lock.extras)
    return "\n".join([
        f"# {lock.rel}: BioCheck's locked environment, runtime + {extras}, for CPython {PYTHON_VERSION} on Linux x86_64.",
        f"# Install: pip install --require-hashes -r requirements/pip.txt && pip install --require-hashes -r {lock.rel} && pip install --no-deps -e .  (README, Install)",
        "# Regenerate after editing pyproject.toml: make lock  (requirements/lock.py runs uv pip compile --generate-hashes)",
        f"{DIGEST_KEY}{digest(pyproject, lock.extras)}  (its dependency lists this lock was made from)",
        "",
    ])


def write(lock: Lock, uv: str, upgrade: bool = False) -> None:
    """Compile `lock` with uv; the old file (if any) seeds uv's preferences, so pins only move when needed."""
    from biocheck.io import atomic_path  # the project is installed wherever `make lock` runs

    pyproject = load_pyproject(ROOT / "pyproject.toml")
    cmd = [uv, "pip", "compile", "pyproject.toml", *lock.inputs, *(f"--extra={e}" for e in lock.extras),
           "--generate-hashes", "--python-version", PYTHON_VERSION, "--python-platform", PLATFORM,
           "--custom-compile-command", "make lock", "--quiet"]
    if lock.inputs:
        cmd += [f"--find-links={s}" for s in torch_sources()]
    if upgrade:
        cmd.append("--upgrade")
    with atomic_path(lock.path) as tmp:
        if lock.path.exists():
            shutil.copyfile(lock.path, tmp)
        subprocess.run([*cmd, "--output-file", str(tmp)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        body = tmp.read_text(encoding="utf-8")
        body = body[body.index("# This file was autogenerated by uv"):]  # drop the previous header
        tmp.write_text(header(lock, pyproject) + body, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report disagreements with pyproject.toml")
    parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed release")
    parser.add_argument("--only", choices=[lock.name for lock in LOCKS], help="one lock instead of all")
    args = parser.parse_args(argv)
    locks = [lock for lock in LOCKS if args.only in (None, lock.name)]
    if not args.check:
        uv = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
        if uv is None:
            print("lock: uv not found: install the dev extra (make setup) or `pip install uv`", file=sys.stderr)
            return 1
        for lock in locks:
            try:
                write(lock, uv, upgrade=args.upgrade)
            except subprocess.CalledProcessError:
                print(f"lock: uv could not resolve {lock.rel} (its message is above); the old file is unchanged", file=sys.stderr)
                return 1
            print(f"wrote {lock.rel}")
    problems = [p for lock in locks for p in check(lock)]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
