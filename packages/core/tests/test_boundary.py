"""One boundary type: ``with`` yields the blocking face, ``async with`` the awaiting one."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from agent_saga import (
    AgentKit,
    Boundary,
    MemoryWAL,
    NotApplied,
    Saga,
    SagaAborted,
    SagaFleet,
    SyncSaga,
    ToolFailed,
    current_saga,
    guard,
    saga_scope,
)
from agent_saga.log.base import WAL


def run_boundary(wal: WAL | None = None) -> Boundary:
    """What an adapter's run helper enters (Adapter.boundary): joins, and fails a swallowed failure."""
    return Boundary(wal, name="agent-run", join=True, fail_on_swallowed=True)


def _boundaries() -> dict[str, Any]:
    wal = MemoryWAL()
    return {
        "saga_scope": lambda: saga_scope(wal),
        "kit.transaction": lambda: AgentKit("k", wal=wal).transaction(),
        "fleet.transaction": lambda: SagaFleet("f", wal=wal).transaction(),
        "run_boundary": lambda: run_boundary(wal),
    }


@pytest.mark.parametrize("name", sorted(_boundaries()))
def test_with_yields_the_blocking_face_whose_execute_runs_the_effect(name: str) -> None:
    effects: list[str] = []
    with _boundaries()[name]() as s:
        assert isinstance(s, SyncSaga)
        out = s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: effects.append("ran") or 1)
    assert not inspect.isawaitable(out)
    assert effects == ["ran"]  # a `with` block never hands out a coroutine nobody awaits


@pytest.mark.parametrize("name", sorted(_boundaries()))
async def test_async_with_yields_the_awaiting_face(name: str) -> None:
    async with _boundaries()[name]() as s:
        assert isinstance(s, Saga)
        assert await s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 2) == 2


def test_every_boundary_is_the_one_type() -> None:
    assert all(isinstance(make(), Boundary) for make in _boundaries().values())


def test_a_boundary_is_entered_once() -> None:
    scope = saga_scope(MemoryWAL())
    with scope:
        pass
    with pytest.raises(RuntimeError, match="only once"), scope:
        pass


def test_guard_and_run_boundary_join_an_open_saga_but_saga_scope_opens_its_own() -> None:
    @guard
    def inner() -> str | None:
        saga = current_saga()
        return saga.saga_id if saga else None

    with saga_scope(MemoryWAL()) as outer:
        assert inner() == outer.saga_id
        with run_boundary() as joined:
            assert joined.saga_id == outer.saga_id
        with saga_scope(MemoryWAL()) as nested:
            assert nested.saga_id != outer.saga_id
        assert current_saga() is outer.saga


def test_a_run_that_swallowed_a_failed_step_is_unwound() -> None:
    undone: list[str] = []
    from agent_saga import Compensation

    with pytest.raises(SagaAborted) as info, run_boundary(MemoryWAL()) as s:
        s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": "c1"},
                  compensate=lambda r: Compensation(fn=lambda: undone.append(r["id"])))
        try:
            s.execute(tool="notify", semantics="IRREVERSIBLE", forward=_boom)
        except RuntimeError:
            pass  # what a framework does when it turns a tool error into a message
    assert isinstance(info.value.cause, ToolFailed)
    assert isinstance(info.value.cause.cause, RuntimeError)
    assert "the step may have landed, so the run is unwound" in str(info.value.cause)
    assert undone == ["c1"]


def test_a_refusal_the_code_swallowed_also_fails_a_run() -> None:
    with pytest.raises(SagaAborted) as info, run_boundary(MemoryWAL()) as s:
        try:
            s.execute(tool="t", semantics="REVERSIBLE", forward=_not_applied)
        except NotApplied:
            pass
    assert isinstance(info.value.cause, ToolFailed)
    # The tool said it did nothing: the message must not claim it may have landed.
    assert "may have landed" not in str(info.value.cause)
    assert "the step did nothing, but the run went on past it, so the run is unwound" in str(info.value.cause)


def test_saga_scope_itself_commits_over_a_failure_the_code_handled() -> None:
    with saga_scope(MemoryWAL()) as s:
        try:
            s.execute(tool="t", semantics="IRREVERSIBLE", forward=_boom)
        except RuntimeError:
            pass
    assert s.saga.status.value == "COMPLETED"
    assert s.failures and s.failures[0][0] == "t"


def _boom() -> None:
    raise RuntimeError("timed out")


def _not_applied() -> None:
    raise NotApplied("declined")
