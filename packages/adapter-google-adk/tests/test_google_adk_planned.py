"""A model response's function calls reach a Speculator through ADK's real Runner loop."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import pytest
from agent_saga_google_adk import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from google.adk.agents import Agent
from google.adk.apps import App
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools import FunctionTool
from google.genai import types
from google_adk_drive import session
from pydantic import Field

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, Desk, check_redeemed, run_ahead


def wrapped(desk: Desk) -> list[FunctionTool]:
    """The desk's two functions as ADK tools, wrapped."""
    return desk.tools(wrap_tool)


class OneResponse(BaseLlm):
    """ADK's model interface: two reads and a reservation in one response, then "done"."""

    model: str = "scripted"
    turn: int = 0
    calls: list[tuple[str, dict[str, Any]]] = Field(
        default_factory=lambda: list(CALLS)
    )

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        turn, self.turn = self.turn, self.turn + 1
        if turn == 0:
            parts = [types.Part(function_call=types.FunctionCall(name=n, args=a, id=f"call-{i}"))
                     for i, (n, a) in enumerate(self.calls)]
        else:
            parts = [types.Part(text="done")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


class Counting(BasePlugin):
    """The caller's own plugin."""

    def __init__(self) -> None:
        super().__init__(name="counting")
        self.seen: list[str] = []

    async def after_model_callback(self, *, callback_context: Any, llm_response: LlmResponse) -> None:
        self.seen.append("after_model")

    async def before_tool_callback(self, *, tool: Any, tool_args: Any, tool_context: Any) -> None:
        self.seen.append(f"before_tool:{tool.name}")


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = wrapped(desk)
    agent = Agent(name="worker", model=OneResponse(), instruction="Use the tools.", tools=tools)
    runner = InMemoryRunner(app=App(name="saga", root_agent=agent, plugins=[mine]))
    given = list(runner.plugin_manager.plugins)
    kwargs = {"user_id": "user", "session_id": session(runner)}
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(runner, "go", **kwargs),
                      go_sync=lambda: saga_run_sync(runner, "go", **kwargs))
    check_redeemed(wal, ahead, desk)
    # the caller's own plugin still ran, every callback of it, and the runner is left as given
    assert mine.seen.count("after_model") == 2
    assert sorted(s for s in mine.seen if s.startswith("before_tool")) == [
        "before_tool:read_page", "before_tool:read_page", "before_tool:reserve"
    ]
    assert runner.plugin_manager.plugins == given


def test_without_a_speculator_the_runner_is_left_as_given() -> None:
    from agent_saga_google_adk._adapter import _planning

    runner = InMemoryRunner(agent=Agent(name="worker", model=OneResponse(), tools=wrapped(Desk())), app_name="saga")
    with _planning(runner):  # outside a saga
        assert runner.plugin_manager.plugins == []
    with saga_scope(wal=MemoryWAL()), _planning(runner):
        assert runner.plugin_manager.plugins == []
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"), _planning(runner):
        (plugin,) = runner.plugin_manager.plugins
        assert isinstance(plugin, PlannedCalls)
    assert runner.plugin_manager.plugins == []
    # one the caller registered is used as it is, and stays
    own = PlannedCalls()
    runner.plugin_manager.register_plugin(own)
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(wrapped(Desk())), intent="t"), _planning(runner):
        assert runner.plugin_manager.plugins == [own]
    assert runner.plugin_manager.plugins == [own]


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([FunctionTool(plain)])
