"""A model response's function calls reach a Speculator through the Agents SDK's real Runner loop."""

from __future__ import annotations

from typing import Any

import pytest
from agent_saga_openai_agents import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from agents import Agent, FunctionTool, RunHooks, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import Desk, check_redeemed, run_ahead

set_tracing_disabled(True)


def wrapped(desk: Desk) -> list[FunctionTool]:
    """The desk's two functions as Agents SDK tools, wrapped."""
    return desk.tools(wrap_tool, function_tool)


def one_response(tools: list[FunctionTool]) -> Agent[Any]:
    """An agent whose model asks for two reads and a reservation in one response, then stops."""
    response = [
        function_call("read_page", {"page": 1}, call_id="call_0"),
        function_call("read_page", '{"page": 2}', call_id="call_1"),  # the model's JSON text, as it comes
        function_call("reserve", {"seat": 5}, call_id="call_2"),
    ]
    return Agent(name="worker", instructions="use the tools", tools=tools,
                 model=ScriptedModel([response, [assistant_message("done")]]))


class Counting(RunHooks[Any]):
    """The caller's own hooks."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def on_llm_end(self, context: Any, agent: Any, response: Any) -> None:
        self.seen.append("llm_end")

    async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
        self.seen.append(f"tool_start:{tool.name}")


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = wrapped(desk)
    agent = one_response(tools)
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(agent, "go", hooks=mine),
                      go_sync=lambda: saga_run_sync(agent, "go", hooks=mine))
    check_redeemed(wal, ahead, desk)
    # the caller's own hooks still ran, every one of them
    assert mine.seen.count("llm_end") == 2
    assert sorted(s for s in mine.seen if s.startswith("tool_start")) == [
        "tool_start:read_page", "tool_start:read_page", "tool_start:reserve"
    ]


def test_without_a_speculator_the_run_options_are_left_as_given() -> None:
    from agent_saga_openai_agents._adapter import _planning

    runner: dict[str, Any] = {"max_turns": 3}
    assert _planning(runner) is runner  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        assert _planning(runner) is runner
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"):
        hooks = _planning(runner)["hooks"]
        assert isinstance(hooks, PlannedCalls) and hooks.inner is None


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    @function_tool
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
