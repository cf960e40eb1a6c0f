"""Shared by several test modules (moved from tests/test_eval_gallery.py)."""

from __future__ import annotations

import os
import shutil


def _chromium() -> str | None:
    for candidate in (os.environ.get("BIOCHECK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None
