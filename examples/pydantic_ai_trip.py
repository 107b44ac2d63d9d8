"""A Pydantic AI agent books a trip; the payment fails; the booking is undone.

    python examples/pydantic_ai_trip.py

The agent's tools are ordinary ``@agent.tool_plain`` / ``@agent.tool`` functions;
``wrap_tools`` declares what each one is, and ``saga_run_sync`` makes the run one
transaction. The model is Pydantic AI's own ``FunctionModel`` answering with scripted
tool calls (no network, no key); the engine, the log and the compensations are real.
The log lands in ./pydantic-ai-trip.wal.

Needs: pip install -e ./packages/core -e './packages/adapter-pydantic-ai[pydantic-ai]'
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_saga import Compensation, FileWAL, SagaAborted, compensator
from agent_saga.adapters.pydantic_ai import saga_run_sync, wrap_tools

WORLD: dict[str, str] = {}  # the "outside world"
SCRIPT = [("hold_seat", {"flight": "TP1351"}), ("book_hotel", {"city": "Lisbon", "nights": 3}),
          ("charge_card", {"amount": 1240})]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The scripted model: one tool call per turn, then a summary."""
    turn = sum(1 for m in messages if m.kind == "response")
    if turn < len(SCRIPT):
        name, args = SCRIPT[turn]
        return ModelResponse(parts=[ToolCallPart(name, args)])
    return ModelResponse(parts=[TextPart("Your trip is booked.")])


agent = Agent(FunctionModel(model), deps_type=str, instructions="Book the trip the traveller asks for.")


@agent.tool_plain
def hold_seat(flight: str) -> dict[str, str]:
    """Hold a seat on a flight."""
    WORLD["seat_7A"] = f"held on {flight}"
    print(f"    held seat 7A on {flight}")
    return {"seat": "seat_7A"}


@agent.tool
def book_hotel(ctx: RunContext[str], city: str, nights: int) -> dict[str, str]:
    """Book a hotel room for the traveller."""
    WORLD["room_12"] = f"{city}, {nights} nights for {ctx.deps}"
    print(f"    booked room 12 in {city} for {ctx.deps}")
    return {"room": "room_12"}


@agent.tool_plain
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


def _undo(handler: Any, key: str) -> Any:
    return lambda result: Compensation(fn=handler, handler=f"trip.{handler.__name__}", kwargs={key: result[key]})


wrap_tools(agent, {
    "hold_seat": {"semantics": "COMPENSABLE", "compensate": _undo(release_seat, "seat")},
    "book_hotel": {"semantics": "COMPENSABLE", "compensate": _undo(cancel_room, "room")},
    "charge_card": {"semantics": "IRREVERSIBLE"},
})


def main() -> None:
    wal = FileWAL("pydantic-ai-trip.wal")
    try:
        saga_run_sync(agent, "Lisbon, three nights, flight TP1351", deps="Ada", wal=wal)
    except SagaAborted as err:
        print(f"aborted: {err.cause}")
        print(f"undone, newest first: {[s.tool for s in err.report.compensated]}")
    finally:
        wal.close()
    print(f"world: {WORLD}")


if __name__ == "__main__":
    main()
