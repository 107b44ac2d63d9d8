"""A model response's tool calls reach a Speculator through a Crew's real agent loop."""

from __future__ import annotations

import asyncio
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

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope

CALLS = [("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5})]


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


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def tools(self) -> list[Any]:
        @tool("read_page")
        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        @tool("reserve")
        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        return [
            wrap_tool(read_page, semantics="REVERSIBLE"),
            wrap_tool(reserve, semantics="COMPENSABLE",
                      compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]})),
        ]


def one_response(tools: list[Any], llm: OneResponse | None = None) -> Crew:
    agent = Agent(role="worker", goal="do the task", backstory="a scripted agent", tools=tools,
                  llm=llm or OneResponse(model="scripted"), verbose=False)
    return Crew(agents=[agent], tasks=[Task(description="do the task", expected_output="done", agent=agent)])


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


@pytest.mark.parametrize("run", ["sync", "async"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, seen = Desk(), MemoryWAL(), []
    tools = desk.tools()
    crew = one_response(tools)

    def mine(context: Any) -> None:  # the caller's own scoped hook
        seen.append(context.tool_name)

    with scoped_hooks():
        register_scoped(InterceptionPoint.PRE_TOOL_CALL, mine)
        if run == "async":

            async def main() -> Speculator:
                async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                    await saga_kickoff_async(crew)
                return ahead

            ahead = asyncio.run(main())
        else:
            with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                saga_kickoff(crew)
        # the caller's scope is as it was: its own hook, not ours
        assert get_scoped_hooks(InterceptionPoint.PRE_TOOL_CALL) == [mine]
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
    # the caller's own hook still ran, once per call
    assert sorted(seen) == ["read_page", "read_page", "reserve"]


def test_the_same_calls_asked_again_are_a_new_response() -> None:
    """Responses are told apart by identity: CrewAI's messages are dicts, equal when their calls are."""
    desk, wal = Desk(), MemoryWAL()
    tools = desk.tools()
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
        with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"), _planning():
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
