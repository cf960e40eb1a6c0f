"""`biocheck data fetch`: download the official SciFact and HealthFC releases into `data/raw/`.

With `BIOCHECK_DATA_MIRROR` set, the same files are copied from a local mirror instead
(`$BIOCHECK_DATA_MIRROR/scifact/data.tar.gz`, `$BIOCHECK_DATA_MIRROR/healthfc/Datensatz.csv`); a file the
mirror lacks is kept when data/raw already holds the copy its manifest records (with the origin recorded
then), and is an error otherwise, before anything is copied. Everything after opening the byte stream (progress, hashing, verification, atomic write, manifest)
is shared. A file is verified (it opens as the release it should be) before it takes its real name:
DVC caches whatever this stage leaves in data/raw, so a damaged file must never get there.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import tenacity
from tqdm.auto import tqdm

from biocheck.bounds import Count, NonNegativeFloat, Positive
from biocheck.data.sources import healthfc_frame, read_scifact_tar
from biocheck.errors import BioCheckError
from biocheck.io import InputError, atomic_path, remove_stale_tmp, write_json_atomic

log = logging.getLogger(__name__)

MIRROR_ENV = "BIOCHECK_DATA_MIRROR"
MANIFEST = "manifest.json"
CHUNK = 1 << 16


def check_scifact(path: Path, where: str) -> None:
    """A gzip tar whose members (the release's claims and corpus) all read to their end."""
    read_scifact_tar(path, where, fix="")


def check_healthfc(path: Path, where: str) -> None:
    """A UTF-8 CSV with HealthFC's required columns."""
    healthfc_frame(path, where, fix="")


@dataclass(frozen=True)
class Source:
    """One file of an official release: where it lives online, in a mirror, and under data/raw."""

    name: str
    url: str
    relpath: str  # both the mirror-relative and the data/raw-relative path
    # Raises InputError (naming `where`) unless the file at the path is this release file. No sha256
    # is pinned: "latest"/"main" may be re-published, and mirrors hold repacked copies.
    verify: Callable[[Path, str], None]


SOURCES: tuple[Source, ...] = (
    Source("scifact", "https://scifact.s3-us-west-2.amazonaws.com/release/latest/data.tar.gz", "scifact/data.tar.gz",
           check_scifact),
    Source("healthfc", "https://raw.githubusercontent.com/jvladika/HealthFC/main/Datensatz.csv", "healthfc/Datensatz.csv",
           check_healthfc),
)


@dataclass(frozen=True)
class Mirror:
    """A local mirror, with what the user set to choose it, so an error names that and how to undo it."""

    path: Path
    named: str  # "--mirror DIR" or "BIOCHECK_DATA_MIRROR=DIR"
    undo: str  # how to download instead


@dataclass
class FetchConfig:
    raw_dir: Path = Path("data/raw")
    sources: tuple[Source, ...] = SOURCES
    mirror: Path | None = None  # defaults to $BIOCHECK_DATA_MIRROR
    timeout_s: Positive = 30.0
    max_attempts: Count = 4
    backoff_s: NonNegativeFloat = 2.0  # first retry waits ~backoff_s, then doubles (with jitter)
    force: bool = False
    progress: bool = True
    extra_headers: dict[str, str] = field(default_factory=dict)

    def mirror_source(self) -> Mirror | None:
        """The mirror in use and how the user chose it (the option wins over the environment)."""
        if self.mirror is not None:
            return Mirror(Path(self.mirror), f"--mirror {self.mirror}", "leave out --mirror")
        env = os.environ.get(MIRROR_ENV, "").strip()
        return Mirror(Path(env), f"{MIRROR_ENV}={env}", f"unset {MIRROR_ENV}") if env else None


class FetchError(BioCheckError):
    """A file could not be obtained; the message names the URL/path and what to do."""


class _Retryable(Exception):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _open_http(url: str, cfg: FetchConfig) -> Iterator[tuple[Iterator[bytes], int | None]]:
    timeout = httpx.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 10.0))
    headers = {"User-Agent": "biocheck-data-fetch", **cfg.extra_headers}
    with httpx.Client(timeout=timeout, follow_redirects=True, headers=headers) as client:
        with client.stream("GET", url) as r:
            if r.status_code == 429 or r.status_code >= 500:
                raise _Retryable(f"HTTP {r.status_code}")
            if r.status_code != 200:
                raise FetchError(f"{url} answered HTTP {r.status_code}; the release may have moved.")
            length = r.headers.get("Content-Length")
            yield r.iter_bytes(CHUNK), int(length) if length and length.isdigit() else None


@contextlib.contextmanager
def _open_file(path: Path) -> Iterator[tuple[Iterator[bytes], int | None]]:
    with open(path, "rb") as f:
        yield iter(lambda: f.read(CHUNK), b""), path.stat().st_size


def _copy_stream(opener, dest: Path, src: Source, where: str, cfg: FetchConfig) -> tuple[str, int]:
    """Stream bytes into `dest` atomically while hashing, verify them; return (sha256, size)."""
    with opener as (chunks, total), atomic_path(dest) as tmp:
        h = hashlib.sha256()
        size = 0
        with open(tmp, "wb") as out, tqdm(
            total=total, unit="B", unit_scale=True, desc=src.name, disable=not cfg.progress, leave=False
        ) as bar:
            for chunk in chunks:
                out.write(chunk)
                h.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
        if total is not None and size != total:
            raise _Retryable(f"connection closed after {size} of {total} bytes")
        src.verify(tmp, where)  # raising here deletes the temporary: dest is never a bad file
    return h.hexdigest(), size


def _reason(e: BaseException) -> str:
    """What went wrong, for the log and the final error: a bad file's own message, else the exception."""
    if isinstance(e, InputError):
        return str(e)
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _download(src: Source, dest: Path, cfg: FetchConfig) -> tuple[str, int]:
    def before_sleep(state: tenacity.RetryCallState) -> None:
        log.warning("%s: attempt %d/%d failed (%s); retrying in %.1fs", src.url, state.attempt_number,
                    cfg.max_attempts, _reason(_outcome(state)), state.upcoming_sleep)

    # Timeouts, resets, 5xx and bad bytes are retried (a transfer cut short without a Content-Length
    # arrives as bad bytes); the first retry waits ~backoff_s, then the wait doubles, with jitter.
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(cfg.max_attempts),
        wait=_jittered(tenacity.wait_exponential(multiplier=cfg.backoff_s)),
        retry=tenacity.retry_if_exception_type((_Retryable, httpx.TransportError, InputError)),
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        # a new stream per attempt: a context manager opens once
        return retrying(lambda: _copy_stream(_open_http(src.url, cfg), dest, src, src.url, cfg))
    except InputError as e:
        raise FetchError(
            f"{e} Gave up after {cfg.max_attempts} attempts; {dest} was not written. The release may have "
            f"moved or changed: to use a good copy instead, set {MIRROR_ENV} to a folder holding {src.relpath}."
        ) from None
    except (_Retryable, httpx.TransportError) as e:
        raise FetchError(
            f"Could not download {src.name} from {src.url} after {cfg.max_attempts} attempts ({_reason(e)}). "
            f"If this machine is offline, set {MIRROR_ENV} to a folder holding {src.relpath} "
            f"(e.g. {MIRROR_ENV}=../shared/datasets) and run again."
        ) from None


def _outcome(state: tenacity.RetryCallState) -> BaseException:
    exc = state.outcome.exception() if state.outcome else None
    return exc if exc is not None else RuntimeError("no outcome")


def _jittered(wait: tenacity.wait.wait_base) -> Callable[[tenacity.RetryCallState], float]:
    """`wait` times a random factor in [0.75, 1.25]: downloads that failed together retry apart."""
    return lambda state: wait(state) * random.uniform(0.75, 1.25)


def _check_mirror(mirror: Mirror, cfg: FetchConfig, raw: Path, old: dict) -> set[str]:
    """Before anything is copied: every file is in the mirror or already fetched. Returns the names of the
    sources the mirror lacks whose copy in `raw` is kept: the file the manifest records (same sha256, it
    verifies), under the origin the manifest records for it (a mirror, or the URL it was downloaded from)."""
    holds = ", ".join(s.relpath for s in cfg.sources)
    if not mirror.path.is_dir():
        what = "is a file" if mirror.path.exists() else "does not exist"
        raise FetchError(f"{mirror.named}: {what}; a mirror is a folder holding {holds}. Point it at one, "
                         f"or {mirror.undo} to download from the official URLs.")
    kept = set()
    for src in cfg.sources:
        path = mirror.path / src.relpath
        if path.is_file():
            continue
        if not cfg.force and _fetched(src, raw, old):
            kept.add(src.name)
            continue
        have = (" (--force fetches every file again)" if cfg.force else
                f"; {raw / src.relpath} is not a copy it recorded" if (raw / src.relpath).exists() else "")
        raise FetchError(f"{mirror.named} has no {src.relpath} (looked for {path}), and {raw} holds no fetched copy "
                         f"of it{have}: put the official file ({src.url}) there as {src.relpath}, or {mirror.undo} "
                         "to download it.")
    return kept


def _fetched(src: Source, raw: Path, old: dict) -> bool:
    """`raw` holds the copy of `src` its manifest records: the same sha256, and the file verifies."""
    prev, dest = old.get("files", {}).get(src.name), raw / src.relpath
    if not isinstance(prev, dict) or not dest.is_file() or sha256_file(dest) != prev.get("sha256"):
        return False
    try:
        src.verify(dest, str(dest))
    except InputError:
        return False
    return True


def _copy_from_mirror(src: Source, mirror: Mirror, dest: Path, cfg: FetchConfig) -> tuple[str, int]:
    path = mirror.path / src.relpath
    try:
        return _copy_stream(_open_file(path), dest, src, str(path), cfg)
    except _Retryable as e:  # the mirror file changed size while we read it
        raise FetchError(f"Reading {path} failed: {e}") from None
    except InputError as e:
        raise FetchError(f"{e} The mirror's copy ({mirror.named}) is damaged: replace it with the official file "
                         f"({src.url}), or {mirror.undo} to download it. {dest} was not written.") from None


def fetch(cfg: FetchConfig | None = None) -> dict:
    """Fetch every source into `cfg.raw_dir`; return (and write) the manifest with sha256 per file."""
    cfg = cfg or FetchConfig()
    raw = Path(cfg.raw_dir)
    mirror = cfg.mirror_source()
    old = _read_manifest(raw)
    kept = _check_mirror(mirror, cfg, raw, old) if mirror else set()
    raw.mkdir(parents=True, exist_ok=True)
    manifest: dict = {"files": {}}
    for src in cfg.sources:
        dest = raw / src.relpath
        remove_stale_tmp(dest.parent)  # leftovers of a killed earlier run
        if src.name in kept:  # the mirror lacks it; the copy fetched before stays, with the origin recorded then
            prev = old["files"][src.name]
            log.warning("%s: %s has no %s; keeping %s (sha256 %s, fetched from %s)", src.name, mirror.named,
                        src.relpath, dest, prev["sha256"][:12], prev.get("origin"))
            manifest["files"][src.name] = prev
            continue
        # The manifest says only that a mirror was used, never its path: the same bytes fetched from a
        # mirror elsewhere (another folder, another machine) must give the same DVC hash of data/raw.
        origin = "mirror" if mirror else src.url
        where = str(mirror.path / src.relpath) if mirror else src.url  # for the log
        prev = old.get("files", {}).get(src.name)
        _remove_if_damaged(src, dest)
        if not cfg.force and prev and dest.is_file() and prev.get("origin") == origin \
                and sha256_file(dest) == prev.get("sha256") \
                and (not mirror or sha256_file(mirror.path / src.relpath) == prev.get("sha256")):
            # (a mirror's file is hashed too: another mirror's copy, e.g. a repacked one, is copied again)
            log.info("%s: already fetched (%s), sha256 %s", src.name, dest, prev["sha256"][:12])
            manifest["files"][src.name] = prev
            continue
        t0 = time.perf_counter()
        if mirror:
            digest, size = _copy_from_mirror(src, mirror, dest, cfg)
        else:
            digest, size = _download(src, dest, cfg)
        log.info("%s: %s -> %s (%d bytes, sha256 %s, %.1fs)", src.name, where, dest, size, digest[:12],
                 time.perf_counter() - t0)
        manifest["files"][src.name] = {
            "path": src.relpath,
            "origin": origin,  # the URL it was downloaded from, or "mirror"
            "url": src.url,
            "sha256": digest,
            "bytes": size,  # no timestamp or duration: they would change the DVC hash of data/raw too
        }
    write_json_atomic(raw / MANIFEST, manifest)
    return manifest


def _remove_if_damaged(src: Source, dest: Path) -> None:
    """A file that fails verification (e.g. kept from before it existed) never stays in data/raw."""
    if not dest.is_file():
        return
    try:
        src.verify(dest, str(dest))
    except InputError as e:
        log.warning("removing %s, which is damaged: %s", dest, e)
        dest.unlink()


def _read_manifest(raw: Path) -> dict:
    import json

    try:
        return json.loads((raw / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
