"""Debian's headless Chromium through Playwright, for every browser test (no browser is ever downloaded)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

try:
    from playwright.sync_api import Browser, sync_playwright
except ImportError as err:  # a missing prerequisite is a failure that says how to fix it
    raise ImportError(
        "Playwright is not installed: run these tests with `python3 -m tox run -e ui` (or `-e passkey`; "
        "each installs it); never run `playwright install`, the tests use Debian's chromium"
    ) from err

__all__ = ["chromium", "chromium_path"]


def chromium_path() -> str:
    path = os.environ.get("AGENT_SAGA_TEST_CHROMIUM") or shutil.which("chromium")
    if not path or not os.path.exists(path):
        pytest.fail("Chromium is not installed: `apt-get install chromium` (scripts/services start does it), "
                    "or point AGENT_SAGA_TEST_CHROMIUM at a Chromium binary")
    return path


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Chromium for the length of the block."""
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()
