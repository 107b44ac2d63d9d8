"""A resumed durable run for the pictures' tests: what it asked before the stop is served from the log.

The run thinks about and books each city (``resume_trip``'s tools) and stops with no end record
at the last one (``SagaQuarantined``, a crash's stand-in, as in ``test_resume.py``); ``resume``
then serves the recorded steps and runs the last city live.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import resume_trip as trip

from agent_saga import SagaQuarantined, durable, resume
from agent_saga.log.default import shared_log
from agent_saga.testing import stop_run_if

__all__ = ["resumed_run"]

_STOP: dict[str, str] = {}


@durable("marks.trip")
def _trip(cities: list[Any]) -> list[Any]:
    refs = []
    for city in cities:
        stop_run_if(_STOP.get("at") == city)
        if trip.think(city):
            refs.append(trip.book(city)["ref"])
    return refs


def resumed_run(wal: Path, cities: Sequence[str], saga_id: str = "m-1") -> tuple[set[int], set[int]]:
    """Run ``cities``, stop at the last, resume it; the step numbers (served, live) the log has."""
    _STOP["at"] = cities[-1]
    try:
        _trip(list(cities), saga_id=saga_id, wal=wal)
    except SagaQuarantined:
        pass
    finally:
        _STOP.clear()
    shared_log(wal).barrier()  # on disk, as a dead process's flushed records are
    resume(saga_id, wal=wal, clock=lambda: time.time() + 3600)  # its owner long gone
    shared_log(wal).barrier()
    recorded = 2 * (len(cities) - 1)  # think and book per city before the stop
    return set(range(1, recorded + 1)), {recorded + 1, recorded + 2}
