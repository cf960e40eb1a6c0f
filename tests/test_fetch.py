from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from biocheck.data.fetch import MIRROR_ENV, FetchConfig, FetchError, Source, fetch
from tests import http_fixture as hf
from tests.builders import write_raw

BODY_A = os.urandom(300_000)
BODY_B = b"en_claim,label\nDoes it work?,0\n" * 100


def sources(base: str) -> tuple[Source, ...]:
    return (Source("scifact", f"{base}/a.tar.gz", "scifact/data.tar.gz"),
            Source("healthfc", f"{base}/b.csv", "healthfc/Datensatz.csv"))


def cfg(tmp_path: Path, base: str, **kw) -> FetchConfig:
    return FetchConfig(raw_dir=tmp_path / "raw", sources=sources(base), timeout_s=kw.pop("timeout_s", 2.0),
                       backoff_s=0.01, progress=False, **kw)


def leftovers(raw: Path) -> list[Path]:
    return [p for p in raw.rglob("*") if p.name.startswith(".tmp-")]


def test_download_records_sha256_and_writes_files(tmp_path):
    with hf.Server({"/a.tar.gz": hf.ok(BODY_A), "/b.csv": hf.ok(BODY_B)}) as s:
        manifest = fetch(cfg(tmp_path, s.base))
    raw = tmp_path / "raw"
    assert (raw / "scifact" / "data.tar.gz").read_bytes() == BODY_A
    assert manifest["files"]["scifact"]["sha256"] == hashlib.sha256(BODY_A).hexdigest()
    assert manifest["files"]["healthfc"]["bytes"] == len(BODY_B)
    assert manifest["files"]["healthfc"]["origin"] == f"{s.base}/b.csv"
    assert json.loads((raw / "manifest.json").read_text()) == manifest


def test_retries_transient_errors_then_succeeds(tmp_path):
    routes = {"/a.tar.gz": hf.sequence(hf.status(503), hf.status(502), hf.ok(BODY_A)),
              "/b.csv": hf.sequence(hf.truncated(BODY_B, 100), hf.slow(BODY_B, 3.0), hf.ok(BODY_B))}
    with hf.Server(routes) as s:
        fetch(cfg(tmp_path, s.base, timeout_s=1.0))
    assert s.hits == {"/a.tar.gz": 3, "/b.csv": 3}
    assert (tmp_path / "raw" / "healthfc" / "Datensatz.csv").read_bytes() == BODY_B
    assert leftovers(tmp_path / "raw") == []


def test_bounded_retries_then_clear_error_and_no_partial_file(tmp_path):
    routes = {"/a.tar.gz": hf.truncated(BODY_A, 1000), "/b.csv": hf.ok(BODY_B)}
    with hf.Server(routes) as s, pytest.raises(FetchError) as e:
        fetch(cfg(tmp_path, s.base, max_attempts=3))
    assert s.hits["/a.tar.gz"] == 3
    assert f"{s.base}/a.tar.gz" in str(e.value) and "after 3 attempts" in str(e.value)
    assert not (tmp_path / "raw" / "scifact" / "data.tar.gz").exists()
    assert leftovers(tmp_path / "raw") == []


def test_not_found_is_not_retried(tmp_path):
    with hf.Server({"/b.csv": hf.ok(BODY_B)}) as s, pytest.raises(FetchError, match="HTTP 404"):
        fetch(cfg(tmp_path, s.base))
    assert s.hits == {"/a.tar.gz": 1}


def test_offline_without_mirror_names_url_and_env_var(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here: connection refused, like an offline machine
    with pytest.raises(FetchError) as e:
        fetch(cfg(tmp_path, f"http://127.0.0.1:{port}", max_attempts=2))
    msg = str(e.value)
    assert f"http://127.0.0.1:{port}/a.tar.gz" in msg and MIRROR_ENV in msg and "scifact/data.tar.gz" in msg


def test_mirror_is_used_instead_of_the_network(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "mirror")
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    manifest = fetch(cfg(tmp_path, "http://127.0.0.1:9"))  # unreachable URL: must not be used
    tar = mirror / "scifact" / "data.tar.gz"
    assert (tmp_path / "raw" / "scifact" / "data.tar.gz").read_bytes() == tar.read_bytes()
    assert manifest["files"]["scifact"]["origin"] == str(tar)
    assert manifest["files"]["scifact"]["sha256"] == hashlib.sha256(tar.read_bytes()).hexdigest()


def test_mirror_missing_a_file_is_a_clear_error(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "mirror")
    (mirror / "healthfc" / "Datensatz.csv").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    with pytest.raises(FetchError, match=r"has no healthfc/Datensatz.csv"):
        fetch(cfg(tmp_path, "http://127.0.0.1:9"))


def test_intact_files_are_not_fetched_twice_but_corrupt_ones_are(tmp_path):
    with hf.Server({"/a.tar.gz": hf.ok(BODY_A), "/b.csv": hf.ok(BODY_B)}) as s:
        c = cfg(tmp_path, s.base)
        fetch(c)
        fetch(c)
        assert s.hits == {"/a.tar.gz": 1, "/b.csv": 1}
        (tmp_path / "raw" / "healthfc" / "Datensatz.csv").write_bytes(b"corrupted")
        fetch(c)
        assert s.hits == {"/a.tar.gz": 1, "/b.csv": 2}
        c.force = True
        fetch(c)
        assert s.hits == {"/a.tar.gz": 2, "/b.csv": 3}
    assert (tmp_path / "raw" / "healthfc" / "Datensatz.csv").read_bytes() == BODY_B


SCRIPT = """
import sys
from pathlib import Path
from biocheck.data.fetch import FetchConfig, Source, fetch
base, raw = sys.argv[1], Path(sys.argv[2])
fetch(FetchConfig(raw_dir=raw, sources=(Source("scifact", base + "/a.tar.gz", "scifact/data.tar.gz"),),
                  progress=False, timeout_s=30))
"""


def test_killed_download_leaves_no_partial_file(tmp_path):
    raw = tmp_path / "raw"
    with hf.Server({"/a.tar.gz": hf.drip(BODY_A, 4096, 0.05)}) as s:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, s.base, str(raw)])
        deadline = time.time() + 60
        while not leftovers(raw) and time.time() < deadline:  # wait until the download is under way
            time.sleep(0.05)
        assert leftovers(raw), "the download never started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (raw / "scifact" / "data.tar.gz").exists()  # only an ignorable temporary remains
    with hf.Server({"/a.tar.gz": hf.ok(BODY_A)}) as s:
        subprocess.run([sys.executable, "-c", SCRIPT, s.base, str(raw)], check=True)
    assert (raw / "scifact" / "data.tar.gz").read_bytes() == BODY_A
    assert leftovers(raw) == []  # the next run cleaned up what the killed one left
