"""The local index's directory on disk: an integrity check, the staging folders of builds, and segment names.

Integrity: tantivy ends every segment file with a footer that holds a CRC32 of the file's body,
but does not verify it when opening, and opens some components (positions) only when a search
needs them. A damaged or missing file then surfaces mid-search as a wrong answer, an error, or a
Rust panic. `check_files` first makes sure every file `meta.json` implies is there (a stat per
file), then reads each segment file once and compares (about a second per GB, once per process),
so damage is reported when the index is opened.

Staging: a build writes into `.<name>.building-<pid>` beside the index and holds an flock on
`.<name>.building-<pid>.lock` while it runs. A killed build leaves both behind; the next build
removes every staging folder whose lock is free (or, with no lock file, whose pid is not
alive), and never one that a running build holds.

Names: a build renames tantivy's randomly named segments after what the index holds (`name_segments`), so
the same articles give the same files: the index is a DVC output.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import struct
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

FOOTER_MAGIC = 1337  # tantivy's footer: <json {"version": ..., "crc": ...}> <u32 json length> <u32 magic>
SEGMENT_FILE = re.compile(r"^[0-9a-f]{32}\.")  # <segment uuid>.<component>[.<opstamp>.del]
TANTIVY_FILES = re.compile(r"^(?:[0-9a-f]{32}\..+|meta\.json|\.managed\.json|\.tantivy-.*\.lock)$")
_CHUNK = 1 << 20


class DamagedFile(ValueError):
    """A file of the index fails its check; the message names the file and what is wrong."""


SEGMENT_COMPONENTS = ("idx", "pos", "term", "store", "fast", "fieldnorm")  # what tantivy writes per segment


def check_files(path: Path, checksums: bool = True) -> None:
    """Raise DamagedFile for the first file the index needs that is missing or, with `checksums`, whose
    footer or checksum is wrong."""
    for name in expected_files(path):
        if not (path / name).is_file():
            raise DamagedFile(f"{name} is missing")
    if checksums:
        for file in sorted(path.iterdir()):
            if SEGMENT_FILE.match(file.name) and file.is_file():
                _check_file(file)


def expected_files(path: Path) -> list[str]:
    """meta.json and the files of every segment it lists (+ the deletions file of a segment with deletes)."""
    try:
        meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        names = ["meta.json"]
        for segment in meta["segments"]:
            sid = segment["segment_id"].replace("-", "")
            names += [f"{sid}.{component}" for component in SEGMENT_COMPONENTS]
            if segment.get("deletes"):
                names.append(f"{sid}.{segment['deletes']['opstamp']}.del")
    except FileNotFoundError:
        raise DamagedFile("meta.json is missing") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise DamagedFile("meta.json is unreadable (cut short or overwritten)") from None
    return names


def name_segments(path: Path, content_digest: str) -> int:
    """Give the segments of the closed index at `path` names made from `content_digest` (what it holds); return
    how many there are.

    tantivy names a segment by a random UUID and lists its files in `.managed.json` in hash-set order, so
    two builds of the same articles would differ in file names and bytes, and DVC would see a new index
    every time. The segments' own bytes do not hold their names: renaming the files and rewriting both
    lists is all it takes. Which documents land in which segment is the same from build to build only with
    one segment: several writer threads share the documents out as they come free, and one thread with more
    documents than its memory holds writes several segments that tantivy merges in the background, as timing
    allows (measured: 4 threads on 5,000 abstracts, 4 segments of other sizes each build).
    """
    meta_file, managed_file = path / "meta.json", path / ".managed.json"
    meta_text = meta_file.read_text(encoding="utf-8")
    managed = json.loads(managed_file.read_text(encoding="utf-8"))
    for i, segment in enumerate(json.loads(meta_text)["segments"]):
        old = uuid.UUID(segment["segment_id"])
        new = uuid.UUID(hashlib.sha256(f"{content_digest}:{i}".encode()).hexdigest()[:32])
        for file in path.glob(f"{old.hex}.*"):
            file.rename(path / (new.hex + file.name[len(old.hex):]))
        meta_text = meta_text.replace(f'"{old}"', f'"{new}"')
        managed = [new.hex + name[len(old.hex):] if name.startswith(old.hex) else name for name in managed]
    meta_file.write_text(meta_text, encoding="utf-8")
    managed_file.write_text(json.dumps(sorted(managed), separators=(",", ":")), encoding="utf-8")
    return len(json.loads(meta_text)["segments"])


def _check_file(file: Path) -> None:
    size = file.stat().st_size
    with file.open("rb") as f:
        if size < 8:
            raise DamagedFile(f"{file.name} is cut short ({size} bytes)")
        f.seek(size - 8)
        length, magic = struct.unpack("<II", f.read(8))
        if magic != FOOTER_MAGIC or length > size - 8:
            raise DamagedFile(f"{file.name} has no valid footer (cut short or overwritten)")
        body = size - 8 - length
        f.seek(body)
        try:
            expected = json.loads(f.read(length))["crc"]
        except (ValueError, KeyError, TypeError):
            raise DamagedFile(f"{file.name} has an unreadable footer") from None
        f.seek(0)
        crc, left = 0, body
        while left > 0:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    if crc != expected:
        raise DamagedFile(f"{file.name} fails its checksum (overwritten or corrupted)")


def looks_like_index(path: Path) -> bool:
    """Every entry is a file named as tantivy or a build names them: safe to replace as a whole."""
    return all(entry.is_file() and (TANTIVY_FILES.match(entry.name) or entry.name == "biocheck_index.json")
               for entry in path.iterdir())


# -- staging folders ------------------------------------------------------------------------------


@contextmanager
def staging_dir(path: Path) -> Iterator[Path]:
    """A new, empty, locked staging folder for a build of `path`; removed on exit unless moved away."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(path)
    staging = path.with_name(f".{path.name}.building-{os.getpid()}")
    lock = _lock_file(staging)
    fd = _hold_lock(lock)
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        lock.unlink(missing_ok=True)
        if fd is not None:
            os.close(fd)  # releases the flock


def remove_stale_staging(path: Path) -> None:
    """Remove what killed builds of `path` left: staging folders (and lock files) no build holds."""
    if not path.parent.is_dir():
        return
    prefix = f".{path.name}.building-"
    for entry in path.parent.iterdir():
        if not entry.name.startswith(prefix) or entry.name.endswith(".lock"):
            continue
        pid = entry.name.removeprefix(prefix)
        if pid == str(os.getpid()) or not _is_stale(entry, int(pid) if pid.isdigit() else None):
            continue
        log.info("Removing %s, left behind by an index build that is no longer running", entry)
        shutil.rmtree(entry, ignore_errors=True)
        _lock_file(entry).unlink(missing_ok=True)
    for lock in path.parent.glob(f"{prefix}*.lock"):  # a build killed before it made its folder
        if not lock.with_suffix("").exists() and _lock_is_free(lock):
            lock.unlink(missing_ok=True)


def _lock_file(staging: Path) -> Path:
    return staging.with_name(staging.name + ".lock")


def _is_stale(staging: Path, pid: int | None) -> bool:
    lock = _lock_file(staging)
    if lock.exists():
        free = _lock_is_free(lock)
        if free is not None:
            return free  # the lock knows, whatever became of the pid (pids are reused)
    return pid is not None and not _pid_alive(pid)


def _hold_lock(lock: Path) -> int | None:
    try:
        import fcntl
    except ImportError:  # not POSIX: stale folders are then recognised by their pid only
        return None
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _lock_is_free(lock: Path) -> bool | None:
    """True when no process holds the lock, False when one does, None when it cannot be told."""
    try:
        import fcntl
    except ImportError:
        return None
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return None
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if os.name != "posix":
        return True  # cannot tell safely (os.kill(pid, 0) would signal on Windows): keep the folder
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
