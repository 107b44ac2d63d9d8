"""The shared adapter promises, checked through LangGraph's real agent loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agent_saga_langgraph import saga_run
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph_drive import agent_graph, script

from agent_saga.log.file import FileWAL
from agent_saga.testing import RUN_ON, AdapterConformance, Call


class TestLangGraphConformance(AdapterConformance):
    framework = "langgraph"
    error_modes = (False, True)  # ToolNode re-raises by default; handle_tool_errors=True makes a message
    # An async graph run's ToolNode gathers one message's calls (asyncio.gather), a sync tool each
    # on an executor thread; the first exception ends the node while the others run on.
    parallel = "threads"
    parallel_siblings = RUN_ON

    def make_tool(self, fn: Callable[..., Any]) -> BaseTool:
        if asyncio.iscoroutinefunction(fn):
            return StructuredTool.from_function(coroutine=fn)
        return StructuredTool.from_function(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.tool_call_schema.model_json_schema()

    def _graph(self, tools: list[Any], calls: list[Call], errors_as_results: bool, together: bool = False) -> Any:
        model = script([(c.tool, c.args) for c in calls], together=together)
        return agent_graph(model, tools, handle_tool_errors=errors_as_results)

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        graph = self._graph(tools, calls, bool(errors_as_results))
        return asyncio.run(saga_run(graph, {"messages": [HumanMessage("go")]}, wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        graph = self._graph(tools, calls, bool(errors_as_results), together=True)
        return asyncio.run(saga_run(graph, {"messages": [HumanMessage("go")]}, wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(self._graph(tools, calls, False, together=True), {"messages": [HumanMessage("go")]}, wal=wal,
                        **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return asyncio.run(self._graph(tools, calls, False).ainvoke({"messages": [HumanMessage("go")]}))

    def tool_results(self, result: Any) -> list[str] | None:
        return [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
