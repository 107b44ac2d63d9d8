"""A model response's tool uses reach a Speculator through Strands' real agent loop."""

from __future__ import annotations

from typing import Any

import pytest
from agent_saga_strands import PlannedCalls, adapter, saga_run, saga_run_sync, wrap_tool
from strands import Agent, tool
from strands.hooks import HookProvider, HookRegistry, MessageAddedEvent
from strands_drive import agent

from agent_saga import MemoryWAL, Speculator, saga_scope
from agent_saga.testing import CALLS, TOUCHES, Desk, check_ran_once, check_redeemed, run_ahead


def wrapped(desk: Desk) -> list[Any]:
    """The desk's two functions as Strands tools, wrapped."""
    return desk.tools(wrap_tool, tool)


ONE_RESPONSE = [list(CALLS)]


class Seen(HookProvider):
    """The caller's own hook: the roles of the messages added, in order."""

    def __init__(self) -> None:
        self.roles: list[str] = []

    def register_hooks(self, registry: HookRegistry, **_: Any) -> None:
        registry.add_callback(MessageAddedEvent, lambda event: self.roles.append(event.message["role"]))


@pytest.mark.parametrize("run", ["async", "sync"])
def test_the_reads_of_one_model_response_run_ahead_and_are_redeemed(run: str) -> None:
    desk, wal, mine = Desk(), MemoryWAL(), Seen()
    tools = wrapped(desk)
    worker = agent(tools, ONE_RESPONSE, hooks=[mine])
    ahead = run_ahead(adapter.steps(tools), wal, run, go=lambda: saga_run(worker, "go"),
                      go_sync=lambda: saga_run_sync(worker, "go"))
    check_redeemed(wal, ahead, desk)
    # the caller's own hook still saw every message: the prompt, the calls, their results, the answer
    assert mine.roles == ["user", "assistant", "user", "assistant"]


def test_an_agent_built_with_planned_calls_names_each_response_once() -> None:
    desk, wal = Desk(), MemoryWAL()
    tools = wrapped(desk)
    worker = agent(tools, ONE_RESPONSE, hooks=[PlannedCalls()])  # and the helper adds its own

    check_redeemed(wal, run_ahead(adapter.steps(tools), wal, "async", go=lambda: saga_run(worker, "go")), desk)


def callbacks(worker: Agent) -> list[Any]:
    """The agent's MessageAddedEvent callbacks (Strands lists them per event type)."""
    return list(worker.hooks._registered_callbacks.get(MessageAddedEvent, []))


def test_without_a_speculator_the_agents_hooks_are_left_as_given() -> None:
    desk, wal = Desk(), MemoryWAL()
    worker = agent(wrapped(desk), ONE_RESPONSE, hooks=[Seen()])
    before = callbacks(worker)
    saga_run_sync(worker, "go", wal=wal)
    assert callbacks(worker) == before
    check_ran_once(wal, desk)


def test_a_second_run_with_a_speculator_adds_no_second_hook() -> None:
    desk = Desk()
    tools = wrapped(desk)
    worker = agent(tools, [])
    before = len(callbacks(worker))
    for _ in range(2):
        worker.model.pending = list(ONE_RESPONSE)  # type: ignore[attr-defined]  # the ScriptedModel's next turns
        with saga_scope(wal=MemoryWAL()), Speculator(adapter.steps(tools), intent="t", touches=TOUCHES) as ahead:
            saga_run_sync(worker, "go")
        assert ahead.stats.redeemed == 2 and ahead.stats.wasted == 0
    assert len(callbacks(worker)) == before + 1
    assert sorted(desk.reads) == [1, 1, 2, 2] and desk.reserved == [5, 5]


def test_steps_refuses_a_tool_it_did_not_wrap() -> None:
    @tool
    def plain(page: int) -> str:
        """Plain."""
        return str(page)

    with pytest.raises(TypeError, match="wrap it first with wrap_tool"):
        adapter.steps([plain])
