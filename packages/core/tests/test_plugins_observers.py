"""Observer hooks: a plugin registered with the manager hears every step and saga end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent_saga import MemoryWAL, SagaAborted, SagaFleet
from agent_saga.plugins.hookspecs import hookimpl
from agent_saga.plugins.manager import plugins


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    @hookimpl
    def agent_saga_step_started(self, saga: Any, tool: str, framework: str) -> None:
        self.events.append(("started", tool, framework))

    @hookimpl
    def agent_saga_step_finished(self, saga: Any, tool: str, framework: str, error: BaseException | None) -> None:
        self.events.append(("finished", tool, type(error).__name__ if error else None))

    @hookimpl
    def agent_saga_saga_finished(self, saga: Any, report: Any) -> None:
        self.events.append(("saga", None if report is None else report.clean))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    assert plugins().register(rec, "test-recorder")
    assert not plugins().register(rec, "test-recorder")  # once per name
    yield rec
    plugins().unregister("test-recorder")


def test_observers_hear_steps_and_the_saga_end(recorder: Recorder) -> None:
    fleet = SagaFleet("observed")
    ok = fleet.register(lambda: {"id": 1}, framework="demo", name="ok", semantics="REVERSIBLE")

    def fail() -> None:
        raise ValueError("nope")

    bad = fleet.register(fail, framework="demo", name="bad", semantics="IRREVERSIBLE")
    with fleet.transaction(wal=MemoryWAL()):
        ok()
    with pytest.raises(SagaAborted), fleet.transaction(wal=MemoryWAL()):
        ok()
        bad()
    assert recorder.events == [
        ("started", "ok", "demo"), ("finished", "ok", None), ("saga", None),
        ("started", "ok", "demo"), ("finished", "ok", None),
        ("started", "bad", "demo"), ("finished", "bad", "ValueError"), ("saga", False),
    ]
