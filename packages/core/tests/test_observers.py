"""Observers live in the engine: every front door's steps reach the one interceptor chain."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Any

import pytest

from agent_saga import (
    AgentKit,
    Compensation,
    Interceptor,
    MemoryWAL,
    SagaAborted,
    SagaFleet,
    add_interceptor,
    remove_interceptor,
    saga_scope,
    tool,
)
from agent_saga.engine.observe import RollbackEvent, SagaEvent, StepEvent
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.manager import plugins


class Recorder:
    """A pluggy plugin implementing every observer hook."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    @hookimpl
    def agent_saga_saga_started(self, event: SagaEvent) -> None:
        self.events.append(("saga", event.name))

    @hookimpl
    def agent_saga_step_started(self, event: StepEvent) -> None:
        self.events.append(("step", event.step, event.tool, event.origin))

    @hookimpl
    def agent_saga_step_finished(self, event: StepEvent, end: Any) -> None:
        self.events.append(("done", event.step, end.state.value, type(end.error).__name__ if end.error else None))

    @hookimpl
    def agent_saga_rollback_step(self, event: RollbackEvent, outcome: Any) -> None:
        self.events.append(("undo", event.step, outcome.outcome.value))

    @hookimpl
    def agent_saga_saga_finished(self, event: SagaEvent, end: Any) -> None:
        self.events.append(("end", end.status, None if end.report is None else end.report.clean))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    assert plugins().register(rec, "test-recorder")
    assert not plugins().register(rec, "test-recorder")  # once per name
    yield rec
    plugins().unregister("test-recorder")


def undo(r: Any) -> Compensation:
    return Compensation(fn=lambda: None)


def fail() -> None:
    raise ValueError("nope")


async def test_plain_execute_is_observed_step_by_step_and_through_the_rollback(recorder: Recorder) -> None:
    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL(), name="plain") as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1, compensate=undo)
            await s.execute(tool="b", semantics="IRREVERSIBLE", forward=fail)
    assert recorder.events == [
        ("saga", "plain"),
        ("step", 1, "a", None), ("done", 1, "COMMITTED", None),
        ("step", 2, "b", None), ("done", 2, "UNKNOWN", "ValueError"),
        ("undo", 2, "unresolved"), ("undo", 1, "compensated"),
        ("end", "ROLLED_BACK", False),
    ]


def test_every_front_door_reaches_the_same_chain(recorder: Recorder) -> None:
    @tool(semantics="REVERSIBLE")
    def by_decorator() -> int:
        return 1

    kit = AgentKit("kit", wal=MemoryWAL())
    by_kit = kit.safe_tool(lambda: 2, semantics="REVERSIBLE", name="by_kit")
    fleet = SagaFleet("fleet", wal=MemoryWAL())
    by_fleet = fleet.register(lambda: 3, framework="demo", name="by_fleet", semantics="REVERSIBLE")
    with saga_scope(MemoryWAL(), name="s"):
        by_decorator()
        by_kit()
    with fleet.transaction():
        by_fleet()
    steps = [e[2:] for e in recorder.events if e[0] == "step"]
    assert steps == [("by_decorator", None), ("by_kit", None), ("by_fleet", "demo")]
    assert [e for e in recorder.events if e[0] == "end"] == [("end", "COMPLETED", None)] * 2


class Spans(Interceptor):
    """An interceptor in the OpenTelemetry shape: a context var set around the step."""

    current: contextvars.ContextVar[str | None] = contextvars.ContextVar("span", default=None)

    def __init__(self) -> None:
        self.seen_inside: list[str | None] = []
        self.closed: list[tuple[str, str]] = []

    def step(self, event: StepEvent) -> Any:
        token = self.current.set(f"step:{event.tool}")
        try:
            end = yield
            self.closed.append((event.tool, end.state.value))
        finally:
            self.current.reset(token)


async def test_an_interceptor_wraps_the_call_in_the_callers_context() -> None:
    spans = Spans()
    add_interceptor(spans)
    try:
        async def inside() -> str | None:
            return Spans.current.get()

        def inside_sync() -> str | None:
            return Spans.current.get()  # on the worker thread: the context was copied

        async with saga_scope(MemoryWAL()) as s:
            assert await s.execute(tool="t1", semantics="REVERSIBLE", forward=inside) == "step:t1"
            assert await s.execute(tool="t2", semantics="REVERSIBLE", forward=inside_sync) == "step:t2"
        assert Spans.current.get() is None  # reset after each step
        assert spans.closed == [("t1", "COMMITTED"), ("t2", "COMMITTED")]
    finally:
        remove_interceptor(spans)


class Broken(Interceptor):
    def step(self, event: StepEvent) -> Any:
        raise RuntimeError("observer bug")

    def saga(self, event: SagaEvent) -> Any:
        yield
        raise RuntimeError("observer bug at the end")


def test_a_failing_interceptor_never_changes_what_the_saga_does(caplog: pytest.LogCaptureFixture) -> None:
    broken = Broken()
    add_interceptor(broken)
    try:
        with saga_scope(MemoryWAL()) as s:
            assert s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 7) == 7
        assert s.saga.status.value == "COMPLETED"
        assert "observer bug" in caplog.text
    finally:
        remove_interceptor(broken)


def test_without_observers_no_bridge_is_installed() -> None:
    from agent_saga.engine.observe import interceptors

    assert interceptors() == ()
    rec = Recorder()
    plugins().register(rec, "test-recorder")
    assert len(interceptors()) == 1
    plugins().unregister("test-recorder")
    assert interceptors() == ()


async def test_concurrent_sagas_do_not_mix_their_events(recorder: Recorder) -> None:
    async def yield_once() -> None:
        await asyncio.sleep(0)

    async def run(name: str) -> None:
        async with saga_scope(MemoryWAL(), name=name) as s:
            for i in range(3):
                await s.execute(tool=f"{name}.{i}", semantics="REVERSIBLE", forward=yield_once)

    await asyncio.gather(run("x"), run("y"))
    for name in ("x", "y"):
        mine = [e[2] for e in recorder.events if e[0] == "step" and e[2].startswith(name)]
        assert mine == [f"{name}.0", f"{name}.1", f"{name}.2"]
