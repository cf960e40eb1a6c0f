"""`biocheck data fetch`: download the official SciFact and HealthFC releases into `data/raw/`.

With `BIOCHECK_DATA_MIRROR` set, the same files are copied from a local mirror instead
(`$BIOCHECK_DATA_MIRROR/scifact/data.tar.gz`, `$BIOCHECK_DATA_MIRROR/healthfc/Datensatz.csv`);
everything after opening the byte stream (progress, hashing, atomic write, manifest) is shared.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from tqdm.auto import tqdm

from biocheck.io import atomic_path, remove_stale_tmp, write_json_atomic

log = logging.getLogger(__name__)

MIRROR_ENV = "BIOCHECK_DATA_MIRROR"
MANIFEST = "manifest.json"
CHUNK = 1 << 16


@dataclass(frozen=True)
class Source:
    """One file of an official release: where it lives online, in a mirror, and under data/raw."""

    name: str
    url: str
    relpath: str  # both the mirror-relative and the data/raw-relative path


SOURCES: tuple[Source, ...] = (
    Source("scifact", "https://scifact.s3-us-west-2.amazonaws.com/release/latest/data.tar.gz", "scifact/data.tar.gz"),
    Source("healthfc", "https://raw.githubusercontent.com/jvladika/HealthFC/main/Datensatz.csv", "healthfc/Datensatz.csv"),
)


@dataclass
class FetchConfig:
    raw_dir: Path = Path("data/raw")
    sources: tuple[Source, ...] = SOURCES
    mirror: Path | None = None  # defaults to $BIOCHECK_DATA_MIRROR
    timeout_s: float = 30.0
    max_attempts: int = 4
    backoff_s: float = 2.0  # first retry waits ~backoff_s, then doubles (with jitter)
    force: bool = False
    progress: bool = True
    extra_headers: dict[str, str] = field(default_factory=dict)

    def resolved_mirror(self) -> Path | None:
        if self.mirror is not None:
            return Path(self.mirror)
        env = os.environ.get(MIRROR_ENV, "").strip()
        return Path(env) if env else None


class FetchError(Exception):
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


def _copy_stream(opener, dest: Path, label: str, cfg: FetchConfig) -> tuple[str, int]:
    """Stream bytes into `dest` atomically while hashing; return (sha256, size)."""
    with opener as (chunks, total), atomic_path(dest) as tmp:
        h = hashlib.sha256()
        size = 0
        with open(tmp, "wb") as out, tqdm(
            total=total, unit="B", unit_scale=True, desc=label, disable=not cfg.progress, leave=False
        ) as bar:
            for chunk in chunks:
                out.write(chunk)
                h.update(chunk)
                size += len(chunk)
                bar.update(len(chunk))
        if total is not None and size != total:
            raise _Retryable(f"connection closed after {size} of {total} bytes")
    return h.hexdigest(), size


def _download(src: Source, dest: Path, cfg: FetchConfig) -> tuple[str, int]:
    last = ""
    for attempt in range(1, cfg.max_attempts + 1):
        try:
            return _copy_stream(_open_http(src.url, cfg), dest, src.name, cfg)
        except (_Retryable, httpx.TransportError) as e:  # timeouts, refused/reset connections, 5xx
            last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            if attempt < cfg.max_attempts:
                wait = cfg.backoff_s * 2 ** (attempt - 1) * random.uniform(0.75, 1.25)
                log.warning("%s: attempt %d/%d failed (%s); retrying in %.1fs", src.url, attempt,
                            cfg.max_attempts, last, wait)
                time.sleep(wait)
    raise FetchError(
        f"Could not download {src.name} from {src.url} after {cfg.max_attempts} attempts ({last}). "
        f"If this machine is offline, set {MIRROR_ENV} to a folder holding {src.relpath} "
        f"(e.g. {MIRROR_ENV}=../shared/datasets) and run again."
    )


def _copy_from_mirror(src: Source, mirror: Path, dest: Path, cfg: FetchConfig) -> tuple[str, int]:
    path = mirror / src.relpath
    if not path.is_file():
        raise FetchError(
            f"{MIRROR_ENV}={mirror} has no {src.relpath} (looked for {path}). A mirror must hold "
            f"{', '.join(s.relpath for s in cfg.sources)}; unset {MIRROR_ENV} to download from {src.url}."
        )
    try:
        return _copy_stream(_open_file(path), dest, src.name, cfg)
    except _Retryable as e:  # the mirror file changed size while we read it
        raise FetchError(f"Reading {path} failed: {e}") from None


def fetch(cfg: FetchConfig | None = None) -> dict:
    """Fetch every source into `cfg.raw_dir`; return (and write) the manifest with sha256 per file."""
    cfg = cfg or FetchConfig()
    raw = Path(cfg.raw_dir)
    raw.mkdir(parents=True, exist_ok=True)
    mirror = cfg.resolved_mirror()
    old = _read_manifest(raw)
    manifest: dict = {"files": {}}
    for src in cfg.sources:
        dest = raw / src.relpath
        remove_stale_tmp(dest.parent)  # leftovers of a killed earlier run
        origin = str(mirror / src.relpath) if mirror else src.url
        prev = old.get("files", {}).get(src.name)
        if not cfg.force and prev and dest.is_file() and prev.get("origin") == origin \
                and sha256_file(dest) == prev.get("sha256"):
            log.info("%s: already fetched (%s), sha256 %s", src.name, dest, prev["sha256"][:12])
            manifest["files"][src.name] = prev
            continue
        t0 = time.perf_counter()
        if mirror:
            digest, size = _copy_from_mirror(src, mirror, dest, cfg)
        else:
            digest, size = _download(src, dest, cfg)
        log.info("%s: %s -> %s (%d bytes, sha256 %s, %.1fs)", src.name, origin, dest, size, digest[:12],
                 time.perf_counter() - t0)
        manifest["files"][src.name] = {
            "path": src.relpath,
            "origin": origin,
            "url": src.url,
            "sha256": digest,
            "bytes": size,  # no timestamp: the same bytes must give the same DVC hash of data/raw
        }
    write_json_atomic(raw / MANIFEST, manifest)
    return manifest


def _read_manifest(raw: Path) -> dict:
    import json

    try:
        return json.loads((raw / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
