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

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.langgraph import saga_run, wrap_tool
from agent_saga.testing import REFUSED_CALLS, SeatTrip, assert_refused_call_is_no_step


async def test_a_call_pydantic_refuses_is_no_step_and_the_rollback_is_clean(tmp_path: Path) -> None:
    trip = SeatTrip()
    tools = [
        wrap_tool(tool(trip.hold_seat), semantics="COMPENSABLE", compensate=trip.seat_undo),
        wrap_tool(tool(trip.book_hotel), semantics="COMPENSABLE", compensate=trip.room_undo),
        wrap_tool(tool(trip.charge_card), semantics="IRREVERSIBLE"),
    ]
    model = FakeMessagesListChatModel(responses=[
        *(AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"}]) for i, (n, a) in enumerate(REFUSED_CALLS)),
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
    finally:
        wal.close()
    assert_refused_call_is_no_step(trip, tmp_path / "trip.wal", aborted.value)
