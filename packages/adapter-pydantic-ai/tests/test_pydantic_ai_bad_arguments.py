"""A model's malformed call in Pydantic AI's loop never becomes a step: the rollback stays clean.

Pydantic AI validates a tool's arguments before it calls the function the adapter made a
step, and sends the validation error back to the model as a retry prompt. So the malformed
call leaves nothing in the log; the run's later failure unwinds what did happen, cleanly,
with nothing for a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.pydantic_ai import saga_run_sync, wrap_tool
from agent_saga.testing import REFUSED_CALLS, SeatTrip, assert_refused_call_is_no_step


def test_a_call_pydantic_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
    trip = SeatTrip()
    calls = [*REFUSED_CALLS]
    calls[1] = ("book_hotel", {**calls[1][1], "pool": True})  # Pydantic refuses both the bad and the made-up one

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(m.kind == "response" for m in messages)
        if turn < len(calls):
            return ModelResponse(parts=[ToolCallPart(*calls[turn])])
        return ModelResponse(parts=[TextPart("The card was declined.")])

    agent = Agent(FunctionModel(scripted), instructions="Book the trip.", tools=[
        wrap_tool(Tool(trip.hold_seat), semantics="COMPENSABLE", compensate=trip.seat_undo),
        wrap_tool(Tool(trip.book_hotel), semantics="COMPENSABLE", compensate=trip.room_undo),
        wrap_tool(Tool(trip.charge_card), semantics="IRREVERSIBLE"),
    ])
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            saga_run_sync(agent, "Lisbon", wal=wal)
    finally:
        wal.close()
    assert_refused_call_is_no_step(trip, tmp_path / "trip.wal", aborted.value)
