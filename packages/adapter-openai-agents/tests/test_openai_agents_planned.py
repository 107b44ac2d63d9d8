"""A model response's function calls reach a Speculator through the Agents SDK's real Runner loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_saga_openai_agents import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from agents import Agent, FunctionTool, RunHooks, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope

set_tracing_disabled(True)


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def tools(self) -> list[FunctionTool]:
        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        return [
            wrap_tool(function_tool(read_page), semantics="REVERSIBLE"),
            wrap_tool(
                function_tool(reserve),
                semantics="COMPENSABLE",
                compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]}),
            ),
        ]


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


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = desk.tools()
    agent = one_response(tools)
    if run == "async":

        async def main() -> Speculator:
            async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                await saga_run(agent, "go", hooks=mine)
            return ahead

        ahead = asyncio.run(main())
    else:
        with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            saga_run_sync(agent, "go", hooks=mine)
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
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"):
        hooks = _planning(runner)["hooks"]
        assert isinstance(hooks, PlannedCalls) and hooks.inner is None


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    @function_tool
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
