"""A model's malformed call in LangGraph's loop never becomes a step: the rollback stays clean.

LangChain validates a tool's arguments with Pydantic before it calls the function the
adapter made a step, and ``ToolNode`` hands the validation error to the model as the
tool's result. So the malformed call leaves nothing in the log and nothing to undo; the
run's later failure unwinds what did happen, cleanly, with nothing for a human.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agent_saga import Compensation, FileWAL, NotApplied, SagaAborted
from agent_saga.adapters.langgraph import saga_run, wrap_tool
from agent_saga.recovery.escalations import queue_of


async def test_a_call_pydantic_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
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

    tools = [
        wrap_tool(tool(hold_seat), semantics="COMPENSABLE",
                  compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["seat"]})),
        wrap_tool(tool(book_hotel), semantics="COMPENSABLE",
                  compensate=lambda r: Compensation(fn=release, kwargs={"seat": r["room"]})),
        wrap_tool(tool(charge_card), semantics="IRREVERSIBLE"),
    ]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("hold_seat", {"flight": "TP1351"}),
        ("book_hotel", {"city": "Lisbon", "nights": "three"}),  # not an integer: Pydantic refuses it
        ("charge_card", {"amount": 1240}),
    ]
    model = FakeMessagesListChatModel(responses=[
        *(AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"}]) for i, (n, a) in enumerate(calls)),
        AIMessage("The card was declined."),
    ])

    async def agent(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            await saga_run(builder.compile(), {"messages": [HumanMessage("Lisbon")]}, wal=wal)
        tools_logged = [r["body"]["tool"] for r in wal.records() if r["type"] == "STEP_INTENT"]
    finally:
        wal.close()
    report = aborted.value.report
    assert report.clean, report.format_text()
    assert tools_logged == ["hold_seat", "charge_card"]  # the refused call is no step
    assert world == {"seat": "released"}
    assert queue_of(tmp_path / "trip.wal").all() == []  # nothing for a human
