"""The shared adapter promises, checked through Semantic Kernel's ChatCompletionAgent loop."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from agent_saga_semantic_kernel import saga_run
from semantic_kernel.contents import FunctionResultContent
from sk_drive import agent, kernel_tool

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call


class TestSemanticKernelConformance(AdapterConformance):
    framework = "semantic_kernel"
    # Auto function calling turns a function's exception into a result for the model.
    error_modes = (True,)
    # Auto function calling gathers one response's calls (asyncio.gather); a sync function runs
    # inline on the loop, so only async ones overlap.
    parallel = "tasks"

    def make_tool(self, fn: Callable[..., Any]) -> Any:
        return kernel_tool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, [(p.name, p.schema_data, p.is_required) for p in tool.parameters]

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return asyncio.run(saga_run(agent(tools, [(c.tool, c.args) for c in calls]), messages="go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = agent(tools, [(c.tool, c.args) for c in calls], together=True)
        return asyncio.run(saga_run(worker, messages="go", wal=wal, **saga))

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return asyncio.run(agent(tools, [(c.tool, c.args) for c in calls]).get_response(messages="go"))

    def tool_results(self, result: Any) -> list[str] | None:
        async def read() -> list[str]:
            found = result.thread.get_messages()
            if inspect.isawaitable(found):  # older releases (1.26): a coroutine returning the ChatHistory
                messages = list((await found).messages)
            else:  # newer ones: an async iterator of messages
                messages = [m async for m in found]
            return [str(i.result) for m in messages for i in m.items if isinstance(i, FunctionResultContent)]

        return asyncio.run(read())
