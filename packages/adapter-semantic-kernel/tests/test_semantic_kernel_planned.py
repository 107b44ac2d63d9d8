"""A model response's function calls reach a Speculator through ChatCompletionAgent's auto function calling."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_saga_semantic_kernel import adapter, planned_filter, saga_run, wrap_tool
from agent_saga_semantic_kernel._adapter import _planning
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.contents import AuthorRole, ChatMessageContent, FunctionCallContent
from semantic_kernel.filters.filter_types import FilterTypes
from semantic_kernel.functions import KernelPlugin
from sk_drive import PLUGIN, ScriptedChat, kernel_tool

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope

CALLS = [("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5})]


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def tools(self) -> list[Any]:
        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        return [
            wrap_tool(kernel_tool(read_page), semantics="REVERSIBLE"),
            wrap_tool(kernel_tool(reserve), semantics="COMPENSABLE",
                      compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]})),
        ]


def response(calls: list[tuple[str, dict[str, Any]]], turn: int = 0) -> ChatMessageContent:
    """One model response asking for every call of ``calls``."""
    return ChatMessageContent(role=AuthorRole.ASSISTANT, items=[
        FunctionCallContent(id=f"call_{turn}_{i}", function_name=name, plugin_name=PLUGIN, arguments=json.dumps(args))
        for i, (name, args) in enumerate(calls)
    ])


def agent(tools: list[Any], responses: list[ChatMessageContent]) -> ChatCompletionAgent:
    script = [*responses, ChatMessageContent(role=AuthorRole.ASSISTANT, content="done")]
    return ChatCompletionAgent(
        name="worker", instructions="use the tools", plugins=[KernelPlugin(name=PLUGIN, functions=tools)],
        service=ScriptedChat(ai_model_id="scripted", script=script),
        function_choice_behavior=FunctionChoiceBehavior.Auto(),
    )


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed() -> None:
    desk, wal, seen = Desk(), MemoryWAL(), []
    tools = desk.tools()
    worker = agent(tools, [response(CALLS)])

    async def mine(context: Any, next: Any) -> None:  # the caller's own filter
        seen.append(context.function.name)
        await next(context)

    worker.kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, mine)

    async def main() -> Speculator:
        async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            await saga_run(worker, messages="go")
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
    # the caller's filter still ran for every call, inside ours (ours is outermost: last in the list)
    assert sorted(seen) == ["read_page", "read_page", "reserve"]
    assert [f for _, f in worker.kernel.auto_function_invocation_filters] == [mine, planned_filter]


def test_the_same_calls_asked_again_are_a_new_response() -> None:
    """Responses are told apart by identity: a message's hash and equality are its content."""
    desk, wal = Desk(), MemoryWAL()
    tools = desk.tools()
    reads = [("read_page", {"page": 1}), ("read_page", {"page": 2})]
    worker = agent(tools, [response(reads, 0), response(reads, 0)])
    assert response(reads, 0) == response(reads, 0)

    async def main() -> Speculator:
        async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            await saga_run(worker, messages="go")
        return ahead

    ahead = asyncio.run(main())
    assert sorted(desk.reads) == [1, 1, 2, 2]
    assert ahead.stats.started == 4 and ahead.stats.redeemed == 4 and len(records(wal, "SPECULATION_REDEEMED")) == 4


def test_without_a_speculator_the_kernel_is_left_as_given() -> None:
    async def mine(context: Any, next: Any) -> None:
        await next(context)

    kernel = Kernel()
    kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, mine)
    _planning(kernel)  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        _planning(kernel)
    assert [f for _, f in kernel.auto_function_invocation_filters] == [mine]
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"):
        _planning(kernel)
        _planning(kernel)  # once
    assert [f for _, f in kernel.auto_function_invocation_filters] == [mine, planned_filter]


def test_steps_refuses_a_function_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([kernel_tool(plain)])
