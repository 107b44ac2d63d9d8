"""An Agno agent books a trip; the card is declined; the bookings are undone.

    python examples/agno_trip.py

The trip's tools and their undos are in trip.py. ``wrap_tool`` makes each function the
``Function`` Agno would make of it (same name, description, parameters) with its calls as saga
steps, and ``saga_run_sync`` makes ``agent.run`` one transaction. Agno hands the declined charge
to the model as the tool's result and the run goes on; the helper then fails the run, so nothing
booked stays booked. The model is a scripted ``agno.models.base.Model`` (no network, no key):
with a key, pass ``model=OpenAIChat(id="gpt-4o")`` instead. The log lands in ./agno-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-agno[agno]'
"""

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agno.agent import Agent
from agno.models.base import Model
from agno.models.response import ModelResponse
from trip import CALLS, PROMPT, SUMMARY, WORLD, book_hotel, charge_card, hold_seat, room_undo, seat_undo

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.agno import saga_run_sync, wrap_tool


@dataclass
class ScriptedModel(Model):
    """A stand-in for a real model in Agno's own model interface: one tool call per turn, then a summary."""

    id: str = "scripted"
    turn: int = 0

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        self.turn += 1
        if self.turn > len(CALLS):
            return ModelResponse(role="assistant", content=SUMMARY)
        name, arguments = CALLS[self.turn - 1]
        call = {"id": f"call_{self.turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
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


agent = Agent(
    name="travel_agent", model=ScriptedModel(), instructions="Book the trip the traveller asks for.", telemetry=False,
    tools=[wrap_tool(hold_seat, semantics="COMPENSABLE", compensate=seat_undo),
           wrap_tool(book_hotel, semantics="COMPENSABLE", compensate=room_undo),
           wrap_tool(charge_card, semantics="IRREVERSIBLE")],
)


def main() -> None:
    Path("agno-trip.wal").unlink(missing_ok=True)  # this example's own log, fresh each run
    wal = FileWAL("agno-trip.wal")
    try:
        saga_run_sync(agent, PROMPT, wal=wal)
    except SagaAborted as err:
        print(err.report.format_text())  # what was undone, newest first, and whether it is clean
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
