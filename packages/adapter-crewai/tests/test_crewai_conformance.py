"""The shared adapter promises, checked through CrewAI's real agent loop."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any

from agent_saga_crewai import saga_kickoff, saga_kickoff_async
from crewai.tools import BaseTool, tool
from crewai_drive import crew

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call


class TestCrewAIConformance(AdapterConformance):
    framework = "crewai"
    # CrewAI's default policy ("warn") hands a tool exception to the model as text;
    # tool_failure_policy="raise" ends the run with ToolExecutionFailedError.
    error_modes = (False, True)
    # One response's native tool calls run on a ThreadPoolExecutor of their own; a raising call
    # ends the run only once the pool's with-block has joined the calls in flight.
    parallel = "threads"

    def make_tool(self, fn: Callable[..., Any]) -> BaseTool:
        return tool(fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.args_schema.model_json_schema()

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        policy = None if errors_as_results is None else ("warn" if errors_as_results else "raise")
        return saga_kickoff(crew(tools, [(c.tool, c.args) for c in calls], tool_failure_policy=policy), wal=wal, **saga)

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        policy = None if errors_as_results is None else ("warn" if errors_as_results else "raise")
        worker = crew(tools, [(c.tool, c.args) for c in calls], tool_failure_policy=policy, together=True)
        # Each run in a context of its own, as a server's requests are: CrewAI (1.15) leaves an event
        # on its context's event stack for every kickoff a tool's failure ends, and once 100 stand it
        # runs no tool any more ("Event stack depth limit (100) exceeded"; seen without agent-saga,
        # after 96 failed kickoffs): the stress lane makes hundreds.
        return contextvars.copy_context().run(saga_kickoff, worker, wal=wal, **saga)

    def run_parallel_async(self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any) -> Any:
        return saga_kickoff_async(crew(tools, [(c.tool, c.args) for c in calls], together=True), wal=wal, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return crew(tools, [(c.tool, c.args) for c in calls]).kickoff()

    def tool_results(self, result: Any) -> list[str] | None:
        return [str(m["content"]) for t in result.tasks_output for m in t.messages or () if m.get("role") == "tool"]
