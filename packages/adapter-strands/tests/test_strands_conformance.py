"""The shared adapter promises, checked through Strands' real agent loop, async and blocking."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from agent_saga_strands import saga_run, saga_run_sync
from strands import tool
from strands_drive import agent, tool_results

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call


class Ran:
    """What a run returned, and the agent it ran (whose messages hold the tool results)."""

    def __init__(self, result: Any, worker: Any) -> None:
        self.result, self.worker = result, worker


class TestStrandsConformance(AdapterConformance):
    """``invoke_async``: an async tool runs on the loop, a sync one via ``asyncio.to_thread``."""

    framework = "strands"
    # Strands turns a tool's exception into an error result; the loop goes on.
    error_modes = (True,)
    sync: ClassVar[bool] = False
    # The default ConcurrentToolExecutor runs one response's tool uses as asyncio tasks (a sync
    # tool via asyncio.to_thread) and waits for them all.
    parallel = "threads"

    def make_tool(self, fn: Callable[..., Any]) -> Any:
        return tool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.tool_name, tool.tool_spec["description"], tool.tool_spec["inputSchema"]

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = agent(tools, [(c.tool, c.args) for c in calls])
        if self.sync:
            return Ran(saga_run_sync(worker, "go", wal=wal, **saga), worker)
        return Ran(asyncio.run(saga_run(worker, "go", wal=wal, **saga)), worker)

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        worker = agent(tools, [[(c.tool, c.args) for c in calls]])
        if self.sync:
            return Ran(saga_run_sync(worker, "go", wal=wal, **saga), worker)
        return Ran(asyncio.run(saga_run(worker, "go", wal=wal, **saga)), worker)

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(agent(tools, [[(c.tool, c.args) for c in calls]]), "go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        worker = agent(tools, [(c.tool, c.args) for c in calls])
        return Ran(worker("go") if self.sync else asyncio.run(worker.invoke_async("go")), worker)

    def tool_results(self, result: Any) -> list[str] | None:
        return tool_results(result.worker)


class TestStrandsBlockingConformance(TestStrandsConformance):
    """``agent(prompt)``: Strands runs the loop on a thread of its own (with a copied context)."""

    sync = True
    run_parallel_async = AdapterConformance.run_parallel_async  # the async class cancels the async run
