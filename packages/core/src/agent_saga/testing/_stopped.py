"""A durable run stopped part-way in this process and resumed: the adapters' model-call tests share it.

The entry point calls :func:`stop_run_if` where ``stop["after_first"]`` is set: it raises
``SagaQuarantined`` (a crash's stand-in: the saga ends with no end record, so ``resume`` takes it
up); :func:`stopped_then_resumed` runs it that way, lets the test check what the first part did,
and resumes it. The core's own resume tests stop their runs with :func:`stop_run_if` too.
:class:`Lookups` is what those tests' scripted model and ``lookup`` tool saw, and the stop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_saga.errors import SagaQuarantined
from agent_saga.log.default import shared_log
from agent_saga.recovery.resume import resume

__all__ = ["Lookups", "committed_steps", "committed_tools", "stop_run_if", "stopped_then_resumed"]


class Lookups:
    """What a model-call test saw: its scripted model's turns, its ``lookup`` tool's cities, where its run stops.

    ``stop`` is the mapping :func:`stopped_then_resumed` sets; ``clear()`` after each test.
    """

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.looked_up: list[str] = []
        self.stop: dict[str, bool] = {}

    def lookup(self, city: str) -> str:
        """The ``lookup`` tool's answer for ``city``, noted."""
        self.looked_up.append(city)
        return f"sunny in {city}"

    def clear(self) -> None:
        """Forget every turn, city and stop: the next test starts from nothing seen."""
        self.asked.clear()
        self.looked_up.clear()
        self.stop.clear()


def stop_run_if(reached: object) -> None:
    """End the run here with no end record where ``reached`` is true: a crash's stand-in that ``resume`` takes up."""
    if reached:
        raise SagaQuarantined("the run stops here with no end record (a crash's stand-in)")


def stopped_then_resumed(
    entry: Callable[..., Any], *args: Any, saga_id: str, wal: Path, stop: dict[str, bool],
    after_stop: Callable[[], None],
) -> Any:
    """Run ``entry(*args)`` stopped after its first part, call ``after_stop`` (its checks), resume it; the value.

    An ``async def`` entry point's first part runs in an event loop of its own. The resume takes
    the run's lease as run out (the clock an hour on): nothing else holds it.
    """
    stop["after_first"] = True
    try:
        with pytest.raises(SagaQuarantined):
            _run_out(entry(*args, saga_id=saga_id, wal=wal))
    finally:
        stop.clear()
    shared_log(wal).barrier()
    after_stop()
    return resume(saga_id, wal=wal, clock=lambda: time.time() + 3600)


def _run_out(started: Any) -> None:
    """Run an ``async def`` entry point's coroutine to its end in an event loop of its own."""
    if inspect.iscoroutine(started):
        asyncio.run(started)


def committed_steps(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The bodies of the committed steps' records, in log order."""
    return [r["body"] for r in records if r["type"] == "STEP_COMMITTED"]


def committed_tools(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tools of the committed steps, in log order."""
    return [step["tool"] for step in committed_steps(records)]
