"""An Agno travel agent whose bookings roll back when the trip falls through.

    python examples/agno_trip.py

An Agno `Agent` with two `@tool`s, book_flight and rent_car. The agent books both; then the
payment step after the agent fails. The saga undoes the car, then the flight (newest first,
each once), and the log says so. The model here is scripted (no network, no key): with an
OpenAI key, pass `model=OpenAIChat(id="gpt-4o")` to the `Agent` instead. The "outside world"
is a dict; the engine, the log and the undo are real. The log lands in ./agno-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-agno[agno]'
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agno.agent import Agent
from agno.models.base import Model
from agno.models.response import ModelResponse
from agno.tools import tool

from agent_saga import Compensation, FileWAL, SagaAborted, compensator, saga_scope
from agent_saga.adapters.agno import saga_run_sync, wrap_tool

BOOKINGS: dict[str, str] = {}


# -- the side effects, and their registered undo ---------------------------------------------

@tool
def book_flight(city: str) -> dict[str, str]:
    """Book a flight to the city."""
    BOOKINGS["flight-1"] = city
    print(f"    booked flight to {city}  -> flight-1")
    return {"booking_id": "flight-1"}


@tool
def rent_car(city: str, days: int) -> dict[str, str]:
    """Rent a car in the city."""
    BOOKINGS["car-1"] = f"{city} x{days}"
    print(f"    rented a car in {city}   -> car-1")
    return {"booking_id": "car-1"}


@compensator("example.travel.cancel")  # registered by name: the recovery daemon can run it after a crash
def cancel(booking_id: str) -> None:
    print(f"    cancelled {booking_id}")
    BOOKINGS.pop(booking_id, None)


def undo(result: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel, handler="example.travel.cancel", kwargs={"booking_id": result["booking_id"]})


# -- a scripted stand-in for a real model: Agno's own model interface --------------------------

@dataclass
class ScriptedModel(Model):
    id: str = "scripted"
    turn: int = 0

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        script = [("book_flight", {"city": "Lisbon"}), ("rent_car", {"city": "Lisbon", "days": 3})]
        turn, self.turn = self.turn, self.turn + 1
        if turn >= len(script):
            return ModelResponse(role="assistant", content="Flight and car are booked.")
        name, args = script[turn]
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        return ModelResponse(role="assistant", tool_calls=[call])

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.invoke()

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        yield self.invoke()

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        yield self.invoke()

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


def charge_card(total: int) -> None:
    raise ConnectionError("payment declined")


def main(wal: FileWAL) -> None:
    agent = Agent(
        name="travel_agent", model=ScriptedModel(), telemetry=False,
        instructions="Book the trip the user asks for.",
        # The same Functions @tool made: same name, description and parameters for the model.
        tools=[wrap_tool(book_flight, semantics="COMPENSABLE", compensate=undo),
               wrap_tool(rent_car, semantics="COMPENSABLE", compensate=undo)],
    )
    # saga_run_sync: agent.run as one saga (inside an open one it joins it); a failure inside it,
    # or a run Agno reports as status=error, undoes what ran. Here the step after the agent fails.
    with saga_scope(wal, name="trip"):
        output = saga_run_sync(agent, "Three days in Lisbon, with a car, please.")
        print(f"    agent: {output.content}")
        charge_card(total=900)  # the step after the agent fails: everything above is undone


if __name__ == "__main__":
    path = Path("agno-trip.wal")
    path.unlink(missing_ok=True)
    wal = FileWAL(path)
    print("the agent books a trip; then the payment fails:")
    try:
        main(wal)
    except SagaAborted as err:
        print(f"rolled back ({err.cause}); undone newest first: {[s.tool for s in err.report.compensated]}")
    print(f"bookings left: {BOOKINGS or 'none'}")
    kinds: list[Any] = [r["type"] for r in wal.records()]
    print(f"log: {kinds.count('STEP_COMMITTED')} steps committed, {kinds.count('STEP_COMPENSATED')} compensated")
    wal.close()
