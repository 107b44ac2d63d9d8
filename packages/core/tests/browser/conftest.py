"""Debian's headless Chromium, driven by Playwright (no browser is ever downloaded)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chromium import chromium  # first: without Playwright it says how to get it
from playwright.sync_api import Browser, ConsoleMessage, Page

from agent_saga.ui import FileSource, UiServer, make_server


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


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
