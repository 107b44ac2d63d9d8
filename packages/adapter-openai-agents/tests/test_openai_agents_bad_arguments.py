"""A model's malformed call in the Agents SDK's loop never becomes a step: the rollback stays clean.

The SDK parses and validates a function tool's arguments (Pydantic) before it calls the
function the adapter made a step, and hands the error to the model as the tool's output.
So the malformed call leaves nothing in the log; the run's later failure unwinds what did
happen, cleanly, with nothing for a human.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.openai_agents import saga_run, wrap_tool
from agent_saga.testing import REFUSED_CALLS, SeatTrip, assert_refused_call_is_no_step

set_tracing_disabled(True)  # offline: no traces sent


async def test_a_call_the_sdk_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
    trip = SeatTrip()
    agent = Agent(
        name="travel agent", instructions="Book the trip.",
        tools=[wrap_tool(function_tool(trip.hold_seat), semantics="COMPENSABLE", compensate=trip.seat_undo),
               wrap_tool(function_tool(trip.book_hotel), semantics="COMPENSABLE", compensate=trip.room_undo),
               wrap_tool(function_tool(trip.charge_card), semantics="IRREVERSIBLE")],
        model=ScriptedModel([*([function_call(n, a, call_id=f"call_{i}")] for i, (n, a) in enumerate(REFUSED_CALLS)),
                             [assistant_message("The card was declined.")]]),
    )
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            await saga_run(agent, "Lisbon", wal=wal)
    finally:
        wal.close()
    assert_refused_call_is_no_step(trip, tmp_path / "trip.wal", aborted.value)
