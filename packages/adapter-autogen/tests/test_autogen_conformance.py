"""The shared adapter promises, checked through AutoGen's AssistantAgent loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from agent_saga_autogen import saga_run
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_core.tools import FunctionTool
from autogen_drive import agent

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call


class TestAutoGenConformance(AdapterConformance):
    framework = "autogen"
    # AutoGen's workbench always turns a tool exception into an is_error result.
    error_modes = (True,)
    # AssistantAgent gathers one response's calls (asyncio.gather), a sync tool each on the loop's
    # executor, and awaits them all.
    parallel = "threads"

    def make_tool(self, fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(fn, description=inspect.getdoc(fn) or fn.__name__)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.schema

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        runner = agent(tools, [(c.tool, c.args) for c in calls])
        return asyncio.run(saga_run(runner, task="go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        runner = agent(tools, [(c.tool, c.args) for c in calls], together=True)
        return asyncio.run(saga_run(runner, task="go", wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(agent(tools, [(c.tool, c.args) for c in calls], together=True), task="go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return asyncio.run(agent(tools, [(c.tool, c.args) for c in calls]).run(task="go"))

    def tool_results(self, result: Any) -> list[str] | None:
        return [str(r.content) for m in result.messages if isinstance(m, ToolCallExecutionEvent) for r in m.content]
