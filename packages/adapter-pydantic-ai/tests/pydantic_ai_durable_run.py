"""A Pydantic AI run (``Agent.run_sync``, a ``FunctionModel``) as a ``@durable`` entry point (issue 41, part 6).

usage: python pydantic_ai_durable_run.py WAL

The agent books one city a turn (Paris, then Rome) and says "booked". Its model answers from
the conversation (how many responses it gave so far), so a resumed run, which asks the model
again from its first turn (its requests are not steps), asks for the same tools in the same
order and the recorded bookings are served. With ``$PAI_WRAP_MODEL=1`` the model is
``wrap_model``'s: its requests are steps too, and a resumed run is served the turns the log holds.
``$AGENT_SAGA_KILLED_WORLD`` holds the world (every booking, cancellation and model turn);
``$PAI_HOLD_AT_TURN=N``: the model's N-th turn says ``model turn N`` and waits to be killed.
"""

from __future__ import annotations

import os
import sys

from agent_saga_pydantic_ai import wrap_model, wrap_tool
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_saga import FileWAL, durable

# agent_saga.testing._killed, not the package: the package imports pytest into the worker
from agent_saga.testing._killed import World, book, booking_cancelled, hold

__all__ = ["CITIES", "run_trip"]

CITIES = ["paris", "rome"]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model's turn, from the conversation: the next city to book, then "booked"."""
    turn = sum(m.kind == "response" for m in messages) + 1
    World().note("model", f"turn {turn}")
    if os.environ.get("PAI_HOLD_AT_TURN") == str(turn):
        hold(f"model turn {turn}")
    if turn <= len(CITIES):
        return ModelResponse(parts=[ToolCallPart("book", {"city": CITIES[turn - 1]}, tool_call_id=f"call_{turn}")])
    return ModelResponse(parts=[TextPart("booked")])


booking = wrap_tool(Tool(book), semantics="COMPENSABLE", compensate=booking_cancelled)


@durable("pai.trip")
def run_trip(request: str) -> str:
    model = FunctionModel(scripted)
    agent = Agent(wrap_model(model) if os.environ.get("PAI_WRAP_MODEL") == "1" else model,
                  instructions="Book the trip.", tools=[booking])
    return agent.run_sync(request).output


def main(argv: list[str]) -> None:
    (wal_path,) = argv
    wal = FileWAL(wal_path)
    try:
        print(run_trip("book paris and rome", saga_id="trip-7", wal=wal), flush=True)
    finally:
        wal.close()


if __name__ == "__main__":
    main(sys.argv[1:])
