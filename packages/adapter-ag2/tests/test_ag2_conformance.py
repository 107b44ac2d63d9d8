"""The shared adapter promises, checked through AG2's conversation loop, sync and async."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, ClassVar

from ag2_drive import chat, pair
from agent_saga_ag2 import saga_run, saga_run_sync
from autogen.tools import Tool

from agent_saga.log.file import FileWAL
from agent_saga.testing import AdapterConformance, Call


class TestAG2Conformance(AdapterConformance):
    """``initiate_chat``: a sync tool runs on the caller's thread, an async one on a thread AG2 starts."""

    framework = "ag2"
    # AG2 turns a tool's exception into an "Error: ..." reply and the chat goes on.
    error_modes = (True,)
    sync: ClassVar[bool] = True
    parallel: ClassVar[str | None] = None  # the sync chat runs one reply's tool calls one after another

    def make_tool(self, fn: Callable[..., Any]) -> Tool:
        return Tool(func_or_tool=fn)

    def shape(self, tool: Any) -> tuple[str, str, Any]:
        return tool.name, tool.description, tool.tool_schema

    def run(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None,
        together: bool = False, **saga: Any,
    ) -> Any:
        script = [(c.tool, c.args) for c in calls]
        with pair(tools, script, together=together) as (executor, assistant):
            turns_asked = 1 if together else len(calls)
            options = {"message": "go", "max_turns": turns_asked + 1, "silent": True, "wal": wal, **saga}
            if self.sync:
                return saga_run_sync(executor, assistant, **options)
            return asyncio.run(saga_run(executor, assistant, **options))

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None, **saga: Any
    ) -> Any:
        return self.run(tools, calls, wal=wal, errors_as_results=errors_as_results, together=True, **saga)

    def run_plain(self, tools: list[Any], calls: list[Call]) -> Any:
        return chat(tools, [(c.tool, c.args) for c in calls], sync=self.sync)


    def tool_results(self, result: Any) -> list[str] | None:
        return [str(m["content"]) for m in result.chat_history if m.get("role") == "tool"]

class TestAG2AsyncConformance(TestAG2Conformance):
    """``a_initiate_chat``: every tool runs on the event loop."""

    sync = False
    parallel = "tasks"  # one reply's tool calls gathered (asyncio.gather); a sync tool runs inline on the loop
