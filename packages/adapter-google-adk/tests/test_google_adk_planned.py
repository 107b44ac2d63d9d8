"""A model response's function calls reach a Speculator through ADK's real Runner loop."""

from __future__ import annotations

import asyncio
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

from agent_saga import Compensation, MemoryWAL, Speculator, saga_scope


class Desk:
    """Two reads and a reservation, each counting the calls of its body."""

    def __init__(self) -> None:
        self.reads: list[int] = []
        self.reserved: list[int] = []
        self.released: list[int] = []

    def tools(self) -> list[FunctionTool]:
        def read_page(page: int) -> str:
            """Read one page of the report."""
            self.reads.append(page)
            return f"page {page}"

        def reserve(seat: int) -> dict[str, int]:
            """Reserve a seat."""
            self.reserved.append(seat)
            return {"seat": seat}

        return [
            wrap_tool(read_page, semantics="REVERSIBLE"),
            wrap_tool(
                reserve,
                semantics="COMPENSABLE",
                compensate=lambda r: Compensation(fn=self.released.append, kwargs={"object": r["seat"]}),
            ),
        ]


class OneResponse(BaseLlm):
    """ADK's model interface: two reads and a reservation in one response, then "done"."""

    model: str = "scripted"
    turn: int = 0
    calls: list[tuple[str, dict[str, Any]]] = Field(
        default_factory=lambda: [("read_page", {"page": 1}), ("read_page", {"page": 2}), ("reserve", {"seat": 5})]
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


def records(wal: MemoryWAL, kind: str) -> list[dict[str, Any]]:
    return [r for r in wal.records() if r["type"] == kind]


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Counting()
    tools = desk.tools()
    agent = Agent(name="worker", model=OneResponse(), instruction="Use the tools.", tools=tools)
    runner = InMemoryRunner(app=App(name="saga", root_agent=agent, plugins=[mine]))
    given = list(runner.plugin_manager.plugins)
    kwargs = {"user_id": "user", "session_id": session(runner)}
    if run == "async":

        async def main() -> Speculator:
            async with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
                await saga_run(runner, "go", **kwargs)
            return ahead

        ahead = asyncio.run(main())
    else:
        with saga_scope(wal=wal), Speculator(adapter.steps(tools), intent="turn-1") as ahead:
            saga_run_sync(runner, "go", **kwargs)
    # each body ran once per call: the reads on the speculator's threads, then redeemed
    assert sorted(desk.reads) == [1, 2] and desk.reserved == [5] and desk.released == []
    redeemed = records(wal, "SPECULATION_REDEEMED")
    assert sorted(r["body"]["tool"] for r in redeemed) == ["read_page", "read_page"]
    committed = {r["step"]: r["body"] for r in records(wal, "STEP_COMMITTED")}
    assert sorted(committed[r["step"]]["args"]["page"] for r in redeemed) == [1, 2]
    steps = {r["step"]: r["body"]["tool"] for r in wal.records() if r["type"].startswith("STEP_") and "tool" in r["body"]}
    assert sorted(steps.values()) == ["read_page", "read_page", "reserve"]
    # the COMPENSABLE call in the same response was never run ahead
    assert ahead.stats.started == 2 and ahead.stats.redeemed == 2 and ahead.stats.wasted == 0
    assert ahead.stats.reasons == {"only a REVERSIBLE step may be speculated; 'reserve' is COMPENSABLE": 1}
    # the caller's own plugin still ran, every callback of it, and the runner is left as given
    assert mine.seen.count("after_model") == 2
    assert sorted(s for s in mine.seen if s.startswith("before_tool")) == [
        "before_tool:read_page", "before_tool:read_page", "before_tool:reserve"
    ]
    assert runner.plugin_manager.plugins == given


def test_without_a_speculator_the_runner_is_left_as_given() -> None:
    from agent_saga_google_adk._adapter import _planning

    runner = InMemoryRunner(agent=Agent(name="worker", model=OneResponse(), tools=Desk().tools()), app_name="saga")
    with _planning(runner):  # outside a saga
        assert runner.plugin_manager.plugins == []
    with saga_scope(wal=MemoryWAL()), _planning(runner):
        assert runner.plugin_manager.plugins == []
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"), _planning(runner):
        (plugin,) = runner.plugin_manager.plugins
        assert isinstance(plugin, PlannedCalls)
    assert runner.plugin_manager.plugins == []
    # one the caller registered is used as it is, and stays
    own = PlannedCalls()
    runner.plugin_manager.register_plugin(own)
    with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(Desk().tools()), intent="t"), _planning(runner):
        assert runner.plugin_manager.plugins == [own]
    assert runner.plugin_manager.plugins == [own]


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([FunctionTool(plain)])
