"""A model's call whose arguments the tool's function cannot take did nothing: the rollback stays clean.

LlamaIndex's FunctionTool hands the model's keywords to the function as they come; the
adapter kit checks that they bind first, so a made-up or missing parameter is a step
NOT APPLIED (the function is not called), not an UNKNOWN step that needs a human.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agent_saga import FileWAL, SagaAborted
from agent_saga.adapters.llamaindex import saga_run, wrap_tool
from agent_saga.testing import SeatTrip, assert_seat_released

# llama-index-workflows walks the agent with inspect.getmembers(), which touches pydantic's
# deprecated accessors: the framework's warnings, not ours (as in the conformance suite).
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_.*' attribute on the instance is deprecated:DeprecationWarning"),
]


@pytest.mark.parametrize("bad", [{"city": "Lisbon", "nights": 3, "pool": True}, {"city": "Lisbon"}],
                         ids=["a-parameter-made-up", "a-parameter-left-out"])
async def test_a_call_that_does_not_fit_the_function_is_not_applied_and_the_rollback_is_clean(
        tmp_path: Path, bad: dict[str, Any]) -> None:
    trip = SeatTrip()
    calls = [("hold_seat", {"flight": "TP1351"}), ("book_hotel", bad)]

    def scripted(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        turn = sum(m.role == MessageRole.TOOL for m in messages)
        if turn >= len(calls):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        name, args = calls[turn]
        return ChatMessage(role=MessageRole.ASSISTANT,
                           blocks=[ToolCallBlock(tool_call_id=f"call_{turn}", tool_name=name, tool_kwargs=args)])

    agent = FunctionAgent(
        llm=MockFunctionCallingLLM(response_generator=scripted), system_prompt="Book the trip.",
        tools=[wrap_tool(FunctionTool.from_defaults(trip.hold_seat), semantics="COMPENSABLE", compensate=trip.seat_undo),
               wrap_tool(FunctionTool.from_defaults(trip.book_hotel), semantics="COMPENSABLE",
                         compensate=trip.room_undo)],
    )
    wal = FileWAL(tmp_path / "trip.wal")
    try:
        with pytest.raises(SagaAborted) as aborted:
            await saga_run(agent, user_msg="Lisbon", wal=wal)
        records = [(r["type"], r.get("step")) for r in wal.records()]
    finally:
        wal.close()
    assert_seat_released(trip, tmp_path / "trip.wal", aborted.value)
    assert ("STEP_NOT_APPLIED", 2) in records and ("STEP_UNKNOWN", 2) not in records
    assert "does not fit its parameters" in str(aborted.value.cause)
