"""An OpenAI Agents run (``Runner.run``, a scripted model) as an ``async def`` ``@durable`` entry point (issue 41, part 6).

usage: python agents_durable_run.py WAL

The agent books one city a turn (Paris, then Rome) and says "booked". Its model is the SDK's
``ScriptedModel``, built afresh by each call of the entry point: a resumed run asks the model
again from its first turn (model calls are not steps until the OpenAI SDK is patched), and a
fresh script answers the same calls in the same order, so the resumed run asks for the same
tools and the recorded bookings are served. ``$AGENT_SAGA_KILLED_WORLD`` holds the world (every
booking, cancellation and model turn); ``$OA_HOLD_AT_TURN=N``: the model's N-th turn says
``model turn N`` and waits to be killed.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from agent_saga_openai_agents import wrap_tool
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_saga import FileWAL, durable

# agent_saga.testing._killed, not the package: the package imports pytest into the worker
from agent_saga.testing._killed import World, book, booking_cancelled, hold

__all__ = ["CITIES", "run_trip"]

CITIES = ["paris", "rome"]
set_tracing_disabled(True)  # offline: no traces sent


class TurnNotingModel(ScriptedModel):
    """The SDK's ScriptedModel, noting each turn in the world (and holding at the one asked for)."""

    def __init__(self, steps: Any) -> None:
        super().__init__(steps)
        self.turn = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.turn += 1
        World().note("model", f"turn {self.turn}")
        if os.environ.get("OA_HOLD_AT_TURN") == str(self.turn):
            hold(f"model turn {self.turn}")
        return await super().get_response(*args, **kwargs)


booking = wrap_tool(function_tool(book), semantics="COMPENSABLE", compensate=booking_cancelled)


@durable("oa.trip")
async def run_trip(request: str) -> str:
    model = TurnNotingModel([*([function_call("book", {"city": c}, call_id=f"call_{c}")] for c in CITIES),
                             [assistant_message("booked")]])
    agent = Agent(name="travel agent", instructions="Book the trip.", tools=[booking], model=model)
    result = await Runner.run(agent, request)
    return str(result.final_output)


def main(argv: list[str]) -> None:
    (wal_path,) = argv
    wal = FileWAL(wal_path)
    try:
        print(asyncio.run(run_trip("book paris and rome", saga_id="trip-7", wal=wal)), flush=True)
    finally:
        wal.close()


if __name__ == "__main__":
    main(sys.argv[1:])
