"""The engine's less-travelled paths: every refusal of a malformed option, and the failures
around a step (a log that cannot make the intent durable, a hook or a gate that misbehaves)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pytest

from agent_saga import (
    Compensation,
    ConfigurationError,
    Interceptor,
    MemoryWAL,
    NotApplied,
    RetryPolicy,
    SagaAborted,
    StepOptions,
    StepRefused,
    StepState,
    WALStalled,
    add_interceptor,
    remove_interceptor,
    saga_scope,
)
from agent_saga.engine.invoke import accepts_idempotency_key
from agent_saga.engine.observe import StepEvent
from agent_saga.engine.ports import add_lifecycle, lifecycles
from agent_saga.engine.reconcile_policy import ReconcilePolicy
from agent_saga.semantics import ActionSemantics


@pytest.mark.parametrize(("options", "message"), [
    ({"retry": 3}, "retry= must be a RetryPolicy"),
    ({"timeout": 0}, "timeout= must be a positive"),
    ({"timeout": True}, "timeout= must be a positive"),
    ({"timeout": math.nan}, "timeout= must be a positive"),
    ({"fallback_action": "later"}, "fallback_action= must be callable"),
    ({"inline": 1}, "inline= must be True or False"),
    ({"require_boundary": "yes"}, "require_boundary= must be True or False"),
    ({"wait_for_commit": 0}, "wait_for_commit= must be True, False or None"),
    ({"reconcile": "sometimes"}, "reconcile= must be True, False or a ReconcilePolicy"),
    ({"origin": 7}, "origin= must be a name"),
    ({"record_result": "all"}, "record_result= must be one of"),
    ({"record_result": None}, "record_result= must be one of"),
    ({"reveal": "token"}, "reveal= must be a collection"),
    ({"policy_args": ["$.amount"]}, "policy_args= must map names"),
    ({"policy_args": {"amount": 5}}, "policy_args= must map names to JSON paths"),
])
def test_every_malformed_option_is_refused_by_name(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        StepOptions("REVERSIBLE", **options)  # type: ignore[arg-type]


def test_building_on_given_options() -> None:
    base = StepOptions("REVERSIBLE", timeout=2.0)
    assert StepOptions.build(base, None, None) is base
    changed = StepOptions.build(base, "COMPENSABLE", {"timeout": 3.0})
    assert (changed.semantics, changed.timeout, base.timeout) == (ActionSemantics.COMPENSABLE, 3.0, 2.0)
    with pytest.raises(ConfigurationError, match="options= must be a StepOptions"):
        StepOptions.build({"semantics": "REVERSIBLE"}, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("policy", "message"), [
    ({"attempts": 0}, "attempts must be an integer >= 1"),
    ({"delay": -1}, "delay must be a finite number"),
    ({"backoff": math.inf}, "backoff must be a finite number"),
    ({"timeout": 0}, "timeout must be positive"),
])
def test_a_malformed_reconcile_policy_is_refused(policy: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ReconcilePolicy(**policy)


def test_an_interceptor_must_be_one_and_may_observe_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(TypeError, match=r"subclasses agent_saga\.Interceptor"):
        add_interceptor(object())  # type: ignore[arg-type]

    class Silent(Interceptor):
        pass

    class Greedy(Interceptor):
        def step(self, event: StepEvent) -> Any:
            assert event.operation_id  # derived on demand
            yield
            yield  # a second yield is a bug in the interceptor: it is closed, and the saga goes on

    silent, greedy = Silent(), Greedy()
    add_interceptor(silent)
    add_interceptor(greedy)
    try:
        with saga_scope(MemoryWAL()) as s:
            assert s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: 1) == 1
    finally:
        remove_interceptor(silent)
        remove_interceptor(greedy)
    assert "yielded more than once" in caplog.text


class _StalledWAL(MemoryWAL):
    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        raise WALStalled("the device is wedged")


def test_an_intent_that_never_became_durable_means_the_effect_never_started() -> None:
    ran: list[str] = []
    ends: list[Any] = []

    class Ends(Interceptor):
        def step(self, event: StepEvent) -> Any:
            ends.append((yield))

    watcher = Ends()
    add_interceptor(watcher)
    try:
        with pytest.raises(WALStalled), saga_scope(_StalledWAL()) as s:
            s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: ran.append("charged"),
                      compensate=Compensation(fn=lambda: None))
    except SagaAborted:
        pass
    finally:
        remove_interceptor(watcher)
    assert ran == []
    assert s.steps[0].state is StepState.NOT_APPLIED
    assert [e.state for e in ends] == [StepState.NOT_APPLIED]


def test_halting_on_a_failed_undo_leaves_older_steps_unresolved_and_names_the_halt() -> None:
    def refuse() -> None:
        raise RuntimeError("refund API down")

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL(), compensation_retry=RetryPolicy(1)) as s:
        s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: 1, compensate=Compensation(fn=lambda: None))
        s.execute(tool="b", semantics="COMPENSABLE", forward=lambda: 2, compensate=Compensation(fn=refuse))
        raise ValueError("later")
    report = info.value.report
    assert [(o.tool, o.outcome.value) for o in report.steps] == [("b", "failed"), ("a", "unresolved")]
    assert report.halted and "halted at step 2" in report.steps[1].detail
    assert report.kept == () and "halted after a failed compensation" in report.format_text()


def test_unprotected_and_refused_calls_carry_their_origin_and_spoil_clean() -> None:
    wal = MemoryWAL()
    with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
        s.saga.note_unprotected("send_mail", {"to": "a@b", "api_key": "k"}, origin="crewai")
        s.saga.refuse("wire", {"amount": 5}, StepRefused("wire", "not declared", "policy.unclassified"),
                      origin="crewai")
        assert s.saga.unprotected == ("send_mail",)
        raise RuntimeError("the run failed")
    kinds = {r["type"]: r["body"] for r in wal.records()}
    assert kinds["STEP_UNPROTECTED"]["origin"] == "crewai" and kinds["STEP_UNPROTECTED"]["args"]["api_key"] != "k"
    assert kinds["STEP_REFUSED"]["origin"] == "crewai" and kinds["STEP_REFUSED"]["semantics"] is None
    assert not info.value.report.clean
    assert "UNPROTECTED send_mail" in info.value.report.format_text()


def test_a_lifecycle_hook_that_fails_while_handing_over_does_not_hide_the_failure() -> None:
    class Fragile:
        def started(self, saga_id: str, wal: Any) -> Mapping[str, Any] | None:
            return None

        def ended(self, saga_id: str, wal: Any, report: Any) -> None:
            return None

        def abandoned(self, saga_id: str, wal: Any, report: Any) -> None:
            raise OSError("disk gone too")

        def frozen(self, saga_id: str, wal: Any) -> None:
            return None

    class BrokenLog(MemoryWAL):
        def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
            if self.broken:
                raise WALStalled("log broke")

        broken = False

    hook = Fragile()
    add_lifecycle(hook)
    wal = BrokenLog()
    try:
        with pytest.raises(SagaAborted) as info, saga_scope(wal) as s:
            s.execute(tool="a", semantics="REVERSIBLE", forward=lambda: 1)
            wal.broken = True
            raise RuntimeError("the run failed")
    finally:
        from agent_saga.engine import ports

        ports._lifecycles.remove(hook)
    assert hook not in lifecycles()
    assert info.value.report.interrupted is not None and "log broke" in info.value.report.interrupted


def test_a_gate_whose_posture_cannot_be_read_is_recorded_as_such() -> None:
    class Gate:
        def admit(self, saga: Any) -> None: ...
        def check(self, request: Any) -> None: ...
        async def check_async(self, request: Any) -> None: ...
        def observe(self, request: Any, error: BaseException | None) -> None: ...
        def posture(self) -> dict[str, Any]:
            raise RuntimeError("store unreachable")

    wal = MemoryWAL()
    with saga_scope(wal, gate=Gate()):
        pass
    started = next(r for r in wal.records() if r["type"] == "SAGA_STARTED")["body"]["gate"]
    assert started == {"type": "Gate", "posture_unreadable": "RuntimeError: store unreachable"}


def test_idempotency_keys_reach_only_callables_that_name_them() -> None:
    assert accepts_idempotency_key(len) is False  # a builtin without a Python signature

    class Charger:
        def __call__(self, amount: int, idempotency_key: str | None = None) -> int:
            return amount

    assert accepts_idempotency_key(Charger()) is True


async def test_a_sync_forward_that_returns_an_awaitable_is_awaited_under_its_timeout() -> None:
    async def landing() -> str:
        return "ok"

    async with saga_scope(MemoryWAL()) as s:
        assert await s.execute(tool="t", semantics="REVERSIBLE", forward=lambda: landing(), inline=True,
                               timeout=5) == "ok"


def test_not_applied_needs_no_undo_and_keeps_the_report_clean() -> None:
    def declined() -> None:
        raise NotApplied("card declined")

    with pytest.raises(SagaAborted) as info, saga_scope(MemoryWAL()) as s:
        s.execute(tool="charge", semantics="COMPENSABLE", forward=declined, compensate=Compensation(fn=lambda: None))
    assert info.value.report.clean and info.value.report.steps == ()
