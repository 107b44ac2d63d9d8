"""The engine's side of the gate port, the report, and the remaining edges of the drivers."""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any

import pytest

from agent_saga import Compensation, MemoryWAL, Outcome, SagaAborted, SagaQuarantined, StepRefused, saga_scope
from agent_saga.engine.invoke import accepts_idempotency_key
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.engine.saga import SagaStatus
from agent_saga.gate import SagaInfo, StepRequest
from agent_saga.semantics import ActionSemantics, StepState


class ListGate:
    """A minimal GatePort: refuses the tools it is told to, records what it saw."""

    def __init__(self, refuse: set[str] = frozenset(), freeze: set[str] = frozenset(),  # type: ignore[assignment]
                 refuse_sagas: bool = False) -> None:
        self.refuse, self.freeze, self.refuse_sagas = refuse, freeze, refuse_sagas
        self.checked: list[str] = []
        self.observed: list[tuple[str, str | None]] = []
        self.admitted: list[str] = []

    def admit(self, saga: SagaInfo) -> None:
        if self.refuse_sagas:
            raise StepRefused("*", "draining: no new sagas", "drain")
        self.admitted.append(saga.name)

    def check(self, request: StepRequest) -> None:
        self.checked.append(request.tool)
        if request.tool in self.freeze:
            raise SagaQuarantined(f"saga {request.saga_id} is quarantined")
        if request.tool in self.refuse:
            raise StepRefused(request.tool, "over budget", "daily-spend")

    async def check_async(self, request: StepRequest) -> None:
        self.check(request)

    def observe(self, request: StepRequest, error: BaseException | None) -> None:
        self.observed.append((request.tool, type(error).__name__ if error else None))


async def test_a_refused_step_never_runs_and_is_logged() -> None:
    gate, wal, ran = ListGate(refuse={"wire"}), MemoryWAL(), []
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(wal, gate=gate, name="pay") as s:
            await s.execute(tool="ok", semantics="REVERSIBLE", forward=lambda: ran.append("ok"))
            await s.execute(tool="wire", semantics="IRREVERSIBLE", forward=lambda: ran.append("wire"),
                            args={"amount": 5})
    assert ran == ["ok"] and gate.admitted == ["pay"]
    assert isinstance(info.value.cause, StepRefused) and info.value.report.clean
    refused = next(r for r in wal.records() if r["type"] == "STEP_REFUSED")
    assert refused["body"]["rule"] == "daily-spend" and refused["body"]["args"] == {"amount": 5}
    assert not any(r["type"] == "STEP_INTENT" for r in wal.records())
    assert gate.observed == [("ok", None)]  # refusals are not outcomes


def test_the_sync_face_consults_the_gate_too() -> None:
    gate = ListGate(refuse={"wire"})
    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL(), gate=gate) as s:
        s.execute(tool="wire", semantics="IRREVERSIBLE", forward=lambda: None)
    assert gate.checked == ["wire"] and isinstance(info.value.cause, StepRefused)


class InlineGate(ListGate):
    """A gate that says its check never waits: the engine must call ``check``, never await."""

    never_waits = True

    async def check_async(self, request: StepRequest) -> None:
        raise AssertionError("a gate that never waits is checked inline, not awaited")


@pytest.mark.parametrize("gate_type", [ListGate, InlineGate])
async def test_a_gate_that_never_waits_is_checked_inline_with_the_same_outcomes(gate_type: type[ListGate]) -> None:
    gate, wal = gate_type(refuse={"wire"}, freeze={"frozen"}), MemoryWAL()
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(wal, gate=gate) as s:
            await s.execute(tool="ok", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=lambda: None))
            await s.execute(tool="wire", semantics="IRREVERSIBLE", forward=lambda: None, args={"amount": 5})
    assert isinstance(info.value.cause, StepRefused) and gate.checked == ["ok", "wire"]
    assert [r["type"] for r in wal.records()] == [
        "SAGA_STARTED", "STEP_INTENT", "STEP_COMMITTED", "STEP_REFUSED", "ROLLBACK_STARTED",
        "COMPENSATION_STARTED", "STEP_COMPENSATED", "SAGA_ROLLED_BACK",
    ]
    with pytest.raises(SagaQuarantined):
        with saga_scope(MemoryWAL(), gate=gate) as sync:
            sync.execute(tool="frozen", semantics="REVERSIBLE", forward=lambda: None)


async def test_outcomes_are_observed_but_compensations_never_pass_the_gate() -> None:
    gate = ListGate()

    def fails() -> None:
        raise ConnectionError("down")

    with pytest.raises(SagaAborted):
        async with saga_scope(MemoryWAL(), gate=gate) as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=lambda: None))
            await s.execute(tool="b", semantics="REVERSIBLE", forward=fails)
    assert gate.checked == ["a", "b"]
    assert gate.observed == [("a", None), ("b", "ConnectionError")]


async def test_a_drain_refuses_to_start_a_saga() -> None:
    wal = MemoryWAL()
    with pytest.raises(StepRefused, match="draining"):
        async with saga_scope(wal, gate=ListGate(refuse_sagas=True)):
            pass
    assert list(wal.records()) == []


async def test_quarantine_stops_without_unwinding() -> None:
    wal, undone = MemoryWAL(), []
    scope = saga_scope(wal, gate=ListGate(freeze={"b"}))
    with pytest.raises(SagaQuarantined):
        async with scope as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=lambda: undone.append(1)))
            await s.execute(tool="b", semantics="REVERSIBLE", forward=lambda: None)
    assert undone == [] and scope.saga is not None and scope.saga.status is SagaStatus.FROZEN
    assert not any(r["type"].startswith(("ROLLBACK", "SAGA_ROLLED", "SAGA_COMPLETED")) for r in wal.records())


def test_quarantine_in_the_sync_face() -> None:
    scope = saga_scope(MemoryWAL(), gate=ListGate(freeze={"b"}))
    with pytest.raises(SagaQuarantined), scope as s:
        s.execute(tool="b", semantics="REVERSIBLE", forward=lambda: None)
    assert scope.saga is not None and scope.saga.status is SagaStatus.FROZEN


async def test_a_saga_that_finishes_past_an_unknown_step_records_it() -> None:
    wal = MemoryWAL()

    def flaky() -> None:
        raise TimeoutError

    async with saga_scope(wal) as s:
        with pytest.raises(TimeoutError):
            await s.execute(tool="maybe", semantics="IRREVERSIBLE", forward=flaky)
    end = list(wal.records())[-1]
    assert end["type"] == "SAGA_COMPLETED" and end["body"] == {"steps": 1, "unknown": [1]}


async def test_rolling_back_twice_is_refused() -> None:
    async with saga_scope(MemoryWAL()) as s:
        pass
    with pytest.raises(Exception, match="already completed"):
        await s.rollback(RuntimeError())


async def test_sync_forward_timeout_in_the_async_face() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="slow", semantics="REVERSIBLE", forward=lambda: time.sleep(1), timeout=0.05)
    assert info.value.report.steps[0].state is StepState.UNKNOWN


async def test_sync_forward_with_timeout_returning_a_coroutine() -> None:
    async def inner() -> int:
        return 3

    async with saga_scope(MemoryWAL()) as s:
        assert await s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: inner(), timeout=1) == 3
        assert await s.execute(tool="t", semantics="REVERSIBLE", forward=inner, timeout=1) == 3


def test_sync_face_error_inside_a_timed_thread_propagates() -> None:
    def boom() -> None:
        raise KeyError("x")

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="t", semantics="REVERSIBLE", forward=boom, timeout=1)
    assert isinstance(info.value.cause, KeyError)


def test_accepts_idempotency_key_shapes() -> None:
    def f(a: int, idempotency_key: str | None = None) -> None: ...

    def g(a: int, **kw: Any) -> None: ...

    class KeyedCallable:
        def __call__(self, idempotency_key: str) -> None: ...

    assert accepts_idempotency_key(f)
    assert not accepts_idempotency_key(g)
    assert accepts_idempotency_key(functools.partial(f, 1))
    assert not accepts_idempotency_key(functools.partial(f, 1, idempotency_key="k"))
    assert accepts_idempotency_key(KeyedCallable())
    assert not accepts_idempotency_key(len)


def test_report_text_and_dict() -> None:
    steps = (
        StepOutcome(3, "c", ActionSemantics.COMPENSABLE, StepState.COMMITTED, Outcome.FAILED, "refund(x=1)", 3,
                    "k3", "ConnectionError: down"),
        StepOutcome(2, "b", ActionSemantics.IRREVERSIBLE, StepState.COMMITTED, Outcome.ORPHANED, None, 0, None,
                    "IRREVERSIBLE: no undo exists"),
        StepOutcome(1, "a", ActionSemantics.COMPENSABLE, StepState.COMMITTED, Outcome.UNRESOLVED, "void(y=2)"),
    )
    report = RollbackReport("s1", "RuntimeError: x", steps, halted=True)
    text = report.format_text()
    assert "NOT CLEAN" in text and "!! FAILED  step 3 c [COMMITTED] via refund(x=1)" in text
    assert "!! ORPHAN  step 2 b" in text and "halted" in text
    assert "1 failed, 1 orphaned, 1 unresolved" in text
    data = report.to_dict()
    assert data["clean"] is False and data["steps"][0]["outcome"] == "failed"
    assert data["steps"][1]["semantics"] == "IRREVERSIBLE"
    assert RollbackReport("s2", "x", ()).format_text().endswith("no steps")


async def test_an_undo_whose_handler_is_missing_fails_instead_of_crashing() -> None:
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL(), compensation_retry=__import__("agent_saga").RetryPolicy(max_attempts=1)) as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(handler="not.registered"))
            raise RuntimeError
    (step,) = info.value.report.failed
    assert "not.registered" in step.detail


async def test_an_undo_with_an_unregistered_handler_name_still_runs_in_process() -> None:
    undone: list[int] = []
    with pytest.raises(SagaAborted) as info:
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=lambda: undone.append(r), handler="later.name"))
            raise RuntimeError
    assert undone == [1] and info.value.report.clean


async def test_start_is_idempotent() -> None:
    wal = MemoryWAL()
    async with saga_scope(wal) as s:
        s.start()
    assert sum(r["type"] == "SAGA_STARTED" for r in wal.records()) == 1


async def test_keyboard_interrupt_unwinds_then_propagates() -> None:
    undone: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                            compensate=lambda r: Compensation(fn=lambda: undone.append(1)))
            raise KeyboardInterrupt
    assert undone == [1] and s.report is not None and s.report.clean


def test_a_base_exception_in_the_sync_face_unwinds_then_propagates() -> None:
    undone: list[int] = []
    with pytest.raises(KeyboardInterrupt), saga_scope(MemoryWAL()) as s:
        s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1,
                  compensate=lambda r: Compensation(fn=lambda: undone.append(1)))
        raise KeyboardInterrupt
    assert undone == [1]


async def test_a_forward_interrupted_by_a_base_exception_is_unknown() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="a", semantics="REVERSIBLE", forward=interrupted, inline=True,
                            fallback_action=lambda: None)
    assert s.steps[0].state is StepState.UNKNOWN and len(s.steps) == 1  # no fallback for a BaseException
    await asyncio.sleep(0)
