"""Atomic file output and strict JSONL input.

A stage either leaves its complete output or none: everything is written to a temporary sibling
and moved into place with `os.replace`, so a crash or a kill never leaves a half-written file
for the next stage (or DVC) to pick up.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from biocheck.errors import BioCheckError
from biocheck.secrets import json_redactor, redact, redact_json
from biocheck.terminal import inert, json_inert

TMP_PREFIX = ".tmp-"
# Linux's file attributes (linux/fs.h): the ioctl that reads them and the two that forbid replacing a file
FS_IOC_GETFLAGS, FS_IMMUTABLE_FL, FS_APPEND_FL = 0x80086601, 0x00000010, 0x00000020


class InputError(BioCheckError):
    """Bad input data: the message says what is wrong, where, and how to fix it."""


def disk_full(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is the device or quota running out of space: an OSError's errno, or
    the text a library wraps it in (safetensors: "I/O error: No space left on device (os error 28)")."""
    import errno

    seen: BaseException | None = exc
    for _ in range(8):  # the chain of causes, not unbounded
        if seen is None:
            return False
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "Disk quota exceeded" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def file_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is (None: it is one of those)."""
    for test, name in ((stat.S_ISFIFO, "named pipe (FIFO)"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) or stat.S_ISDIR(mode) else "special file"


def output_file_problem(dest: Path | str, example: str = "out.json") -> str | None:
    """Why an output file cannot be written at `dest` (None: it can), checked before any work: a folder (an
    output file never replaces one: the rename would delete it; `example` names a file in it for the fix),
    something else that is not a regular file (a device, a FIFO, a socket, or a link to one), or a nearest
    existing folder that cannot be written (read-only file system, no permission). The one statement of the
    rule: `atomic_path` asks it when writing, `outputs.claim_file` before any work, naming the option."""
    dest = Path(dest)
    try:
        mode = os.stat(dest).st_mode
    except OSError as e:  # nothing there (or a dangling link, which the rename replaces)
        if e.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # a name the system refuses (too long)
            return f"cannot be a file name here ({e.strerror or e}); give a shorter or other path"
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        return f"is a folder; an output file cannot replace it (give a file name, e.g. {dest / example})"
    kind = file_kind(mode) if mode is not None else None
    if kind:
        return f"is a {kind}, not a regular file; an output file must not replace it (give a file name)"
    if _immutable(dest):
        return ("is an immutable or append-only file (chattr +i / +a: see lsattr), which nothing can replace; "
                "give another path, or `chattr -i` it first")
    folder = dest.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a folder, so nothing can be written under it"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"cannot write in {folder} (read-only file system or no permission); give another path"
    return None


def _immutable(path: Path) -> bool:
    """Whether `path` is a regular file with Linux's immutable or append-only attribute (a rename onto it fails
    with EPERM, even for root); False wherever the attributes cannot be read."""
    try:
        import fcntl
        import struct

        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (ImportError, OSError):
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        flags = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
        return bool(flags & (FS_IMMUTABLE_FL | FS_APPEND_FL))
    except OSError:  # not Linux, or a file system without attributes
        return False
    finally:
        os.close(fd)


def umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc); else set and put back."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_dir_problem(dest: Path | str) -> str | None:
    """Why an output folder cannot be made or written at `dest` (None: it can): something there that is not a
    folder, or a nearest existing folder that cannot be written."""
    dest = Path(dest)
    try:
        mode = os.stat(dest).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISDIR(mode):
        return f"is a {file_kind(mode) or 'file'}, not a folder; give a folder (it is created when missing)"
    return output_file_problem(dest / "x") if mode is not None else output_file_problem(dest)


@contextlib.contextmanager
def atomic_path(dest: Path | str) -> Iterator[Path]:
    """Yield a temporary path next to `dest`; on success it replaces `dest`, on error it vanishes."""
    dest = Path(dest)
    if problem := output_file_problem(dest):  # a folder included: os.replace would fail after all the work
        raise InputError(f"{dest}: {problem}.")
    try:  # the file keeps its mode; a new one gets what the umask allows (mkstemp's 0600 would be private)
        mode = stat.S_IMODE(os.stat(dest).st_mode)
    except OSError:
        mode = 0o666 & ~umask()
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f"{TMP_PREFIX}{dest.name}.", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode)
        try:
            os.replace(tmp_path, dest)
        except PermissionError as e:  # made immutable meanwhile, or a sticky folder of another user
            raise InputError(f"{dest}: cannot be replaced ({e.strerror}); give another path.") from None
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(dest: Path | str) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces `dest` as a whole on success.

    On error the temporary directory is removed and `dest` is left exactly as it was.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{dest.name}.", dir=dest.parent))
    old = dest.parent / f"{TMP_PREFIX}{dest.name}.old-{os.getpid()}"
    try:
        yield tmp
        if dest.exists():
            os.replace(dest, old)  # two renames: the gap is a moment with no output, never a mixed one
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


def remove_stale_tmp(directory: Path | str) -> None:
    """Delete temporaries that a killed process could not clean up."""
    directory = Path(directory)
    if not directory.is_dir():
        return
    for p in directory.glob(f"{TMP_PREFIX}*"):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def write_text_atomic(dest: Path | str, text: str) -> None:
    """Write `text` (secrets blanked, escape sequences and control characters out: `terminal.inert`) to
    `dest` atomically."""
    with atomic_path(dest) as tmp:
        tmp.write_text(inert(redact(text), file=True), encoding="utf-8")


def json_digest(payload: Any) -> str:
    """16 hex digits of sha256 over `payload` as JSON with sorted keys (other values, e.g. paths, as str):
    the fingerprint of a run key, a system's settings, ..."""
    import hashlib

    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]


def write_json_atomic(dest: Path | str, obj: Any, indent: int = 2, sort_keys: bool = False) -> None:
    """Write `obj` as JSON to `dest` atomically, secrets blanked from its strings (numbers and the structure
    untouched: a short numeric key must not break the file); control characters escaped (`\u001b`)."""
    text = json_inert(json.dumps(redact_json(obj), indent=indent, sort_keys=sort_keys, ensure_ascii=False)) + "\n"
    with atomic_path(dest) as tmp:
        tmp.write_text(text, encoding="utf-8")


def dump_jsonl(path: Path, rows: Iterable[BaseModel | dict]) -> int:
    """Write rows as JSON lines, secrets blanked (not atomic by itself: call inside `atomic_path`/`atomic_dir`)."""
    n, clean = 0, json_redactor()
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            obj = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
            f.write(json_inert(json.dumps(clean(obj), ensure_ascii=False)) + "\n")
            n += 1
    return n


def parse_jsonl(data: bytes, where: str, fix: str = "") -> list[dict]:
    """Parse JSON lines strictly; every problem names the file (`where`) and line number, then `fix`
    (how to get a good file: re-fetch a download, re-prepare a prepared split; empty for a user's own file)."""

    def fail(message: str) -> InputError:
        return InputError(f"{message} {fix}" if fix else message)

    if not data.strip():
        raise fail(f"{where}: the file is empty.")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise fail(f"{where}: the file is UTF-16 (it starts with a UTF-16 byte-order mark); save it as UTF-8.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise fail(f"{where}, line {line}: bytes that are not UTF-8 ({data[e.start:e.start + 8]!r}); "
                   "the file is corrupt or in another encoding.") from None
    rows: list[dict] = []
    # "\n" only: splitlines() would also cut at U+2028 and other separators that are legal inside a JSON
    # string. After a final newline the last piece is empty, so only an unterminated last line is "cut short".
    lines = text.split("\n")
    for i, line in enumerate(lines, start=1):
        # A UTF-8 byte-order mark (some editors write one; two such files joined put one mid-file) is no data.
        line = line.removeprefix("\ufeff")
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            hint = " (the last line is cut short: was the file truncated?)" if i == len(lines) else ""
            raise fail(f"{where}, line {i}: invalid JSON{hint}: {e.msg} at column {e.colno}.") from None
        if not isinstance(obj, dict):
            raise fail(f"{where}, line {i}: expected a JSON object, got {type(obj).__name__}.")
        rows.append(obj)
    return rows


def read_jsonl(path: Path | str, fix: str = "") -> list[dict]:
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file.")
    return parse_jsonl(path.read_bytes(), str(path), fix)
