"""The shared adapter promises, checked through Agno's Agent.arun and Agent.run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from agent_saga_agno import RunFailed, saga_run, saga_run_sync
from agno.run.base import RunStatus
from agno.tools.function import Function
from agno_drive import new_agent, run, tool_results

from agent_saga.context import current_saga
from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call, ledger
from agent_saga.testing._conformance import apublish, awhereami, reserve


class TestAgnoConformance(AdapterConformance):
    """``Agent.arun``: async tools on the loop, sync tools on a worker thread (a copied context)."""

    framework = "agno"
    # Agno hands a tool's exception to the model as the tool's result; the run goes on.
    error_modes = (True,)
    sync: ClassVar[bool] = False
    # arun gathers one response's calls (asyncio.gather, return_exceptions=True), a sync tool
    # via asyncio.to_thread: they run together and every one is awaited.
    parallel: ClassVar[str | None] = "threads"

    def make_tool(self, fn: Callable[..., Any]) -> Function:
        return Function.from_callable(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        # What the model is sent: the run's own copy, processed as an agent processes it.
        prepared = tool.model_copy(deep=True)
        prepared.process_entrypoint()
        return tool.name, tool.description, prepared.to_dict()

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        agent = new_agent(tools, [(c.tool, c.args) for c in calls])
        if self.sync:
            return saga_run_sync(agent, "go", wal=wal, **saga)
        return asyncio.run(saga_run(agent, "go", wal=wal, **saga))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        agent = new_agent(tools, [[(c.tool, c.args) for c in calls]])
        if self.sync:
            return saga_run_sync(agent, "go", wal=wal, **saga)
        return asyncio.run(saga_run(agent, "go", wal=wal, **saga))

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_run(new_agent(tools, [[(c.tool, c.args) for c in calls]]), "go", wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return run(new_agent(tools, [(c.tool, c.args) for c in calls]), sync=self.sync)

    def tool_results(self, result: Any) -> list[str] | None:
        return tool_results(result)


class TestAgnoSyncConformance(TestAgnoConformance):
    """``Agent.run``: sync tools on the caller's thread. Agno refuses async tools there (its own rule),
    so the two cases that mix in an async tool check that refusal instead."""

    sync = True
    parallel = None  # Agent.run runs one response's calls one after another

    def assert_agno_refuses_the_async_tool(self, fn: Callable[..., Any]) -> None:
        plain = run(new_agent([self.make_tool(fn)], []), sync=True)
        assert plain.status == RunStatus.error and "can't be used with synchronous agent.run()" in str(plain.content)
        # Wrapped, it fails the same way before any tool runs, and the run helper fails the saga.
        err = self.aborted([self.wrapped(reserve), self.wrapped(fn, "REVERSIBLE")], [Call("reserve", {"amount": 1})])
        assert isinstance(err.cause, RunFailed) and "can't be used with synchronous agent.run()" in str(err.cause)
        assert ledger() == [] and not self.records("STEP_INTENT") and self.records("SAGA_ROLLED_BACK")

    def test_the_saga_is_visible_on_the_thread_the_framework_uses(self) -> None:
        seen: list[Any] = []

        def where(note: str) -> dict[str, Any]:
            """Report where the tool runs."""
            saga = current_saga()
            seen.append(saga.saga_id if saga else None)
            return {"ref": "where"}

        self.run([self.wrapped(where, "REVERSIBLE")], [Call("where", {"note": "a"})], wal=self.wal)
        assert seen == [self.records("SAGA_STARTED")[0]["saga"]]
        self.assert_agno_refuses_the_async_tool(awhereami)

    def test_sync_and_async_tools_are_both_steps_and_both_undone(self) -> None:
        self.assert_agno_refuses_the_async_tool(apublish)
