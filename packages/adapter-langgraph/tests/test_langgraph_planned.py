"""A model response's tool calls reach a Speculator through LangGraph's real agent loop."""

from __future__ import annotations

from typing import Any

import pytest
from agent_saga_langgraph import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from agent_saga_langgraph._adapter import _planning
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import StructuredTool
from langgraph_drive import ScriptedModel, agent_graph

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, Desk, check_redeemed, run_ahead


def wrapped(desk: Desk) -> list[Any]:
    """The desk's two functions as LangChain tools, wrapped."""
    return desk.tools(wrap_tool, StructuredTool.from_function)


def one_response() -> ScriptedModel:
    """A model that asks for two reads and a reservation in one response, then stops."""
    calls = CALLS
    planned = AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": f"call_{i}"} for i, (n, a) in enumerate(calls)])
    return ScriptedModel(responses=[planned, AIMessage(content="done")])


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    graph = agent_graph(one_response(), tools)
    go = {"messages": [HumanMessage("go")]}
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(graph, go),
                      go_sync=lambda: saga_run_sync(graph, go))
    check_redeemed(wal, ahead, desk)


def test_without_a_speculator_the_run_config_is_left_as_given() -> None:
    config: dict[str, Any] = {"tags": ["x"]}
    assert _planning(config) is config  # outside a saga
    with saga_scope(wal=MemoryWAL()):
        assert _planning(config) is config and _planning(None) is None


def test_with_a_speculator_the_callers_own_callbacks_are_kept() -> None:
    desk = Desk()
    mine = PlannedCalls()
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(desk)), intent="t"):
        listed = _planning({"callbacks": [mine], "tags": ["x"]})
        assert listed["tags"] == ["x"] and listed["callbacks"][0] is mine and len(listed["callbacks"]) == 2
        manager = CallbackManager(handlers=[mine])
        managed = _planning({"callbacks": manager})["callbacks"]
        assert managed is not manager and manager.handlers == [mine] and len(managed.handlers) == 2


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    plain = StructuredTool.from_function(Desk().functions()[0])
    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
