"""A model response's tool calls reach a Speculator through LlamaIndex's real FunctionAgent workflow."""

from __future__ import annotations

import asyncio
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

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope

# llama-index-workflows walks the agent with inspect.getmembers(), which touches pydantic's
# deprecated __fields__ / model_fields accessors. That is the framework's warning, not ours.
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `__fields__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The `__fields_set__` attribute is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Accessing the 'model_.*' attribute on the instance is deprecated:DeprecationWarning"),
]

CALLS = [("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5})]


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def read_page(self, page: int) -> str:
        """Read one page of the report."""
        self.reads.append(page)
        return f"page {page}"

    def reserve(self, seat: int) -> dict[str, int]:
        """Reserve a seat."""
        self.reserved.append(seat)
        return {"seat": seat}

    def tools(self) -> list[Any]:
        return [
            wrap_tool(FunctionTool.from_defaults(self.read_page), semantics="REVERSIBLE"),
            wrap_tool(FunctionTool.from_defaults(self.reserve), semantics="COMPENSABLE",
                      compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]})),
        ]


def one_response() -> MockFunctionCallingLLM:
    """A model that asks for two reads and a reservation in one response, then stops."""

    def respond(messages: list[ChatMessage], **_: Any) -> ChatMessage:
        if any(m.role == MessageRole.TOOL for m in messages):
            return ChatMessage(role=MessageRole.ASSISTANT, content="done")
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[
            ToolCallBlock(tool_call_id=f"call_{i}", tool_name=name, tool_kwargs=args) for i, (name, args) in enumerate(CALLS)
        ])

    return MockFunctionCallingLLM(response_generator=respond)


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


def planners() -> list[Any]:
    return [h for h in get_dispatcher().span_handlers if isinstance(h, PlannedCalls)]


def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed() -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = desk.tools()
    agent = FunctionAgent(tools=tools, llm=one_response())

    async def main() -> Speculator:
        async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            await saga_run(agent, user_msg="go")
        return ahead

    ahead = asyncio.run(main())
    # each body ran once per call: the reads on the speculator's threads, then redeemed
    assert sorted(desk.reads) == [1, 2] and desk.reserved == [5] and desk.released == []
    redeemed = records(wal, "SPECULATION_REDEEMED")
    assert sorted(r["body"]["tool"] for r in redeemed) == ["read_page", "read_page"]
    committed = {r["step"]: r["body"] for r in records(wal, "STEP_COMMITTED")}
    assert sorted(committed[r["step"]]["args"]["page"] for r in redeemed) == [1, 2]
    steps = {r["step"]: r["body"]["tool"] for r in wal.records() if r["type"].startswith("STEP_") and "tool" in r["body"]}
    assert sorted(steps.values()) == ["read_page", "read_page", "reserve"]
    # the COMPENSABLE call in the same response was never run ahead
    assert ahead.stats.started == 2 and ahead.stats.redeemed == 2 and ahead.stats.wasted == 0
    assert ahead.stats.reasons == {"only a REVERSIBLE step may be speculated; 'reserve' is COMPENSABLE": 1}
    # the handler is gone with the run
    assert planners() == []


def test_without_a_speculator_no_span_handler_is_added() -> None:
    before = list(get_dispatcher().span_handlers)
    with _planning():  # outside a saga
        assert get_dispatcher().span_handlers == before
    with saga_scope(wal=MemoryWAL()), _planning():
        assert get_dispatcher().span_handlers == before
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"):
        with _planning():
            with _planning():  # a second run at once: still one handler
                assert len(planners()) == 1
            assert len(planners()) == 1  # the first run is still open
        assert planners() == [] and get_dispatcher().span_handlers == before


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([FunctionTool.from_defaults(Desk().read_page)])
