"""A headless Chromium for the browser tests (Playwright), or a skip naming what to install."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def chromium_executable() -> str | None:
    for candidate in (os.environ.get("BIOCHECK_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


@contextlib.contextmanager
def chromium(needed_by: str) -> Iterator[Any]:
    """A launched headless Chromium (Playwright's Browser); skips the test when Playwright or Chromium is missing."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed "
                                   f"(pip install playwright): {needed_by} need it")
    exe = chromium_executable()
    if exe is None:
        pytest.skip("no Chromium executable (apt-get install chromium, or set BIOCHECK_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()
