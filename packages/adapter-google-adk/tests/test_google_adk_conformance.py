"""The shared adapter promises, checked through an ADK Agent run by its real Runner."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from agent_saga_google_adk import saga_run, saga_run_sync
from google.adk.agents.run_config import RunConfig
from google.adk.tools import FunctionTool
from google_adk_drive import POOL, POOL_THREADS, new_runner, run, session, tool_results

from agent_saga.log.file import FileWAL
from agent_saga.testing import CANCELLED, RUN_ON, AdapterConformance, Call


class TestGoogleADKConformance(AdapterConformance):
    """``Runner.run_async``: sync and async tools run on the event loop."""

    framework = "google_adk"
    # By default an ADK run ends with the tool's exception; an on_tool_error_callback can
    # answer the model with it instead and the run goes on.
    error_modes = (False, True)
    sync: ClassVar[bool] = False
    run_config: ClassVar[RunConfig | None] = None
    # One response's function calls run as asyncio tasks (gathered); a sync tool runs inline on
    # the loop, so only async tools overlap. A raising call cancels the others' tasks.
    parallel = "tasks"
    parallel_siblings = CANCELLED

    def make_tool(self, fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool._get_declaration()

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None,
        together: bool = False, **saga: Any,
    ) -> Any:
        runner = new_runner(tools, [(c.tool, c.args) for c in calls], errors_as_results=bool(errors_as_results),
                            together=together)
        options: dict[str, Any] = {"user_id": "user", "session_id": session(runner), "wal": wal, **saga}
        if self.run_config is not None:
            options["run_config"] = self.run_config
        if self.sync:
            return saga_run_sync(runner, "go", **options)
        return asyncio.run(saga_run(runner, "go", **options))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return self.run(tools, calls, wal=wal, errors_as_results=errors_as_results, together=True, **saga)

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        runner = new_runner(tools, [(c.tool, c.args) for c in calls], together=True)
        options: dict[str, Any] = {"user_id": "user", "session_id": session(runner), "wal": wal, **saga}
        if self.run_config is not None:
            options["run_config"] = self.run_config
        return saga_run(runner, "go", **options)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return run(new_runner(tools, [(c.tool, c.args) for c in calls]), sync=self.sync, run_config=self.run_config)

    def tool_results(self, result: Any) -> list[str] | None:
        return tool_results(result)


class TestGoogleADKSyncConformance(TestGoogleADKConformance):
    """``Runner.run``: the agent runs on a thread ADK starts (with a copy of the caller's context)."""

    sync = True


class TestGoogleADKToolPoolConformance(TestGoogleADKConformance):
    """``RunConfig.tool_thread_pool_config``: each sync tool runs on ADK's own executor thread."""

    run_config = POOL
    # Sync tools run at once on ADK's pool; the raising call cancels their tasks, not their threads.
    # (google-adk 2.10 uses the pool in live runs only: there a sync tool runs inline, as above.)
    parallel = "threads" if POOL_THREADS else "tasks"
    parallel_siblings = RUN_ON if POOL_THREADS else CANCELLED
