"""A model's malformed call in Pydantic AI's loop never becomes a step: the rollback stays clean.

Pydantic AI validates a tool's arguments before it calls the function the adapter made a
step, and sends the validation error back to the model as a retry prompt. So the malformed
call leaves nothing in the log; the run's later failure unwinds what did happen, cleanly,
with nothing for a human.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted
from agent_saga.adapters.pydantic_ai import saga_run_sync, wrap_tool
from agent_saga.recovery.escalations import queue_of


def test_a_call_pydantic_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
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
        ("book_hotel", {"city": "Lisbon", "nights": "three", "pool": True}),  # Pydantic refuses both
        ("charge_card", {"amount": 1240}),
    ]

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(m.kind == "response" for m in messages)
        if turn < len(calls):
            return ModelResponse(parts=[ToolCallPart(*calls[turn])])
        return ModelResponse(parts=[TextPart("The card was declined.")])

    agent = Agent(FunctionModel(scripted), instructions="Book the trip.", tools=[
        wrap_tool(Tool(hold_seat), semantics="COMPENSABLE",
                  compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["seat"]})),
        wrap_tool(Tool(book_hotel), semantics="COMPENSABLE",
                  compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["room"]})),
        wrap_tool(Tool(charge_card), semantics="IRREVERSIBLE"),
    ])
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            saga_run_sync(agent, "Lisbon", wal=wal)
        tools_logged = [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    finally:
        wal.close()
    report = aborted.value.report
    assert report.clean, report.format_text()
    assert tools_logged == ["hold_seat", "charge_card"]  # the refused call is no step
    assert world == {"seat": "released"}
    assert queue_of(tmp_path / "trip.wal").all() == []  # nothing for a human
