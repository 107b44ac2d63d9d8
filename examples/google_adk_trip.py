"""A Google ADK agent books a trip; the card is declined; the bookings are undone.

    python examples/google_adk_trip.py

The trip's tools and their undos are in trip.py. ``wrap_tool`` makes each function the
``FunctionTool`` ADK would make of it (same name, description, declaration) with its calls as
saga steps, and ``saga_run`` makes the runner's run one transaction. A tool's exception ends an
ADK run; the saga undoes what ran. The model is a scripted ``BaseLlm`` (no network, no key):
with a Gemini key, pass ``model="gemini-2.5-flash"`` to the ``Agent`` instead. The log lands in
./google-adk-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-google-adk[google-adk]'
"""

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import Agent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.google_adk import saga_run, wrap_tool


class ScriptedModel(BaseLlm):
    """A stand-in for Gemini in ADK's own model interface: one function call per turn, then a summary."""

    model: str = "scripted"
    turn: int = 0

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        self.turn += 1
        part = (types.Part(function_call=types.FunctionCall(name=CALLS[self.turn - 1][0], args=CALLS[self.turn - 1][1]))
                if self.turn <= len(CALLS) else types.Part(text=SUMMARY))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


agent = Agent(
    name="travel_agent", model=ScriptedModel(), instruction="Book the trip the traveller asks for.",
    tools=[wrap_tool(hold_seat, semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(book_hotel, semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(charge_card, semantics="IRREVERSIBLE")],
)


async def main() -> None:
    runner = InMemoryRunner(agent=agent, app_name="travel")
    session = await runner.session_service.create_session(app_name="travel", user_id="ada")
    Path("google-adk-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("google-adk-trip.wal")
    try:
        await saga_run(runner, PROMPT, user_id="ada", session_id=session.id, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    asyncio.run(main())
