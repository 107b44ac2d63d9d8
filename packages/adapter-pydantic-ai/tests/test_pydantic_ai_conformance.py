"""The shared adapter promises, checked through Pydantic AI's real agent loop, async and sync."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, ClassVar

from agent_saga_pydantic_ai import saga_run, saga_run_sync
from pydantic_ai import Tool
from pydantic_ai.capabilities import Hooks
from pydantic_ai_drive import agent, tool_results

from agent_saga.log.file import FileWAL
from agent_saga.testing import RUN_ON, AdapterConformance, Call


def errors_to_the_model(ctx: Any, *, call: Any, tool_def: Any, args: Any, error: Exception) -> Any:
    """Pydantic AI's documented way to show the model a tool's failure instead of ending the run.

    (The hook's return value becomes the tool's result; newer releases also offer ``ToolFailed``.)
    """
    return f"Error: {error}"


def _no_retries(tool: Tool[Any]) -> Tool[Any]:
    single = copy.copy(tool)
    single.max_retries = 0
    return single


class TestPydanticAIConformance(AdapterConformance):
    """``Agent.run``: an async tool runs on the loop, a sync one on a worker thread."""

    framework = "pydantic_ai"
    # By default a tool's exception ends Pydantic AI's run; an on_tool_execute_error hook that
    # returns a value hands the model that value instead. (A gate's repair request is the model's
    # to answer in both: it arrives as ModelRetry, within the tool's retries.)
    error_modes = (False, True)
    sync: ClassVar[bool] = False
    parallel = "threads"
    parallel_siblings = RUN_ON

    def make_tool(self, fn: Callable[..., Any]) -> Tool[Any]:
        return Tool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.tool_def.parameters_json_schema

    def _agent(
        self, tools: list[Any], calls: list[Call], errors_as_results: bool | None = None, together: bool = False
    ) -> Any:
        options: dict[str, Any] = {}
        if errors_as_results is False:  # no retries: a repair request (ModelRetry) ends the run too
            tools = [_no_retries(t) for t in tools]
        elif errors_as_results:
            options["capabilities"] = [Hooks(tool_execute_error=errors_to_the_model)]
        return agent(tools, [(c.tool, c.args) for c in calls], together=together, **options)

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = self._agent(tools, calls, errors_as_results)
        if self.sync:
            return saga_run_sync(worker, "go", wal=wal, **saga)
        return asyncio.run(saga_run(worker, "go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = self._agent(tools, calls, errors_as_results, together=True)
        if self.sync:
            return saga_run_sync(worker, "go", wal=wal, **saga)
        return asyncio.run(saga_run(worker, "go", wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(self._agent(tools, calls, together=True), "go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        worker = self._agent(tools, calls)
        return worker.run_sync("go") if self.sync else asyncio.run(worker.run("go"))

    def tool_results(self, result: Any) -> list[str] | None:
        return tool_results(result)


class TestPydanticAISyncConformance(TestPydanticAIConformance):
    """``Agent.run_sync``: the same loop, started from blocking code."""

    sync = True
    run_parallel_async = AdapterConformance.run_parallel_async  # the async class cancels the async run
