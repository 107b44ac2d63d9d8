"""Each test gets the thread's event loop of its own, closed when it ends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def thread_loop() -> Iterator[None]:
    """``Runner.run_sync`` runs on the thread's default event loop (it makes one when there is
    none) and leaves it open; a later ``asyncio.run`` then drops it unclosed, and its
    ResourceWarning fails whichever test the collector happens to run in. Here that loop is
    the test's own, closed after it.
    """
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        yield
    finally:
        asyncio.set_event_loop(None)
        loop.close()
