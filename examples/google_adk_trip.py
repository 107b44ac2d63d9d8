"""A Google ADK travel agent whose bookings roll back when the trip falls through.

    python examples/google_adk_trip.py

An ADK `Agent` with two tools, book_flight and book_hotel, run by ADK's `InMemoryRunner`.
The agent books both; then the payment step after the agent fails. The saga undoes the
hotel, then the flight (newest first, each once), and the log says so. The model here is
scripted (no network, no key): with a Gemini key, pass `model="gemini-2.5-flash"` to the
`Agent` instead. The "outside world" is a dict; the engine, the log and the undo are real.
The log lands in ./google-adk-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-google-adk[google_adk]'
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.agents import Agent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from agent_saga import Compensation, FileWAL, SagaAborted, compensator, saga_scope
from agent_saga.adapters.google_adk import wrap_tool

BOOKINGS: dict[str, str] = {}


# -- the side effects, and their registered undo ---------------------------------------------

def book_flight(city: str) -> dict[str, str]:
    """Book a flight to the city."""
    BOOKINGS["flight-1"] = city
    print(f"    booked flight to {city}  -> flight-1")
    return {"booking_id": "flight-1"}


async def book_hotel(city: str, nights: int) -> dict[str, str]:
    """Book a hotel room in the city."""
    BOOKINGS["hotel-1"] = f"{city} x{nights}"
    print(f"    booked hotel in {city}   -> hotel-1")
    return {"booking_id": "hotel-1"}


@compensator("example.travel.cancel")  # registered by name: the recovery daemon can run it after a crash
def cancel(booking_id: str) -> None:
    print(f"    cancelled {booking_id}")
    BOOKINGS.pop(booking_id, None)


def undo(result: dict[str, str]) -> Compensation:
    return Compensation(fn=cancel, handler="example.travel.cancel", kwargs={"booking_id": result["booking_id"]})


# -- a scripted stand-in for Gemini: ADK's own model interface --------------------------------

class ScriptedModel(BaseLlm):
    model: str = "scripted"
    turn: int = 0

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        script: list[types.Part] = [
            types.Part(function_call=types.FunctionCall(name="book_flight", args={"city": "Lisbon"})),
            types.Part(function_call=types.FunctionCall(name="book_hotel", args={"city": "Lisbon", "nights": 3})),
            types.Part(text="Flight and hotel are booked."),
        ]
        part, self.turn = script[min(self.turn, 2)], self.turn + 1
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def charge_card(total: int) -> None:
    raise ConnectionError("payment declined")


async def main(wal: FileWAL) -> None:
    agent = Agent(
        name="travel_agent", model=ScriptedModel(), instruction="Book the trip the user asks for.",
        # The same FunctionTools ADK would make of the functions: same name, description, schema.
        tools=[wrap_tool(book_flight, semantics="COMPENSABLE", compensate=undo),
               wrap_tool(book_hotel, semantics="COMPENSABLE", compensate=undo)],
    )
    runner = InMemoryRunner(agent=agent, app_name="travel")
    session = await runner.session_service.create_session(app_name="travel", user_id="ada")
    message = types.Content(role="user", parts=[types.Part(text="Three nights in Lisbon, please.")])
    async with saga_scope(wal, name="trip"):
        async for event in runner.run_async(user_id="ada", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                print(f"    agent: {event.content.parts[0].text}")
        charge_card(total=900)  # the step after the agent fails: everything above is undone


if __name__ == "__main__":
    path = Path("google-adk-trip.wal")
    path.unlink(missing_ok=True)
    wal = FileWAL(path)
    print("the agent books a trip; then the payment fails:")
    try:
        asyncio.run(main(wal))
    except SagaAborted as err:
        print(f"rolled back ({err.cause}); undone newest first: {[s.tool for s in err.report.compensated]}")
    print(f"bookings left: {BOOKINGS or 'none'}")
    kinds: list[Any] = [r["type"] for r in wal.records()]
    print(f"log: {kinds.count('STEP_COMMITTED')} steps committed, {kinds.count('STEP_COMPENSATED')} compensated")
    wal.close()
