"""A model response's tool calls reach a Speculator through Agno's real agent loop."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent_saga_agno import adapter, saga_run, saga_run_sync, wrap_tool
from agno.agent import Agent
from agno.tools.function import Function
from agno_drive import ScriptedModel

from agent_saga import MemoryWAL
from agent_saga.testing import CALLS, Desk, check_ran_once, check_redeemed, run_ahead

ONE_RESPONSE: list[Any] = [list(CALLS)]


def wrapped(desk: Desk) -> list[Function]:
    """The desk's two functions as Agno tools, wrapped."""
    return desk.tools(wrap_tool)


class Seen:
    """The caller's own tool hook (Agno middleware around each call): the calls it saw, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, function_name: str, function_call: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        self.calls.append(f"{function_name}{sorted(arguments.items())}")
        return function_call(**arguments)


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Seen()
    tools = wrapped(desk)
    worker = Agent(name="assistant", model=ScriptedModel(calls=ONE_RESPONSE), tools=tools, tool_hooks=[mine],
                   telemetry=False)
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(worker, "go"),
                      go_sync=lambda: saga_run_sync(worker, "go"))
    check_redeemed(wal, ahead, desk)
    # the caller's own tool hook still wrapped every call
    assert sorted(mine.calls) == ["read_page[('page', 1)]", "read_page[('page', 2)]", "reserve[('seat', 5)]"]


def test_without_a_speculator_agnos_model_is_left_as_given() -> None:
    """In a fresh interpreter: runs with no Speculator leave Agno's Model untouched, and one with a Speculator wraps it once."""
    script = textwrap.dedent("""
        import asyncio
        from agno.agent import Agent
        from agno.models.base import Model
        from agno_drive import ScriptedModel
        from agent_saga_agno import adapter, saga_run, saga_run_sync, wrap_tool
        from agent_saga import MemoryWAL, Speculator, saga_scope

        own = Model.__dict__["get_function_calls_to_run"]
        def read_page(page: int) -> str:
            "Read one page."
            return str(page)
        tools = [wrap_tool(read_page, semantics="REVERSIBLE")]
        def worker():
            return Agent(model=ScriptedModel(calls=[("read_page", {"page": 1})]), tools=tools, telemetry=False)
        saga_run_sync(worker(), "go", wal=MemoryWAL())
        asyncio.run(saga_run(worker(), "go", wal=MemoryWAL()))
        with saga_scope(wal=MemoryWAL()):
            saga_run_sync(worker(), "go")
        print(Model.__dict__["get_function_calls_to_run"] is own)
        for _ in range(2):
            with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(tools), intent="t"):
                saga_run_sync(worker(), "go")
        wrapper = Model.__dict__["get_function_calls_to_run"]
        print(wrapper is not own, wrapper.__saga_planned__ is own)
    """)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "AGNO_TELEMETRY": "false"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


def test_a_run_without_a_speculator_runs_every_call_once_and_speculates_nothing() -> None:
    desk, wal = Desk(), MemoryWAL()
    worker = Agent(name="assistant", model=ScriptedModel(calls=ONE_RESPONSE), tools=wrapped(desk), telemetry=False)
    saga_run_sync(worker, "go", wal=wal)
    check_ran_once(wal, desk)


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([Function.from_callable(plain)])
