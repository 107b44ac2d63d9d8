"""A Strands agent books a trip; the payment fails; the booking is undone.

    python examples/strands_trip.py

The tools are ordinary ``@tool`` functions; ``wrap_tool`` declares what each one is,
and ``saga_run_sync`` makes the invocation one transaction. Strands hands the failed
payment to the model as an error result and goes on; the helper then fails the run, so
nothing booked stays booked. The model is a scripted ``strands.models.Model`` (no
network, no AWS); the engine, the log and the compensations are real. The log lands in
./strands-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-strands[strands]'
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

from strands import Agent, tool
from strands.models import Model

from agent_saga import Compensation, FileWAL, SagaAborted, compensator
from agent_saga.adapters.strands import saga_run_sync, wrap_tool

WORLD: dict[str, str] = {}  # the "outside world"


class ScriptedModel(Model):
    """One tool call per turn from a script, then a summary."""

    def __init__(self) -> None:
        self.script = [("hold_seat", {"flight": "TP1351"}), ("book_hotel", {"city": "Lisbon", "nights": 3}),
                       ("charge_card", {"amount": 1240})]

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, output_model: Any, prompt: Any, system_prompt: str | None = None,
                          **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        raise NotImplementedError

    async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: str | None = None,
                     **kwargs: Any) -> AsyncIterable[Any]:
        yield {"messageStart": {"role": "assistant"}}
        if self.script:
            name, args = self.script.pop(0)
            yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": name, "name": name}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": "The payment failed; please try another card."}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}


@tool
def hold_seat(flight: str) -> dict[str, str]:
    """Hold a seat on a flight."""
    WORLD["seat_7A"] = f"held on {flight}"
    print(f"    held seat 7A on {flight}")
    return {"seat": "seat_7A"}


@tool
def book_hotel(city: str, nights: int) -> dict[str, str]:
    """Book a hotel room."""
    WORLD["room_12"] = f"{city}, {nights} nights"
    print(f"    booked room 12 in {city}")
    return {"room": "room_12"}


@tool
def charge_card(amount: int) -> dict[str, str]:
    """Charge the traveller's card."""
    raise ConnectionError("payment gateway timed out")


@compensator("trip.release_seat")  # named undos: a recovery daemon can run them after a crash
def release_seat(seat: str) -> None:
    WORLD[seat] = "released"
    print(f"    released {seat}")


@compensator("trip.cancel_room")
def cancel_room(room: str) -> None:
    WORLD[room] = "cancelled"
    print(f"    cancelled {room}")


tools = [
    wrap_tool(hold_seat, semantics="COMPENSABLE",
              compensate=lambda r: Compensation(fn=release_seat, handler="trip.release_seat", kwargs={"seat": r["seat"]})),
    wrap_tool(book_hotel, semantics="COMPENSABLE",
              compensate=lambda r: Compensation(fn=cancel_room, handler="trip.cancel_room", kwargs={"room": r["room"]})),
    wrap_tool(charge_card, semantics="IRREVERSIBLE"),
]


def main() -> None:
    agent = Agent(model=ScriptedModel(), tools=tools, callback_handler=None)
    wal = FileWAL("strands-trip.wal")
    try:
        saga_run_sync(agent, "Lisbon, three nights, flight TP1351", wal=wal)
    except SagaAborted as err:
        print(f"aborted: {err.cause}")
        print(f"undone, newest first: {[s.tool for s in err.report.compensated]}")
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
