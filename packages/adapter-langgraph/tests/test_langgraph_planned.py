"""A model response's tool calls reach a Speculator through LangGraph's real agent loop."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agent_saga_langgraph import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from agent_saga_langgraph._adapter import _planning
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph_drive import ScriptedModel, agent_graph

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope


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
        read = wrap_tool(StructuredTool.from_function(self.read_page), semantics="REVERSIBLE")
        reserve = wrap_tool(
            StructuredTool.from_function(self.reserve),
            semantics="COMPENSABLE",
            compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]}),
        )
        return [read, reserve]


def one_response() -> ScriptedModel:
    """A model that asks for two reads and a reservation in one response, then stops."""
    calls = [("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5})]
    planned = AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"} for i, (n, a) in enumerate(calls)])
    return ScriptedModel(responses=[planned, AIMessage(content="done")])


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = desk.tools()
    graph = agent_graph(one_response(), tools)
    go = {"messages": [HumanMessage("go")]}
    if run == "async":

        async def main() -> Speculator:
            async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                await saga_run(graph, go)
            return ahead

        ahead = asyncio.run(main())
    else:
        with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            saga_run_sync(graph, go)
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


def test_without_a_speculator_the_run_config_is_left_as_given() -> None:
    config: dict[str, Any] = {"tags": ["x"]}
    assert _planning(config) is config  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        assert _planning(config) is config and _planning(None) is None


def test_with_a_speculator_the_callers_own_callbacks_are_kept() -> None:
    desk = Desk()
    mine = PlannedCalls()
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(desk.tools()), intent="t"):
        listed = _planning({"callbacks": [mine], "tags": ["x"]})
        assert listed["tags"] == ["x"] and listed["callbacks"][0] is mine and len(listed["callbacks"]) == 2
        manager = CallbackManager(handlers=[mine])
        managed = _planning({"callbacks": manager})["callbacks"]
        assert managed is not manager and manager.handlers == [mine] and len(managed.handlers) == 2


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    plain = StructuredTool.from_function(Desk().read_page)
    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
