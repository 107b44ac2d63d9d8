"""A model response's tool calls reach a Speculator through Pydantic AI's real agent loop."""

from __future__ import annotations

from typing import Any

import pytest
from agent_saga_pydantic_ai import PlannedCalls, _compat, adapter, saga_run, saga_run_sync, wrap_tool
from agent_saga_pydantic_ai._adapter import _planning
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import Desk, check_ran_once, check_redeemed, run_ahead

needs_run_capabilities = pytest.mark.skipif(
    not _compat.RUN_TAKES_CAPABILITIES,
    reason="this pydantic-ai-slim's runs take no capabilities (1.71): the helpers cannot add PlannedCalls to a run",
)


def wrapped(desk: Desk) -> list[Tool[Any]]:
    """The desk's two functions as Pydantic AI tools, wrapped."""
    return desk.tools(wrap_tool, Tool)


def one_response() -> FunctionModel:
    """A model that asks for two reads and a reservation in one response, then stops."""
    turns = [
        ModelResponse(parts=[
            ToolCallPart("read_page", {"page": 1}, tool_call_id="call_0"),
            ToolCallPart("read_page", '{"page": 2}', tool_call_id="call_1"),  # the model's JSON text, as it comes
            ToolCallPart("reserve", {"seat": 5}, tool_call_id="call_2"),
        ]),
        ModelResponse(parts=[TextPart("done")]),
    ]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return turns.pop(0)

    return FunctionModel(respond)


class Seen(AbstractCapability[Any]):
    """The caller's own capability: the tool calls of each model response it saw."""

    def __init__(self) -> None:
        self.responses: list[list[str]] = []

    async def after_model_request(self, ctx: RunContext[Any], *, request_context: Any, response: ModelResponse) -> ModelResponse:
        self.responses.append([call.tool_name for call in response.tool_calls])
        return response


@needs_run_capabilities
@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Seen()
    tools = wrapped(desk)
    agent = Agent(one_response(), tools=tools)
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(agent, "go", capabilities=[mine]),
                      go_sync=lambda: saga_run_sync(agent, "go", capabilities=[mine]))
    check_redeemed(wal, ahead, desk)
    # the caller's own capability still saw every response
    assert mine.responses == [["read_page", "read_page", "reserve"], []]


def test_an_agent_built_with_planned_calls_names_them_in_any_supported_release() -> None:
    """The route a release whose runs take no capabilities (1.71) has: the Agent's own capability."""
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    agent = Agent(one_response(), tools=tools, capabilities=[PlannedCalls()])

    check_redeemed(wal, run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(agent, "go")), desk)


def test_without_a_speculator_the_run_options_are_left_as_given() -> None:
    mine = PlannedCalls()
    agent = Agent(one_response(), tools=wrapped(Desk()))
    run: dict[str, Any] = {"deps": None, "capabilities": [mine]}
    bare: dict[str, Any] = {"deps": None}
    assert _planning(agent, run) is run and _planning(agent, bare) is bare  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        assert _planning(agent, run) is run and _planning(agent, bare) is bare
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"):
        planned = _planning(agent, bare)
        assert _planning(agent, run) is run  # the run has one already: each response is named once
        built_with = Agent(one_response(), tools=wrapped(Desk()), capabilities=[PlannedCalls()])
        assert _planning(built_with, bare) is bare
    if _compat.RUN_TAKES_CAPABILITIES:  # the caller's own options kept, theirs untouched
        assert planned["deps"] is None and bare == {"deps": None}
        assert [type(c) for c in planned["capabilities"]] == [PlannedCalls]
    else:
        assert planned is bare


def test_a_run_without_a_speculator_runs_every_call_once_and_speculates_nothing() -> None:
    desk, wal = Desk(), MemoryWAL()
    saga_run_sync(Agent(one_response(), tools=wrapped(desk)), "go", wal=wal)
    check_ran_once(wal, desk)


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([Tool(plain)])
