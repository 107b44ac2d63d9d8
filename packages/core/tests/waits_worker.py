"""A durable run that thinks, sleeps an hour, waits for "approved", then books: killed where told, resumed elsewhere.

usage: python waits_worker.py WAL ENTRY SAGA_ID

ENTRY is ``waits.errand`` (sync) or ``waits.errand_async``. Time is a test clock that starts at
``$WAITS_NOW`` and never sleeps: each park is one ``park`` line in ``$RESUME_WORLD/effects.jsonl``
(with its seconds and the pid), then time moves on by that much, so which process waited how long
is read from the world, not measured. ``$WAITS_DIE_AT_PARK=N`` kills the process (``os._exit``,
nothing flushed) in its N-th park; ``$RESUME_CRASH_AT=after:N`` once its N-th record is on disk
(``resume_trip.CrashingWAL``). ``$WAITS_REAL_PARK=N``: from its N-th park on, a park really waits
(on the wait's doorbell, at most the park's seconds of real time) while its clock stands still,
so another process's signal is seen at a next look, as in production, and never races the timeout. The tools are the trip's (``resume_trip``).
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from resume_trip import CrashingWAL, _effect, abook, athink, book, think

from agent_saga import (
    EventTimedOut,
    durable,
    durable_sleep,
    durable_sleep_async,
    wait_for_event,
    wait_for_event_async,
)
from agent_saga.engine.waits import Wakeup

__all__ = ["HOUR", "POLL", "TIMEOUT", "errand", "errand_async"]

HOUR = 3600.0
TIMEOUT = 60.0
POLL = float(os.environ.get("WAITS_POLL", "10"))


class WorldClock:
    """A WaitClock whose parks are effects in the world; it dies in the park ``$WAITS_DIE_AT_PARK`` names."""

    def __init__(self) -> None:
        self.t = float(os.environ.get("WAITS_NOW", "1000000"))
        self.parks = 0

    def now(self) -> float:
        return self.t

    def park(self, seconds: float, wakeup: Wakeup) -> None:
        self.parks += 1
        _effect("park", seconds=seconds, at=self.t)
        if os.environ.get("WAITS_DIE_AT_PARK") == str(self.parks):
            os._exit(137)  # killed while it waits: what it recorded is on disk, nothing else
        real_from = int(os.environ.get("WAITS_REAL_PARK") or 0)
        if real_from and self.parks >= real_from:
            wakeup.wait(seconds)  # and its time stands still: the wait cannot time out before the signal comes
            return
        self.t += seconds

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None:
        self.park(seconds, wakeup)


@durable("waits.errand")
def errand(order: str) -> dict[str, Any]:
    clock = WorldClock()
    thought = think(order)
    durable_sleep(HOUR, clock=clock)
    try:
        answer = wait_for_event("approved", timeout=TIMEOUT, clock=clock, poll=POLL)
    except EventTimedOut:
        answer = "timed out"
    return {"thought": thought, "answer": answer, "ref": book(order)["ref"]}


@durable("waits.errand_async")
async def errand_async(order: str) -> dict[str, Any]:
    clock = WorldClock()
    thought = await athink(order)
    await durable_sleep_async(HOUR, clock=clock)
    try:
        answer = await wait_for_event_async("approved", timeout=TIMEOUT, clock=clock, poll=POLL)
    except EventTimedOut:
        answer = "timed out"
    return {"thought": thought, "answer": answer, "ref": (await abook(order))["ref"]}


def main(argv: list[str]) -> None:
    wal, entry, saga_id = argv
    log = CrashingWAL(wal)
    if entry == "waits.errand":
        errand("rome", saga_id=saga_id, wal=log)
    else:
        asyncio.run(errand_async("rome", saga_id=saga_id, wal=log))
    log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
