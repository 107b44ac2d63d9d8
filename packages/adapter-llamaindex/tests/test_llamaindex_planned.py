"""A model response's tool calls reach a Speculator through LlamaIndex's real FunctionAgent workflow."""

from __future__ import annotations

from typing import Any

import pytest
from agent_saga_llamaindex import PlannedCalls, adapter, saga_run, wrap_tool
from agent_saga_llamaindex._adapter import _planning
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, Desk, check_redeemed, run_ahead

# llama-index-workflows walks the agent with inspect.getmembers(), which touches pydantic's
# deprecated __fields__ / model_fields accessors. That is the framework's warning, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_.*' attribute on the instance is deprecated:DeprecationWarning"),
]


def wrapped(desk: Desk) -> list[Any]:
    """The desk's two functions as LlamaIndex tools, wrapped."""
    return desk.tools(wrap_tool, FunctionTool.from_defaults)


def one_response() -> MockFunctionCallingLLM:
    """A model that asks for two reads and a reservation in one response, then stops."""

    def respond(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[
            ToolCallBlock(tool_call_id=f"call_{i}", tool_name=name, tool_kwargs=args) for i, (name, args) in enumerate(CALLS)
        ])

    return MockFunctionCallingLLM(response_generator=respond)


def planners() -> list[Any]:
    return [h for h in get_dispatcher().span_handlers if isinstance(h, PlannedCalls)]


def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed() -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    agent = FunctionAgent(tools=tools, llm=one_response())

    ahead = run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(agent, user_msg="go"))
    check_redeemed(wal, ahead, desk)
    # the handler is gone with the run
    assert planners() == []


def test_without_a_speculator_no_span_handler_is_added() -> None:
    before = list(get_dispatcher().span_handlers)
    with _planning():  # outside a saga
        assert get_dispatcher().span_handlers == before
    with saga_scope(wal=MemoryWAL()), _planning():
        assert get_dispatcher().span_handlers == before
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"):
        with _planning():
            with _planning():  # a second run at once: still one handler
                assert len(planners()) == 1
            assert len(planners()) == 1  # the first run is still open
        assert planners() == [] and get_dispatcher().span_handlers == before


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([FunctionTool.from_defaults(Desk().functions()[0])])
