"""Drive an ADK ``Agent`` through its real ``Runner`` offline: a scripted ``BaseLlm`` makes the tool calls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import Agent
from google.adk.agents.run_config import RunConfig, ToolThreadPoolConfig
from google.adk.events import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools import BaseTool, ToolContext
from google.genai import types
from pydantic import Field

__all__ = ["POOL", "POOL_THREADS", "ScriptedLlm", "answer_errors", "new_runner", "run", "tool_results"]

#: ADK's own executor for sync tools: each runs on a worker thread with a copy of the context
#: (room for the three calls of the conformance suite's parallel response at once).
POOL = RunConfig(tool_thread_pool_config=ToolThreadPoolConfig(max_workers=3))


class ScriptedLlm(BaseLlm):
    """ADK's model interface, answering from a script: one tool call per turn, then "done"."""

    model: str = "scripted"
    calls: list[tuple[str, dict[str, Any]]] = Field(default_factory=list)
    #: every call in the first response (several function calls in one turn)
    together: bool = False
    turn: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn, self.turn = self.turn, self.turn + 1
        calls = list(enumerate(self.calls))
        asked = (calls if turn == 0 else []) if self.together else calls[turn:turn + 1]
        parts = [types.Part(function_call=types.FunctionCall(name=name, args=args, id=f"call-{i}"))
                 for i, (name, args) in asked] or [types.Part(text="done")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


async def answer_errors(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, error: Exception) -> Any:
    """An ``on_tool_error_callback`` that hands the model the error, as a user of ADK writes it."""
    return {"error": str(error)}


def new_runner(
    tools: list[Any], calls: list[tuple[str, dict[str, Any]]], *, errors_as_results: bool = False,
    together: bool = False,
) -> InMemoryRunner:
    agent = Agent(
        name="assistant", model=ScriptedLlm(calls=calls, together=together), instruction="Use the tools.", tools=tools,
        on_tool_error_callback=answer_errors if errors_as_results else None,
    )
    return InMemoryRunner(agent=agent, app_name="saga")


def session(runner: InMemoryRunner) -> str:
    async def create() -> str:
        return (await runner.session_service.create_session(app_name=runner.app_name, user_id="user")).id

    return asyncio.run(create())


def message(text: str = "go") -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


def run(runner: InMemoryRunner, *, sync: bool, run_config: RunConfig | None = None) -> list[Event]:
    """One run with no saga of its own: ``Runner.run`` (its own thread) or ``run_async`` on a new loop."""
    kwargs: dict[str, Any] = {"user_id": "user", "session_id": session(runner), "new_message": message()}
    if run_config is not None:
        kwargs["run_config"] = run_config
    if sync:
        return list(runner.run(**kwargs))

    async def collect() -> list[Event]:
        return [e async for e in runner.run_async(**kwargs)]

    return asyncio.run(collect())


def _pool_threads() -> bool:
    """Whether a ``Runner.run_async`` with :data:`POOL` runs a sync tool on a thread of ADK's pool.

    google-adk 2.13 does; 2.10 applies ``tool_thread_pool_config`` to live runs only, and runs a
    sync tool inline on the loop (seen by running one).
    """
    seen: list[str] = []

    def where() -> str:
        """Say where the tool runs."""
        seen.append(threading.current_thread().name)
        return "ok"

    run(new_runner([where], [("where", {})]), sync=False, run_config=POOL)
    return seen[0] != threading.current_thread().name


#: How sync tools run under :data:`POOL` with the installed google-adk (see ``_pool_threads``).
POOL_THREADS = _pool_threads()


def tool_results(events: list[Event]) -> list[str]:
    return [
        str(part.function_response.response)
        for event in events if event.content and event.content.parts
        for part in event.content.parts if part.function_response is not None
    ]
