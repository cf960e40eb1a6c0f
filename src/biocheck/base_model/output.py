"""Writing a model directory: quiet saves, the usual file modes, checksums, no leftovers of killed builds."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from biocheck.io import TMP_PREFIX

INFO_FILE = "biocheck_model.json"  # how the model directory was made (settings, input checksums)
# Who may replace model.out_dir (biocheck.outputs.output_dir), how the user named it, and the file of an
# unmarked model folder an older BioCheck built.
OUTPUT = ("biocheck model init", "--out-dir / model.out_dir", (INFO_FILE,))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def quiet_progress() -> Iterator[None]:
    """No "Writing model shards" / "Loading weights" progress bars in the CLI/DVC logs."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def remove_stale_builds(out_dir: Path) -> None:
    """Temporaries of this output that a killed earlier build left behind (never other stages' temporaries)."""
    if out_dir.parent.is_dir():
        for p in out_dir.parent.glob(f"{TMP_PREFIX}{out_dir.name}.*"):
            shutil.rmtree(p, ignore_errors=True)


def normalise_permissions(directory: Path) -> None:
    """mkdtemp makes 0700 dirs and safetensors 0600 files; give the output the usual umask-based modes."""
    umask = os.umask(0)
    os.umask(umask)
    directory.chmod(0o777 & ~umask)
    for p in directory.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~umask)
