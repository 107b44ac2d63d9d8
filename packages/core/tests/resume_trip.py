"""The issue's trip (issue 41) as a module: run by a worker that dies where told, resumed by another process.

usage: python resume_trip.py WAL ENTRY SAGA_ID CITY...

ENTRY is ``trip.plan`` (sync entry, sync tools) or ``trip.plan_async`` (async entry, async tools).
Every effect a tool has is one line in ``$RESUME_WORLD/effects.jsonl`` (``ev``, ``city``/``ref``,
``pid``), written and flushed before the tool returns, so the world is what actually happened
across processes. ``$RESUME_CRASH_AT=after:N`` kills the worker (``os._exit``: no atexit, no
finally) once the N-th record it writes is on disk. In a resuming process, ``$RESUME_EDIT=1``
stands for code edited between the crash and the resume (the cities are visited in reverse), and
``$RESUME_DIE_THINKING=CITY`` kills it inside ``think(CITY)``. ``$RESUME_RECONCILER=no`` registers a reconciler that says a booking did not land.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from agent_saga import Compensation, FileWAL, Observation, compensator, durable, reconciler, tool

__all__ = ["abook", "aplan_trip", "athink", "book", "cancel", "effects", "plan_trip", "think"]


def _effect(ev: str, **what: Any) -> None:
    world = os.environ.get("RESUME_WORLD")
    if not world:
        return
    with open(Path(world) / "effects.jsonl", "a") as fh:
        fh.write(json.dumps({"ev": ev, "pid": os.getpid(), **what}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def effects(world: Path) -> list[dict[str, Any]]:
    """Every effect the tools had, in order."""
    path = world / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _cities(cities: list[Any]) -> list[Any]:
    return list(reversed(cities)) if os.environ.get("RESUME_EDIT") == "1" else cities


@compensator("trip.cancel")
def cancel(ref: str, idempotency_key: str = "") -> None:
    _effect("cancel", ref=ref)


def _undo(result: dict[str, Any]) -> Compensation:
    return Compensation(handler="trip.cancel", kwargs={"ref": result["ref"]})


@tool(semantics="COMPENSABLE", compensate=_undo)
def book(city: str) -> dict[str, Any]:
    _effect("book", city=city)
    return {"ref": f"R-{city}"}


@tool(semantics="REVERSIBLE")
def think(prompt: str) -> str:  # the model call: recorded, never paid for twice
    _effect("think", city=prompt)
    if os.environ.get("RESUME_DIE_THINKING") == prompt:
        os._exit(137)  # killed in the middle of a model call, nothing flushed on the way out
    return f"go to {prompt}"


@durable("trip.plan")
def plan_trip(trip_id: str, cities: list[Any]) -> list[Any]:
    return [book(c)["ref"] for c in _cities(cities) if think(c)]


@tool(semantics="COMPENSABLE", compensate=_undo)
async def abook(city: str) -> dict[str, Any]:
    _effect("book", city=city)
    await asyncio.sleep(0)
    return {"ref": f"R-{city}"}


@tool(semantics="REVERSIBLE")
async def athink(prompt: str) -> str:
    _effect("think", city=prompt)
    await asyncio.sleep(0)
    return f"go to {prompt}"


@durable("trip.plan_async")
async def aplan_trip(trip_id: str, cities: list[Any]) -> list[Any]:
    refs = []
    for city in _cities(cities):
        if await athink(city):
            refs.append((await abook(city))["ref"])
    return refs


if os.environ.get("RESUME_RECONCILER") == "no":
    @reconciler("book")
    def _never_landed(city: str, idempotency_key: str = "") -> Observation:
        return Observation(False, detail="the provider has no such booking")


class CrashingWAL(FileWAL):
    """A FileWAL that flushes one record at a time and dies after the one ``$RESUME_CRASH_AT`` names."""

    written = 0

    def _write(self, batch: Any) -> None:
        crash_at = os.environ.get("RESUME_CRASH_AT", "")
        for entry in batch:
            super()._write([entry])
            CrashingWAL.written += 1
            if crash_at == f"after:{CrashingWAL.written}":
                os._exit(137)


def main(argv: list[str]) -> None:
    wal, entry, saga_id, *cities = argv
    # Killed in a model call: a record nobody waits for stays in memory (linger) until the kill,
    # so only what the run itself waited for is on disk.
    log = CrashingWAL(wal, linger=600.0) if os.environ.get("RESUME_DIE_THINKING") else CrashingWAL(wal)
    if entry == "trip.plan":
        plan_trip(saga_id, cities, saga_id=saga_id, wal=log)
    else:
        asyncio.run(aplan_trip(saga_id, cities, saga_id=saga_id, wal=log))
    log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
