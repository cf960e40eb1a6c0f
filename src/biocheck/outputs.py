"""Claiming an output location: a command replaces only what it wrote itself.

Every folder a stage writes as a whole (prepared data, a model, a judge, the selected checkpoint, the
gallery) goes through `output_dir`: the new result is built in a temporary sibling and swapped in
atomically (`biocheck.io.atomic_dir`), and the folder it replaces must be empty or carry this command's
mark (`MARK_FILE`, written into every such output). A wrong `--out-dir` (an evidence store, a home
folder, another stage's output) is refused with one line, never wiped.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from biocheck.io import InputError, atomic_dir, output_dir_problem, output_file_problem

MARK_FILE = ".biocheck-output"  # one line: the command whose output this folder is

log = logging.getLogger(__name__)


def _mark(folder: Path) -> str | None:
    try:
        return (folder / MARK_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None


def claim_dir(dest: Path | str, owner: str, option: str, legacy: tuple[str, ...] = ()) -> None:
    """InputError unless `owner` (e.g. "biocheck data prepare") may replace `dest` as a whole.

    Allowed: nothing there, an empty folder, or a folder marked as `owner`'s output. `legacy` names files
    that together identify an unmarked output written by an earlier BioCheck version. `option` is how the
    user chose the path ("--out-dir / data.out_dir"), so the message says what to change.
    """
    dest = Path(dest)
    if not dest.exists() and not dest.is_symlink():
        return
    if dest.is_symlink() or not dest.is_dir():
        what = "a link" if dest.is_symlink() else "a file"
        raise InputError(f"{option} {dest}: is {what}, not a folder {owner} wrote; refusing to replace it. "
                         "Give another path (a new or empty folder).")
    mark = _mark(dest)
    if mark == owner:
        return
    try:
        empty = not any(dest.iterdir())
    except OSError as e:
        raise InputError(f"{option} {dest}: cannot read the folder ({e.strerror or e}).") from None
    if empty or (mark is None and legacy and all((dest / name).is_file() for name in legacy)):
        return
    held = f"the output of `{mark}`" if mark else "files that it did not write"
    raise InputError(f"{option} {dest}: holds {held}; {owner} replaces only its own output, so it refuses. "
                     "Give another path (a new or empty folder), or move that folder away yourself.")


@contextlib.contextmanager
def output_dir(dest: Path | str, owner: str, option: str, legacy: tuple[str, ...] = ()) -> Iterator[Path]:
    """`atomic_dir(dest)` after `claim_dir`: yields an empty temporary folder that, marked as `owner`'s,
    replaces `dest` on success (on error `dest` is left exactly as it was)."""
    claim_dir(dest, owner, option, legacy)
    with atomic_dir(dest) as tmp:
        yield tmp
        (tmp / MARK_FILE).write_text(owner + "\n", encoding="utf-8")


def claim_file(dest: Path | str, option: str, example: str = "out.json") -> None:
    """InputError, before any work, naming `option`, when `dest` cannot take an output file: a folder (replacing
    it would delete the folder; `example`: a file name in it to suggest), a device, FIFO or socket, or a place
    that cannot be written (`io.output_file_problem`)."""
    dest = Path(dest)
    if problem := output_file_problem(dest, example):
        raise InputError(f"{option} {dest}: {problem}.")


def claim_folder(dest: Path | str, option: str) -> None:
    """InputError, before any work, when `dest`, an output folder, is a file, a device, FIFO or socket, or
    cannot be written (read-only file system, no permission)."""
    if problem := output_dir_problem(dest):
        raise InputError(f"{option} {dest}: {problem}.")


@contextlib.contextmanager
def one_writer(folder: Path | str, option: str, writer: str = "another run", instead: str = "") -> Iterator[None]:
    """Hold an exclusive lock on `folder` itself (made when missing) while writing into it: a second writer
    started meanwhile fails at once with one line (InputError: `option` names where the folder came from,
    `writer` who holds it, `instead` another way out) instead of mixing its outputs with the first one's.
    Released when the process ends, even killed. A file system without locks (some NFS, FUSE): runs unguarded,
    with a warning."""
    import fcntl

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"{option} {folder}: {writer} is writing into this folder now; wait for it to "
                             f"finish{f', or {instead}' if instead else ''}.") from None
        except OSError as e:
            log.warning("%s %s cannot be locked (%s): do not start a second writer into it meanwhile", option,
                        folder, e.strerror or e)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock
