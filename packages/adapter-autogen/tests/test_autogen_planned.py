"""A model response's tool calls reach a Speculator through AutoGen's real agent loop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agent_saga_autogen import PlannedCalls, adapter, saga_run, wrap_tool
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallExecutionEvent, ToolCallRequestEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_drive import MODEL_INFO
from autogen_ext.models.replay import ReplayChatCompletionClient

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, TOUCHES, Desk, check_ran_once, check_redeemed, records, run_ahead


def wrapped(desk: Desk) -> list[FunctionTool]:
    """The desk's two functions as AutoGen tools, wrapped."""
    return desk.tools(wrap_tool, lambda fn: FunctionTool(fn, description=fn.__doc__ or ""), async_reserve=True)


class Worker(AssistantAgent):
    """A real AssistantAgent that notes which of its run methods was called."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ran: list[str] = []

    async def run(self, **kwargs: Any) -> TaskResult:
        self.ran.append("run")
        return await super().run(**kwargs)

    def run_stream(self, **kwargs: Any) -> Any:
        self.ran.append("run_stream")
        return super().run_stream(**kwargs)


def one_response(tools: list[FunctionTool], name: str = "worker") -> Worker:
    """An agent whose model asks for two reads and a reservation in one response, then stops."""
    calls = CALLS
    response = CreateResult(
        content=[FunctionCall(id=f"call_{i}", name=n, arguments=json.dumps(a)) for i, (n, a) in enumerate(calls)],
        finish_reason="function_calls", usage=RequestUsage(prompt_tokens=0, completion_tokens=0), cached=False,
    )
    model = ReplayChatCompletionClient([response, "done"], model_info=MODEL_INFO)
    return Worker(name, model_client=model, tools=tools, reflect_on_tool_use=True)


def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed() -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    agent = one_response(tools)

    async def main() -> tuple[Speculator, Any]:
        async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1", touches=TOUCHES) as ahead:
            result = await saga_run(agent, task="go")
        return ahead, result

    ahead, result = asyncio.run(main())
    check_redeemed(wal, ahead, desk)
    # the helper streamed the run and returned the run's TaskResult, as run() would
    assert agent.ran == ["run_stream"]
    assert isinstance(result, TaskResult)
    kinds = [type(m).__name__ for m in result.messages]
    assert kinds[0] == "TextMessage" and kinds[-1] == "TextMessage" and result.messages[-1].content == "done"
    assert [type(m) for m in result.messages if isinstance(m, (ToolCallRequestEvent, ToolCallExecutionEvent))] == [
        ToolCallRequestEvent, ToolCallExecutionEvent
    ]


def test_without_a_speculator_the_agent_runs_as_given() -> None:
    desk, wal = Desk(), MemoryWAL()
    agent = one_response(wrapped(desk))

    async def main() -> Any:
        async with saga_scope(wal=wal):
            return await saga_run(agent, task="go")

    result = asyncio.run(main())
    assert agent.ran == ["run"]  # not streamed: nothing to tell
    assert isinstance(result, TaskResult) and result.messages[-1].content == "done"
    assert sorted(desk.reads) == [1, 2] and records(wal, "SPECULATION_REDEEMED") == []


def test_a_team_is_run_as_given_and_its_calls_are_not_run_ahead() -> None:
    # A team's events reach its stream through the team's runtime while its agents go on:
    # naming them there could start a read after the agent's own call ran it.
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    team = RoundRobinGroupChat([one_response(tools)], termination_condition=MaxMessageTermination(2))

    ahead = run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(team, task="go"))
    check_ran_once(wal, desk)
    assert ahead.stats.started == 0


def test_planned_calls_passes_every_item_on_and_closes_the_stream() -> None:
    closed: list[bool] = []

    async def stream() -> Any:
        try:
            yield "first"
            yield "second"
        finally:
            closed.append(True)

    async def main() -> list[Any]:
        seen = []
        async for item in PlannedCalls(stream()):
            seen.append(item)
            break  # the consumer stops early
        return seen

    assert asyncio.run(main()) == ["first"]
    assert closed == [True]


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([FunctionTool(plain, description="Plain.")])
