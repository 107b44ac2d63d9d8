"""A model response's tool calls reach a Speculator through a Crew's real agent loop."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_saga_crewai import PlannedCalls, adapter, saga_kickoff, saga_kickoff_async, wrap_tool
from agent_saga_crewai._adapter import _planning
from crewai import Agent, Crew, Task
from crewai.hooks.dispatch import InterceptionPoint, get_scoped_hooks, register_scoped, scoped_hooks
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from pydantic import Field

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, Desk, check_redeemed, records, run_ahead


class OneResponse(BaseLLM):
    """Native function calling: ``responses`` responses with every call of ``calls``, then a final answer."""

    turn: int = 0
    responses: int = 1
    calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=lambda: list(CALLS))

    def supports_function_calling(self) -> bool:
        return True

    def call(self, messages: Any, tools: Any = None, callbacks: Any = None,
             available_functions: Any = None, **kwargs: Any) -> Any:
        self.turn += 1
        if self.turn <= self.responses:
            return [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                    for i, (n, a) in enumerate(self.calls)]
        return "done"

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)


def wrapped(desk: Desk) -> list[Any]:
    """The desk's two functions as CrewAI tools, wrapped."""
    return desk.tools(wrap_tool, lambda fn: tool(fn.__name__)(fn))


def one_response(tools: list[Any], llm: OneResponse | None = None) -> Crew:
    agent = Agent(role="worker", goal="do the task", backstory="a scripted agent", tools=tools,
                  llm=llm or OneResponse(model="scripted"), verbose=False)
    return Crew(agents=[agent], tasks=[Task(description="do the task", expected_output="done", agent=agent)])


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, seen = Desk(), MemoryWAL(), []
    tools = wrapped(desk)
    crew = one_response(tools)

    def mine(context: Any) -> None:  # the caller's own scoped hook
        seen.append(context.tool_name)

    with scoped_hooks():
        register_scoped(InterceptionPoint.PRE_TOOL_CALL, mine)
        ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_kickoff_async(crew),
                          go_sync=lambda: saga_kickoff(crew))
        # the caller's scope is as it was: its own hook, not ours
        assert get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL) == [mine]
    check_redeemed(wal, ahead, desk)
    # the caller's own hook still ran, once per call
    assert sorted(seen) == ["read_page", "read_page", "reserve"]


def test_the_same_calls_asked_again_are_a_new_response() -> None:
    """Responses are told apart by identity: CrewAI's messages are dicts, equal when their calls are."""
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    reads = [("read_page", {"page": 1}), ("read_page", {"page": 2})]
    crew = one_response(tools, OneResponse(model="scripted", responses=2, calls=reads))
    with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
        saga_kickoff(crew)
    assert sorted(desk.reads) == [1, 1, 2, 2]
    assert ahead.stats.started == 4 and ahead.stats.redeemed == 4 and len(records(wal, "SPECULATION_REDEEMED")) == 4


def test_without_a_speculator_no_hook_scope_is_opened() -> None:
    def mine(context: Any) -> None:
        return None

    with scoped_hooks():
        register_scoped(InterceptionPoint.PRE_TOOL_CALL, mine)
        with _planning():  # outside a saga
            assert get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL) == [mine]
        with saga_scope(wal=MemoryWAL()), _planning():
            assert get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL) == [mine]
        with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"), _planning():
            inside = get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL)
            assert inside[0] is mine and isinstance(inside[1], PlannedCalls) and len(inside) == 2
        assert get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL) == [mine]


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    @tool("plain")
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
