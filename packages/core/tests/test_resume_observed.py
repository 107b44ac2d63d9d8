"""A resumed durable run's served steps reach the interceptors, marked served (issue 41 part 4).

A span or a log line for every step, served ones included, told apart by ``StepEvent.served``: a
served step ran nothing (a model call served from the log spent no tokens). The run is stopped
where a crash would be (``SagaQuarantined``, as in test_resume.py) and resumed in this process.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agent_saga import (
    Interceptor,
    SagaQuarantined,
    add_interceptor,
    durable,
    remove_interceptor,
    resume,
    tool,
)
from agent_saga.engine.observe import StepEnd, StepEvent, Wrapper
from agent_saga.log.default import shared_log
from agent_saga.testing import stop_run_if

STOP: dict[str, str] = {}


@tool(semantics="REVERSIBLE")
def look(city: str) -> str:
    return f"seen {city}"


@durable("observed.trip")
def trip(cities: list[Any]) -> list[Any]:
    seen = []
    for city in cities:
        stop_run_if(STOP.get("at") == city)
        seen.append(look(city))
    return seen


class Steps(Interceptor):
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, str, Any]] = []

    def step(self, event: StepEvent) -> Wrapper:
        end: StepEnd = yield
        self.seen.append((event.tool, event.served, end.state.value, end.result))


def test_a_served_step_is_observed_as_served_and_a_live_one_as_live(tmp_path: Path) -> None:
    wal = tmp_path / "observed.wal"
    STOP["at"] = "rome"
    try:
        trip(["paris", "rome"], saga_id="o-1", wal=wal)
    except SagaQuarantined:
        pass
    shared_log(wal).barrier()
    STOP.clear()
    steps = Steps()
    add_interceptor(steps)
    try:
        assert resume("o-1", wal=wal, clock=lambda: time.time() + 3600) == ["seen paris", "seen rome"]
    finally:
        remove_interceptor(steps)
    assert steps.seen == [("look", True, "COMMITTED", "seen paris"), ("look", False, "COMMITTED", "seen rome")]
