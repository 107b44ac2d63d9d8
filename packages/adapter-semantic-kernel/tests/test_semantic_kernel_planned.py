"""A model response's function calls reach a Speculator through ChatCompletionAgent's auto function calling."""

from __future__ import annotations

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

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, Desk, check_redeemed, records, run_ahead


def wrapped(desk: Desk) -> list[Any]:
    """The desk's two functions as Semantic Kernel tools, wrapped."""
    return desk.tools(wrap_tool, kernel_tool)


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


def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed() -> None:
    desk, wal, seen = Desk(), MemoryWAL(), []
    tools = wrapped(desk)
    worker = agent(tools, [response(CALLS)])

    async def mine(context: Any, next: Any) -> None:  # the caller's own filter
        seen.append(context.function.name)
        await next(context)

    worker.kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, mine)

    ahead = run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(worker, messages="go"))
    check_redeemed(wal, ahead, desk)
    # the caller's filter still ran for every call, inside ours (ours is outermost: last in the list)
    assert sorted(seen) == ["read_page", "read_page", "reserve"]
    assert [f for _, f in worker.kernel.auto_function_invocation_filters] == [mine, planned_filter]


def test_the_same_calls_asked_again_are_a_new_response() -> None:
    """Responses are told apart by identity: a message's hash and equality are its content."""
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    reads = [("read_page", {"page": 1}), ("read_page", {"page": 2})]
    worker = agent(tools, [response(reads, 0), response(reads, 0)])
    assert response(reads, 0) == response(reads, 0)

    ahead = run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(worker, messages="go"))
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
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"):
        _planning(kernel)
        _planning(kernel)  # once
    assert [f for _, f in kernel.auto_function_invocation_filters] == [mine, planned_filter]


def test_steps_refuses_a_function_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([kernel_tool(plain)])
