from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

import pytest

from biocheck.data.fetch import MIRROR_ENV, SOURCES, FetchConfig, FetchError, fetch
from tests.helpers import http_fixture as hf
from tests.helpers.builders import CORPUS, csv_bytes, healthfc_rows, jsonl_bytes, scifact_dev, scifact_train, write_raw


def tar_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(f"data/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


RELEASE = {"claims_train.jsonl": jsonl_bytes(scifact_train()), "claims_dev.jsonl": jsonl_bytes(scifact_dev()),
           "corpus.jsonl": jsonl_bytes(CORPUS)}
# A valid release tarball, padded with incompressible bytes so that a download takes many chunks.
BODY_A = tar_bytes({**RELEASE, "padding.bin": os.urandom(300_000)})
BODY_B = csv_bytes(healthfc_rows() * 10)


def sources(base: str) -> tuple:
    """The official sources (with their verification), served by the local test server."""
    paths = {"scifact": "/a.tar.gz", "healthfc": "/b.csv"}
    return tuple(replace(s, url=base + paths[s.name]) for s in SOURCES)


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
    assert manifest["files"]["scifact"]["origin"] == "mirror"  # never its path: data/raw's hash is the same anywhere
    assert str(tmp_path) not in (tmp_path / "raw" / "manifest.json").read_text()
    assert manifest["files"]["scifact"]["sha256"] == hashlib.sha256(tar.read_bytes()).hexdigest()


def test_another_mirror_with_other_bytes_is_copied_again(tmp_path, monkeypatch):
    first, second = write_raw(tmp_path / "m1"), write_raw(tmp_path / "m2")
    csv = second / "healthfc" / "Datensatz.csv"
    csv.write_bytes(csv_bytes(healthfc_rows()[:-1]))  # another copy than the first mirror's
    monkeypatch.setenv(MIRROR_ENV, str(first))
    fetch(cfg(tmp_path, "http://127.0.0.1:9"))
    monkeypatch.setenv(MIRROR_ENV, str(second))
    manifest = fetch(cfg(tmp_path, "http://127.0.0.1:9"))
    assert (tmp_path / "raw" / "healthfc" / "Datensatz.csv").read_bytes() == csv.read_bytes()
    assert manifest["files"]["healthfc"]["sha256"] == hashlib.sha256(csv.read_bytes()).hexdigest()


def test_mirror_missing_a_file_is_a_clear_error(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "mirror")
    (mirror / "healthfc" / "Datensatz.csv").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    with pytest.raises(FetchError, match=r"has no healthfc/Datensatz.csv"):
        fetch(cfg(tmp_path, "http://127.0.0.1:9"))


def test_a_file_the_mirror_lacks_is_kept_when_data_raw_holds_the_copy_it_recorded(tmp_path, monkeypatch, caplog):
    """Fetched once from a mirror; a later mirror lacks the HealthFC file: data/raw's copy (the manifest's sha256,
    and it verifies) stays with the origin recorded then, so data/raw and its manifest keep their bytes."""
    first = write_raw(tmp_path / "mirror")
    monkeypatch.setenv(MIRROR_ENV, str(first))
    fetch(cfg(tmp_path, "http://127.0.0.1:9"))
    raw = tmp_path / "raw"
    before = {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()}
    second = write_raw(tmp_path / "second")
    (second / "healthfc" / "Datensatz.csv").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(second))
    manifest = fetch(cfg(tmp_path, "http://127.0.0.1:9"))
    assert {p: p.read_bytes() for p in raw.rglob("*") if p.is_file()} == before
    assert manifest["files"]["healthfc"]["origin"] == "mirror"
    assert f"{MIRROR_ENV}={second} has no healthfc/Datensatz.csv; keeping" in caplog.text


def test_a_downloaded_file_the_mirror_lacks_keeps_its_url_as_origin(tmp_path, monkeypatch):
    with hf.Server({"/a.tar.gz": hf.ok(BODY_A), "/b.csv": hf.ok(BODY_B)}) as s:
        fetch(cfg(tmp_path, s.base))
    mirror = write_raw(tmp_path / "mirror")
    (mirror / "healthfc" / "Datensatz.csv").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    manifest = fetch(cfg(tmp_path, s.base))  # the server is gone: nothing may be downloaded
    assert manifest["files"]["healthfc"]["origin"] == f"{s.base}/b.csv"  # where that copy came from
    assert (tmp_path / "raw" / "healthfc" / "Datensatz.csv").read_bytes() == BODY_B
    assert manifest["files"]["scifact"]["origin"] == "mirror"  # the file the mirror has is copied from it


@pytest.mark.parametrize("case", ["absent", "other bytes", "force"])
def test_a_file_the_mirror_lacks_without_a_recorded_copy_is_one_error_before_any_copy(tmp_path, monkeypatch, case):
    raw = tmp_path / "raw"
    mirror = write_raw(tmp_path / "mirror")
    if case != "absent":
        monkeypatch.setenv(MIRROR_ENV, str(mirror))
        fetch(cfg(tmp_path, "http://127.0.0.1:9"))
        (raw / "scifact" / "data.tar.gz").unlink()  # a copy must not be made before the error
    if case == "other bytes":
        (raw / "healthfc" / "Datensatz.csv").write_bytes(csv_bytes(healthfc_rows()[:-1]))  # verifies, not recorded
    (mirror / "healthfc" / "Datensatz.csv").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    with pytest.raises(FetchError) as e:
        fetch(cfg(tmp_path, "http://127.0.0.1:9", force=case == "force"))
    msg = str(e.value)
    assert "\n" not in msg
    assert f"{MIRROR_ENV}={mirror} has no healthfc/Datensatz.csv (looked for {mirror / 'healthfc' / 'Datensatz.csv'})" in msg
    assert f"{raw} holds no fetched copy" in msg and f"unset {MIRROR_ENV}" in msg and "127.0.0.1:9/b.csv" in msg
    assert ("--force" in msg) is (case == "force") and ("is not a copy it recorded" in msg) is (case == "other bytes")
    assert not (raw / "scifact" / "data.tar.gz").exists()


def test_the_cli_says_a_missing_mirror_file_in_one_error_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from biocheck.cli import app
    from tests.helpers.paths import REPO

    mirror = write_raw(tmp_path / "mirror")
    (mirror / "scifact" / "data.tar.gz").unlink()
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["data", "fetch", "--params", str(REPO / "params.yaml"), "--raw-dir", "raw",
                                  "--no-progress"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "has no scifact/data.tar.gz" in lines[0], r.stderr
    assert "Traceback" not in r.output and not (tmp_path / "raw" / "healthfc" / "Datensatz.csv").exists()


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
from dataclasses import replace
from biocheck.data.fetch import SOURCES, FetchConfig, fetch
base, raw = sys.argv[1], Path(sys.argv[2])
fetch(FetchConfig(raw_dir=raw, sources=(replace(SOURCES[0], url=base + "/a.tar.gz"),), progress=False, timeout_s=30))
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


# --- every file is verified before it is written (DVC caches whatever the stage leaves) -------------

CUT_TAR = BODY_A[: len(BODY_A) // 2]  # a complete HTTP response of half a tarball (no length to check)
NOT_A_TAR = b"<html>Service unavailable</html>"
NO_CORPUS = tar_bytes({k: v for k, v in RELEASE.items() if k != "corpus.jsonl"})
BAD_CSV = csv_bytes(healthfc_rows()).replace(b"en_claim", b"claim_en", 1)


@pytest.mark.parametrize("name, body, reason", [
    ("scifact", CUT_TAR, "not a readable gzip tar"),
    ("scifact", NOT_A_TAR, "not a readable gzip tar"),
    ("scifact", NO_CORPUS, "has no corpus.jsonl"),
    ("healthfc", BAD_CSV, r"missing column\(s\) \['en_claim'\]"),
    ("healthfc", b"", "the file is empty"),
], ids=["cut-tar", "html", "no-corpus", "renamed-column", "empty-csv"])
def test_a_download_that_fails_verification_is_retried_then_never_written(tmp_path, name, body, reason):
    good = {"scifact": BODY_A, "healthfc": BODY_B}
    path = {"scifact": "/a.tar.gz", "healthfc": "/b.csv"}
    routes = {path[n]: hf.ok(body if n == name else good[n]) for n in good}
    with hf.Server(routes) as s, pytest.raises(FetchError, match=reason) as e:
        fetch(cfg(tmp_path, s.base, max_attempts=2))
    assert s.hits[path[name]] == 2  # a cut transfer without a length looks like this: try again
    msg = str(e.value)
    assert f"{s.base}{path[name]}" in msg and "after 2 attempts" in msg and ".tmp-" not in msg
    dest = {"scifact": "scifact/data.tar.gz", "healthfc": "healthfc/Datensatz.csv"}[name]
    assert not (tmp_path / "raw" / dest).exists() and leftovers(tmp_path / "raw") == []


def test_a_bad_first_attempt_is_replaced_by_a_good_second_one(tmp_path):
    routes = {"/a.tar.gz": hf.sequence(hf.ok(CUT_TAR), hf.ok(BODY_A)), "/b.csv": hf.ok(BODY_B)}
    with hf.Server(routes) as s:
        manifest = fetch(cfg(tmp_path, s.base))
    assert (tmp_path / "raw" / "scifact" / "data.tar.gz").read_bytes() == BODY_A
    assert manifest["files"]["scifact"]["sha256"] == hashlib.sha256(BODY_A).hexdigest()


def test_a_damaged_mirror_file_is_named_and_never_copied(tmp_path, monkeypatch):
    mirror = write_raw(tmp_path / "mirror")
    tar = mirror / "scifact" / "data.tar.gz"
    tar.write_bytes(tar.read_bytes()[:-40])
    monkeypatch.setenv(MIRROR_ENV, str(mirror))
    with pytest.raises(FetchError) as e:
        fetch(cfg(tmp_path, "http://127.0.0.1:9"))
    msg = str(e.value)
    assert str(tar) in msg and "not a readable gzip tar" in msg and "replace it" in msg
    assert not (tmp_path / "raw" / "scifact" / "data.tar.gz").exists() and leftovers(tmp_path / "raw") == []


def test_a_bad_file_already_in_raw_is_fetched_again_even_if_the_manifest_vouches_for_it(tmp_path):
    # e.g. a file cached before verification existed: same sha256 as recorded, but not a release.
    with hf.Server({"/a.tar.gz": hf.ok(BODY_A), "/b.csv": hf.ok(BODY_B)}) as s:
        c = cfg(tmp_path, s.base)
        fetch(c)
        raw = tmp_path / "raw"
        (raw / "scifact" / "data.tar.gz").write_bytes(CUT_TAR)
        manifest = json.loads((raw / "manifest.json").read_text())
        manifest["files"]["scifact"]["sha256"] = hashlib.sha256(CUT_TAR).hexdigest()
        (raw / "manifest.json").write_text(json.dumps(manifest))
        fetch(c)
        assert s.hits == {"/a.tar.gz": 2, "/b.csv": 1}
    assert (raw / "scifact" / "data.tar.gz").read_bytes() == BODY_A


def test_a_bad_file_in_raw_is_removed_even_when_the_new_download_fails(tmp_path):
    raw = tmp_path / "raw"
    (raw / "scifact").mkdir(parents=True)
    (raw / "scifact" / "data.tar.gz").write_bytes(CUT_TAR)
    with hf.Server({"/b.csv": hf.ok(BODY_B)}) as s, pytest.raises(FetchError, match="HTTP 404"):
        fetch(cfg(tmp_path, s.base))
    assert not (raw / "scifact" / "data.tar.gz").exists()
