"""The Chromium binary the browser tests drive (Playwright), or None to skip them."""

from __future__ import annotations

import os
import shutil


def chromium_executable() -> str | None:
    for candidate in (os.environ.get("BIOCHECK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None
