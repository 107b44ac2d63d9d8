"""A model's malformed call in the Agents SDK's loop never becomes a step: the rollback stays clean.

The SDK parses and validates a function tool's arguments (Pydantic) before it calls the
function the adapter made a step, and hands the error to the model as the tool's output.
So the malformed call leaves nothing in the log; the run's later failure unwinds what did
happen, cleanly, with nothing for a human.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted
from agent_saga.adapters.openai_agents import saga_run, wrap_tool
from agent_saga.recovery.escalations import queue_of

set_tracing_disabled(True)  # offline: no traces sent


async def test_a_call_the_sdk_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
    world: dict[str, str] = {}

    def hold_seat(flight: str) -> dict[str, str]:
        """Hold a seat on a flight."""
        world["seat"] = flight
        return {"seat": "seat"}

    def book_hotel(city: str, nights: int) -> dict[str, str]:
        """Book a hotel room."""
        world["room"] = city
        return {"room": "room"}

    def charge_card(amount: int) -> None:
        """Charge the card."""
        raise NotApplied("card declined")

    def release(seat: str) -> None:
        world[seat] = "released"

    calls: list[tuple[str, dict[str, Any]]] = [
        ("hold_seat", {"flight": "TP1351"}),
        ("book_hotel", {"city": "Lisbon", "nights": "three"}),  # not an integer: the SDK refuses it
        ("charge_card", {"amount": 1240}),
    ]
    agent = Agent(
        name="travel agent", instructions="Book the trip.",
        tools=[wrap_tool(function_tool(hold_seat), semantics="COMPENSABLE",
                         compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["seat"]})),
               wrap_tool(function_tool(book_hotel), semantics="COMPENSABLE",
                         compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["room"]})),
               wrap_tool(function_tool(charge_card), semantics="IRREVERSIBLE")],
        model=ScriptedModel([*([function_call(n, a, call_id=f"call_{i}")] for i, (n, a) in enumerate(calls)),
                             [assistant_message("The card was declined.")]]),
    )
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            await saga_run(agent, "Lisbon", wal=wal)
        tools_logged = [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    finally:
        wal.close()
    report = aborted.value.report
    assert report.clean, report.format_text()
    assert tools_logged == ["hold_seat", "charge_card"]  # the refused call is no step
    assert world == {"seat": "released"}
    assert queue_of(tmp_path / "trip.wal").all() == []  # nothing for a human
