"""The shared adapter promises, checked through the OpenAI Agents SDK's real Runner loop."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any

import pytest
from agent_saga_openai_agents import saga_run, wrap_tool
from agents import Agent, FunctionTool, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import set_function_tool_failure_error_function

from agent_saga.log.file import FileWAL
from agent_saga.testing import RUN_ON, AdapterConformance, Call

set_tracing_disabled(True)


def agent(tools: list[Any], calls: list[Call], *, together: bool = False) -> Agent[Any]:
    """A scripted model making one call per response, or (``together``) every call in one response."""
    requests = [function_call(c.tool, c.args, call_id=f"call_{i}") for i, c in enumerate(calls)]
    steps: list[Any] = [requests] if together else [[request] for request in requests]
    steps.append([assistant_message("done")])
    return Agent(name="worker", instructions="use the tools", tools=tools, model=ScriptedModel(steps))


class TestOpenAIAgentsConformance(AdapterConformance):
    framework = "openai_agents"
    # The SDK's default failure function gives the model an error message; with
    # failure_error_function=None the exception ends the run.
    error_modes = (True, False)
    # The Runner runs one response's function calls as asyncio tasks (a sync function via
    # asyncio.to_thread); a raising call cancels the sibling tasks and ends the run, while
    # their threads run on.
    parallel = "threads"
    parallel_siblings = RUN_ON

    def make_tool(self, fn: Callable[..., Any]) -> FunctionTool:
        return function_tool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.params_json_schema

    def _tools(self, tools: list[Any], errors_as_results: bool | None) -> list[Any]:
        if errors_as_results is not False:
            return tools
        raising = []
        for t in tools:
            t = copy.copy(t)
            set_function_tool_failure_error_function(t, None)
            raising.append(t)
        return raising

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return asyncio.run(saga_run(agent(self._tools(tools, errors_as_results), calls), "go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = agent(self._tools(tools, errors_as_results), calls, together=True)
        return asyncio.run(saga_run(worker, "go", wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(agent(tools, calls, together=True), "go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return asyncio.run(Runner.run(agent(tools, calls), "go"))

    def tool_results(self, result: Any) -> list[str] | None:
        return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


def test_the_sync_face_runs_one_saga(tmp_path: Any) -> None:
    from agent_saga_openai_agents import saga_run_sync

    from agent_saga import Compensation, SagaAborted, compensator
    from agent_saga.plugins import ToolFailed

    undone: list[str] = []

    @compensator("oa_test.cancel")
    def cancel(order: str) -> None:
        undone.append(order)

    @function_tool
    def order(item: str) -> dict[str, str]:
        """Place an order."""
        return {"order": f"o-{item}"}

    @function_tool
    def ship(order: str) -> str:
        """Ship it."""
        raise RuntimeError("carrier down")

    safe_order = wrap_tool(order, semantics="COMPENSABLE",
                           compensate=lambda r: Compensation(fn=cancel, handler="oa_test.cancel",
                                                             kwargs={"order": r["order"]}))
    safe_ship = wrap_tool(ship, semantics="IRREVERSIBLE")
    wal = FileWAL(tmp_path / "w.wal")
    with pytest.raises(SagaAborted) as caught:
        saga_run_sync(agent([safe_order, safe_ship], [Call("order", {"item": "x"}), Call("ship", {"order": "o-x"})]),
                      "go", wal=wal)
    assert undone == ["o-x"]
    assert isinstance(caught.value.cause, ToolFailed)
    assert str(caught.value.cause.cause) == "carrier down"
    wal.close()
