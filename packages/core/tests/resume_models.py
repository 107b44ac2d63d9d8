"""A durable run that asks a model twice and books once, through the real openai client (issue 41 part 4).

usage: python resume_models.py WAL ENTRY SAGA_ID CITY

ENTRY is ``models.trip`` (``OpenAI``, sync tools) or ``models.trip_async`` (``AsyncOpenAI``, async
tools). The planner's answer names the city to book, so a resumed run books what the served answer
says. ``$MODELS_BASE_URL`` is the local Chat Completions server, ``$MODELS_KEY`` the API key;
``$MODELS_KILL_AFTER=N`` sends the worker SIGKILL once the N-th record it writes is on disk. The
tools' effects go to ``$RESUME_WORLD`` (resume_trip.py). ``agent-saga recover --import
resume_models`` imports this module, which patches the SDK as the worker did.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from openai import AsyncOpenAI, OpenAI
from resume_trip import abook, book

import agent_saga
from agent_saga import FileWAL, durable

__all__ = ["trip", "trip_async"]

agent_saga.patch_all({}, only=["openai"])


def _ask(city: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"which city, of {city}?"}]


def _where() -> dict[str, Any]:
    return {"base_url": os.environ["MODELS_BASE_URL"], "api_key": os.environ["MODELS_KEY"], "max_retries": 0}


@durable("models.trip")
def trip(city: str) -> list[Any]:
    client = OpenAI(**_where())
    plan = client.chat.completions.create(model="planner", messages=_ask(city))
    ref = book(str(plan.choices[0].message.content))["ref"]
    note = client.responses.create(model="writer", input=f"confirm {ref}")
    return [plan.choices[0].message.content, ref, note.output_text]


@durable("models.trip_async")
async def trip_async(city: str) -> list[Any]:
    async with AsyncOpenAI(**_where()) as client:
        plan = await client.chat.completions.create(model="planner", messages=_ask(city))
        ref = (await abook(str(plan.choices[0].message.content)))["ref"]
        note = await client.responses.create(model="writer", input=f"confirm {ref}")
    return [plan.choices[0].message.content, ref, note.output_text]


class KilledWAL(FileWAL):
    """A FileWAL that writes one record at a time and gets SIGKILL after the one ``$MODELS_KILL_AFTER`` names."""

    written = 0

    def _write(self, batch: Any) -> None:
        for entry in batch:
            super()._write([entry])
            KilledWAL.written += 1
            if os.environ.get("MODELS_KILL_AFTER") == str(KilledWAL.written):
                os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    wal, entry, saga_id, city = argv
    log = KilledWAL(wal)
    if entry == "models.trip":
        trip(city, saga_id=saga_id, wal=log)
    else:
        asyncio.run(trip_async(city, saga_id=saga_id, wal=log))
    log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
