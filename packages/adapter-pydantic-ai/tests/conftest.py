"""``Agent.run_sync`` keeps an event loop of its own set on the calling thread, for the next call.

A test that then runs ``asyncio.run`` orphans that loop, and the warnings-as-errors of the
suite would blame whichever test the garbage collector happens to run in. Each test closes
what ``run_sync`` left behind.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _close_the_loop_run_sync_left() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)
