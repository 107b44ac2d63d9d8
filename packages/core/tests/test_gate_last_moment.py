"""The kill switch at the last moment, undos under a halt, and posture changes in the log (issue 25, 3 and 11).

Real parts throughout: the host's FileSwitchStore under the test's AGENT_SAGA_HOST_ROOT
(conftest), a FileWAL, the real ApprovalGateway with a FileApprovalStore, a webhook on
127.0.0.1 and a signing key the test host trusts. A lever is pulled through the process's
own switch (``default_switch().halt``), which this process obeys at once; a lever pulled
by another process reaches it within the switch's poll interval (docs/GATE.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from approval_support import Hook, gateway, of_type, trusted_key, wait_for
from gate_support import Approver, req

from agent_saga import (
    BudgetLimit,
    Compensation,
    FileApprovalStore,
    FileWAL,
    KillSwitch,
    PreFlightGate,
    RetryPolicy,
    SagaAborted,
    StepRefused,
    saga_scope,
)
from agent_saga.approvals import decide
from agent_saga.audit import certify_log, verify_log
from agent_saga.engine.report import Outcome
from agent_saga.gate import ApprovalDecision, FileSwitchStore, MemoryLimitStore, default_switch, set_switch
from agent_saga.gate._switch import default_switch_path
from agent_saga.log import read_records
from agent_saga.recovery import fold
from agent_saga.registry import compensator, unregister

pytestmark = pytest.mark.usefixtures("fresh_gate_globals")


def records(wal: FileWAL, rtype: str) -> list[dict[str, Any]]:
    return of_type(list(wal.records()), rtype)


class Ledger:
    """The outside world: what was charged and refunded, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def note(self, what: str) -> None:
        with self.lock:
            self.calls.append(what)


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    world = Ledger()

    def refund(charge: str, idempotency_key: str | None = None) -> None:
        world.note(f"refund {charge}")

    compensator("billing.refund")(refund)
    yield world
    unregister("billing.refund")


def refund_of(world: Ledger) -> Any:
    return lambda result: {"handler": "billing.refund", "kwargs": {"charge": result}}


# -- item 3: a halt stops a step that is already past the gate --------------------------------


def test_a_halt_pulled_while_a_human_decides_stops_the_approved_step(wal: FileWAL, tmp_path: Path) -> None:
    key = trusted_key()
    store = FileApprovalStore(tmp_path / "approvals")
    hook = Hook()
    gate = PreFlightGate(approval_provider=gateway(store, hook.url, wal))
    sent: list[int] = []

    def person() -> None:
        wait_for(lambda: hook.count >= 1, "the approval request")
        # The incident starts while the approver reads the request; they approve anyway.
        default_switch().halt("global", reason="incident 42", by="soc@corp")
        decide(store, hook.requests()[0][:8], "approve", approver="risk@corp", note="ok", key=key)

    answer = threading.Thread(target=person, daemon=True)
    answer.start()
    try:
        with pytest.raises(SagaAborted) as caught, saga_scope(wal, gate=gate) as saga:
            saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: sent.append(80_000),
                         args={"amount": 80_000})
    finally:
        answer.join(30)
        hook.close()
    assert sent == []  # the wire never went out
    cause = caught.value.__cause__
    assert isinstance(cause, StepRefused) and cause.rule == "kill-switch" and "incident 42" in cause.reason
    assert len(records(wal, "APPROVAL_GRANTED")) == 1  # the grant stands in the log; the halt overrode it
    (refusal,) = records(wal, "STEP_REFUSED")
    assert refusal["body"]["rule"] == "kill-switch"
    assert not records(wal, "STEP_INTENT")  # refused before the intent: nothing was even about to run


async def test_the_async_face_stops_the_approved_step_too(wal: FileWAL) -> None:
    def halt_then_approve(request: Any) -> ApprovalDecision:
        default_switch().halt("tool:wire.send", reason="incident 46", by="soc@corp")
        return ApprovalDecision(True, "risk@corp", "ok")

    sent: list[int] = []

    async def wire() -> None:
        sent.append(1)

    with pytest.raises(SagaAborted) as caught:
        async with saga_scope(wal, gate=PreFlightGate(approval_provider=Approver(halt_then_approve))) as saga:
            await saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=wire)
    assert sent == [] and isinstance(caught.value.__cause__, StepRefused)


def test_a_halt_after_the_approval_hands_the_budget_back() -> None:
    halting = [True]

    def answer(request: Any) -> ApprovalDecision:
        if halting[0]:
            default_switch().halt("tool:wire.send", reason="incident 47", by="soc@corp", ttl=60)
        return ApprovalDecision(True, "risk@corp", "ok")

    gate = PreFlightGate(limits=[BudgetLimit("b", arg="amount", max_total=100, window=60)],
                         approval_provider=Approver(answer), store=MemoryLimitStore())
    with pytest.raises(StepRefused, match="incident 47"):
        gate.check(req("wire.send", "IRREVERSIBLE", amount=100))
    halting[0] = False
    default_switch().resume("tool:wire.send", by="soc@corp")
    gate.check(req("wire.send", "IRREVERSIBLE", amount=100))  # the whole budget is still there


def test_a_halt_pulled_between_retry_attempts_stops_the_next_attempt(wal: FileWAL, ledger: Ledger) -> None:
    attempts: list[int] = []

    def charge(idempotency_key: str) -> str:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            # The first attempt reaches the provider and times out; meanwhile an operator halts.
            default_switch().halt("global", reason="incident 43", by="soc@corp")
            raise ConnectionError("read timed out")
        return "ch_1"

    with pytest.raises(SagaAborted) as caught, saga_scope(wal) as saga:  # the default gate: the switch only
        saga.execute(tool="billing.charge", semantics="COMPENSABLE", forward=charge,
                     compensate=Compensation(handler="billing.refund", kwargs={"charge": "ch_1"}),
                     retry=RetryPolicy(max_attempts=3, base_delay=0))
    assert attempts == [1]  # no second attempt under the halt
    cause = caught.value.__cause__
    assert isinstance(cause, StepRefused) and "incident 43" in cause.reason
    assert "before attempt 2" in cause.reason and "ConnectionError" in cause.reason
    # The first attempt may have landed: the step is UNKNOWN, not "not applied", and its
    # undo (known before the call) ran -- a global halt does not stop an undo.
    (unknown,) = records(wal, "STEP_UNKNOWN")
    assert "incident 43" in unknown["body"]["error"]
    assert not records(wal, "STEP_NOT_APPLIED")
    assert ledger.calls == ["refund ch_1"]
    assert caught.value.report.clean


def test_a_halt_pulled_before_the_only_attempt_leaves_the_step_not_applied(wal: FileWAL) -> None:
    ran: list[str] = []

    class HaltingWAL(FileWAL):
        """Pulls the halt as the intent becomes durable: between the gate's check and the call."""

        def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
            super().barrier(ticket, timeout)
            if any(r["type"] == "STEP_INTENT" for r in self.records()) and not default_switch().status().halts:
                default_switch().halt("tool:wire.send", reason="incident 44", by="soc@corp")

    log = HaltingWAL(Path(wal.path).with_name("halting.wal"))
    try:
        with pytest.raises(SagaAborted) as caught, saga_scope(log) as saga:
            saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: ran.append("sent"))
        assert ran == []
        assert isinstance(caught.value.__cause__, StepRefused)
        (not_applied,) = records(log, "STEP_NOT_APPLIED")
        assert "incident 44" in not_applied["body"]["error"]
        assert not records(log, "STEP_UNKNOWN")
    finally:
        log.close()


# -- undos under a halt --------------------------------------------------------------------------


def run_then_fail(wal: FileWAL, ledger: Ledger, halt_scope: str) -> SagaAborted:
    with pytest.raises(SagaAborted) as caught, saga_scope(wal) as saga:
        saga.execute(tool="billing.charge", semantics="COMPENSABLE", forward=lambda: "ch_7",
                     compensate=refund_of(ledger))
        default_switch().halt(halt_scope, reason="incident 45", by="soc@corp")
        raise RuntimeError("the agent gave up")
    return caught.value


def test_a_global_halt_lets_the_undo_run(wal: FileWAL, ledger: Ledger) -> None:
    aborted = run_then_fail(wal, ledger, "global")
    assert ledger.calls == ["refund ch_7"]
    assert aborted.report.clean
    assert len(records(wal, "STEP_COMPENSATED")) == 1


@pytest.mark.parametrize("scope", ["tool:billing.refund", "tool:billing.*"])
def test_a_halt_naming_the_undo_stops_it_and_the_rollback_is_not_clean(
    wal: FileWAL, ledger: Ledger, scope: str
) -> None:
    aborted = run_then_fail(wal, ledger, scope)
    assert ledger.calls == []  # the refund did not run
    report = aborted.report
    assert not report.clean and report.halted
    (outcome,) = report.steps
    assert outcome.outcome is Outcome.UNRESOLVED and outcome.attempts == 0
    assert "incident 45" in outcome.detail
    (unresolved,) = records(wal, "STEP_UNRESOLVED")
    assert unresolved["body"]["rule"] == "kill-switch" and "incident 45" in unresolved["body"]["detail"]
    assert not records(wal, "STEP_COMPENSATED")
    (ended,) = records(wal, "SAGA_ROLLED_BACK")
    assert ended["body"]["clean"] is False


def test_a_halt_on_the_forward_tool_does_not_stop_its_undo(wal: FileWAL, ledger: Ledger) -> None:
    aborted = run_then_fail(wal, ledger, "tool:billing.charge")
    assert ledger.calls == ["refund ch_7"] and aborted.report.clean


def test_an_unreadable_switch_store_refuses_steps_but_not_undos(wal: FileWAL, ledger: Ledger, tmp_path: Path) -> None:
    path = tmp_path / "switch.json"
    set_switch(KillSwitch(FileSwitchStore(path), host=False, poll_interval=0, grace=0))
    with pytest.raises(SagaAborted) as caught, saga_scope(wal) as saga:
        saga.execute(tool="billing.charge", semantics="COMPENSABLE", forward=lambda: "ch_8",
                     compensate=refund_of(ledger))
        path.write_text("not a switch state")  # the store breaks mid-saga
        saga.execute(tool="billing.charge", semantics="COMPENSABLE", forward=lambda: "ch_9",
                     compensate=refund_of(ledger))
    assert isinstance(caught.value.__cause__, StepRefused)  # fail closed for new effects
    assert ledger.calls == ["refund ch_8"] and caught.value.report.clean  # the undo still ran


def test_no_fallback_runs_under_a_halt(wal: FileWAL) -> None:
    calls: list[str] = []

    def primary() -> None:
        calls.append("primary")
        default_switch().halt("global", reason="incident 48", by="soc@corp")
        raise ConnectionError("reset by peer")

    with pytest.raises(SagaAborted), saga_scope(wal) as saga:
        saga.execute(tool="mail.send", semantics="IRREVERSIBLE", forward=primary,
                     fallback_action=lambda: calls.append("fallback"), retry=RetryPolicy(max_attempts=2, base_delay=0))
    assert calls == ["primary"]


# -- item 11: a posture change mid-saga is recorded --------------------------------------------


def halted_store(path: Path) -> Path:
    """A switch file (another store) holding a global halt."""
    KillSwitch(FileSwitchStore(path), host=False).halt("global", reason="fleet stop", by="soc@corp")
    return path


def test_a_switch_named_mid_saga_by_the_environment_is_obeyed_and_recorded(
    wal: FileWAL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = halted_store(tmp_path / "fleet" / "switch.json")
    host = str(default_switch_path())
    ran: list[int] = []
    with pytest.raises(SagaAborted) as caught, saga_scope(wal, gate=PreFlightGate()) as saga:
        saga.execute(tool="t.one", semantics="COMPENSABLE", forward=lambda: ran.append(1),
                     compensate=Compensation(fn=lambda: None, description="nothing"))
        monkeypatch.setenv("AGENT_SAGA_SWITCH", str(fleet))
        saga.execute(tool="t.two", semantics="REVERSIBLE", forward=lambda: ran.append(2))
    assert ran == [1]  # the new store's halt took effect
    assert isinstance(caught.value.__cause__, StepRefused)
    (changed,) = records(wal, "SWITCH_POSTURE_CHANGED")
    body = changed["body"]
    assert changed["saga"] == records(wal, "SAGA_STARTED")[0]["saga"] and changed["step"] == 2
    assert body["from"]["stores"] == [host]
    assert body["to"]["stores"] == [str(fleet), host]
    assert body["source"] == [{"setting": "AGENT_SAGA_SWITCH", "from": None, "to": str(fleet)}]
    types = [r["type"] for r in wal.records() if r.get("step") == 2]
    assert types.index("SWITCH_POSTURE_CHANGED") < types.index("STEP_REFUSED")


def test_a_host_root_moved_mid_saga_is_recorded(wal: FileWAL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = str(default_switch_path())
    with saga_scope(wal, gate=PreFlightGate()) as saga:
        saga.execute(tool="t.one", semantics="REVERSIBLE", forward=lambda: 1)
        monkeypatch.setenv("AGENT_SAGA_HOST_ROOT", str(tmp_path / "elsewhere"))
        saga.execute(tool="t.two", semantics="REVERSIBLE", forward=lambda: 2)
        saga.execute(tool="t.three", semantics="REVERSIBLE", forward=lambda: 3)
    (changed,) = records(wal, "SWITCH_POSTURE_CHANGED")  # once, at the step that first obeyed it
    body = changed["body"]
    assert changed["step"] == 2
    assert body["from"]["stores"] == [before]
    assert body["to"]["stores"] == [str(tmp_path / "elsewhere" / "var/lib/agent-saga/switch.json")]
    assert body["source"] == [{"setting": "AGENT_SAGA_HOST_ROOT", "from": str(tmp_path / "host"),
                               "to": str(tmp_path / "elsewhere")}]
    assert "AGENT_SAGA_HOST_ROOT=" + str(tmp_path / "elsewhere") in body["to"]["overrides"]
    # Every reader takes the new record in its stride: the chain verifies, the saga is certified
    # and the recovery fold sees three committed steps and nothing left to do.
    wal.close()
    assert verify_log(wal.path).ok
    assert certify_log(wal.path).certified
    (view,) = fold(read_records(wal.path)).values()
    assert view.ended == "SAGA_COMPLETED" and [s.state for s in view.newest_first()] == ["committed"] * 3


def test_an_unchanged_posture_writes_nothing(wal: FileWAL) -> None:
    with saga_scope(wal, gate=PreFlightGate()) as saga:
        for i in range(3):
            saga.execute(tool=f"t.{i}", semantics="REVERSIBLE", forward=lambda: None)
    assert not records(wal, "SWITCH_POSTURE_CHANGED")
