"""Debian's headless Chromium, driven by Playwright (no browser is ever downloaded)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_saga.ui import FileSource, UiServer, make_server

try:
    from playwright.sync_api import Browser, ConsoleMessage, Page, sync_playwright
except ImportError as err:  # a missing prerequisite is a failure that says how to fix it
    raise ImportError(
        "Playwright is not installed: run these tests with `python3 -m tox run -e ui` (it installs it); "
        "never run `playwright install`, the tests use Debian's chromium"
    ) from err


def chromium_path() -> str:
    path = os.environ.get("AGENT_SAGA_TEST_CHROMIUM") or shutil.which("chromium")
    if not path or not os.path.exists(path):
        pytest.fail("Chromium is not installed: `apt-get install chromium` (scripts/services start does it), "
                    "or point AGENT_SAGA_TEST_CHROMIUM at a Chromium binary")
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def serve() -> Iterator[Callable[..., UiServer]]:
    """Start a debugger for a log file on a free port; stopped after the page is closed."""
    servers: list[UiServer] = []

    def start(path: Path, **kw: Any) -> UiServer:
        server = make_server(FileSource(path), port=0, **kw)
        server.serve_in_thread()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def page(browser: Browser, serve: Callable[..., UiServer]) -> Iterator[Page]:
    """A fresh page; any console error or uncaught exception fails the test that caused it."""
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    pg = context.new_page()
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            problems.append(f"console {message.type}: {message.text}")

    pg.on("console", on_console)
    pg.on("pageerror", lambda exc: problems.append(f"uncaught: {exc}"))
    pg.set_default_timeout(15_000)
    yield pg
    context.close()
    assert not problems, problems


@pytest.fixture
def shot(tmp_path: Path, record_property: Callable[[str, object], None]) -> Callable[[Page, str], Path]:
    """Save a screenshot under the test's tmp dir, print where, and attach it to the JUnit report."""

    def take(pg: Page, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        pg.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        record_property(f"screenshot-{name}", str(path))
        return path

    return take
