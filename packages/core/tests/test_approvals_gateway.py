"""ApprovalGateway in one process: the seed's snippet, deadlines, escalation, break-glass, failures.

Real parts throughout: a FileWAL, a FileApprovalStore in a temporary directory
(or Redis), a real HTTP server on 127.0.0.1 for webhooks, and the real
PreFlightGate and saga engine. The "person" is a thread deciding through the
same API the CLI uses.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from approval_support import Hook, bodies, gateway, of_type, policy, trusted_key, wait_for
from gate_support import dead_port, req

from agent_saga import (
    ApprovalGateway,
    ApprovalPolicy,
    EscalationLevel,
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    StepRefused,
    WebhookNotifier,
    saga_scope,
)
from agent_saga.approvals import ConsoleNotifier, RedisApprovalStore, Status, decide, request_id
from agent_saga.approvals._evidence import log_key
from agent_saga.approvals._gateway import CLAIM_GRACE
from agent_saga.audit import verify_log
from agent_saga.gate import ApprovalRequest
from agent_saga.log import read_records


@pytest.fixture
def store(tmp_path: Path) -> FileApprovalStore:
    return FileApprovalStore(tmp_path / "approvals")


KEY: Any = None


@pytest.fixture(autouse=True)
def _approver_key() -> None:
    """Every "person" here signs with a key this test's host trusts (as after `approvals keygen` + `trust`)."""
    global KEY
    KEY = trusted_key()
    KEY.save()  # where the CLI looks for it


class Wire:
    """The IRREVERSIBLE effect, counted."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def __call__(self) -> str:
        self.sent.append(80_000)
        return "sent"


def run_wire(wal: FileWAL, gate: PreFlightGate, saga_id: str = "saga-1") -> Wire:
    wire = Wire()
    with saga_scope(wal, gate=gate, saga_id=saga_id) as saga:
        saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=wire,
                     args={"amount": 80_000, "to": "acct_9"})
    return wire


def refused(wal: FileWAL, gate: PreFlightGate, saga_id: str = "saga-1") -> StepRefused:
    with pytest.raises(SagaAborted) as caught:
        run_wire(wal, gate, saga_id)
    cause = caught.value.__cause__
    assert isinstance(cause, StepRefused), caught.value
    return cause


def person(store: Any, hook: Hook, verdict: str = "approve", *, after: int = 1, note: str = "verified by phone",
           approver: str = "risk@corp") -> threading.Thread:
    """Answers once ``after`` notifications arrived, through the API the CLI uses."""

    def answer() -> None:
        wait_for(lambda: hook.count >= after, f"{after} notification(s)")
        decide(store, hook.requests()[0][:8], verdict, approver=approver, note=note, key=KEY)  # type: ignore[arg-type]

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    return t


def test_the_seed_snippet_runs_as_written(hook: Hook, wal: FileWAL, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_WEBHOOK", hook.url)
    gate = PreFlightGate(approval_provider=ApprovalGateway(
        store=FileApprovalStore(),                       # RedisApprovalStore for a fleet
        notifier=WebhookNotifier(os.environ["SLACK_WEBHOOK"]),
        wal=wal,
        policy=ApprovalPolicy(timeout=900, levels=(
            EscalationLevel(targets=("@oncall",)),
            EscalationLevel(targets=("@head-of-risk",), after_seconds=300))),
    ))
    answered = person(FileApprovalStore(), hook)
    wire = run_wire(wal, gate)
    answered.join(30)
    assert wire.sent == [80_000]
    # The default store lives under $AGENT_SAGA_HOME (the tests point it at a temporary directory).
    assert FileApprovalStore().path == Path(os.environ["AGENT_SAGA_HOME"]) / "approvals"
    (granted,) = bodies(wal, "APPROVAL_GRANTED")
    assert (granted["approver"], granted["note"], granted["args"]["amount"]) == ("risk@corp", "verified by phone", 80_000)
    assert hook.bodies[0]["agent_saga"]["targets"] == ["@oncall"]
    assert "@oncall" in hook.bodies[0]["text"] and "wire.send" in hook.bodies[0]["text"]
    assert hook.count == 1  # answered long before the second level's 300 s
    wal.close()
    assert verify_log(wal.path).ok


def test_the_deadline_denies_and_the_expiry_is_logged(hook: Hook, wal: FileWAL, store: FileApprovalStore) -> None:
    gate = PreFlightGate(approval_provider=gateway(store, hook.url, wal, policy(timeout=0.3)))
    err = refused(wal, gate)
    assert "expir" in err.reason
    (expired,) = bodies(wal, "APPROVAL_EXPIRED")
    assert expired["approver"] is None and expired["args"] == {"amount": 80_000, "to": "acct_9"}
    (entry,) = store.entries()
    assert entry.status is Status.EXPIRED
    assert not of_type(list(wal.records()), "STEP_INTENT")
    # Too late to say yes: the step already gave up, and the store refuses the answer.
    with pytest.raises(Exception, match="already EXPIRED"):
        decide(store, entry.id, "approve", approver="late@corp", key=KEY)


def test_escalation_reaches_the_next_level_after_its_delay_and_records_it_once(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    pol = policy(60.0, EscalationLevel(targets=("@oncall",)),
                 EscalationLevel(targets=("@head-of-risk",), after_seconds=0.2))
    gate = PreFlightGate(approval_provider=gateway(store, hook.url, wal, pol))
    answered = person(store, hook, after=2, approver="head@corp")
    wire = run_wire(wal, gate)
    answered.join(30)
    assert wire.sent == [80_000]
    assert [b["agent_saga"]["targets"] for b in hook.bodies] == [["@oncall"], ["@head-of-risk"]]
    assert [b["agent_saga"]["event"] for b in hook.bodies] == ["requested", "escalated"]
    (escalated,) = bodies(wal, "APPROVAL_ESCALATED")
    assert escalated["level"] == 2 and escalated["targets"] == ["@head-of-risk"]
    (entry,) = store.entries()
    assert entry.escalated == (0, 1) and entry.notified == (0, 1)
    types = [r["type"] for r in wal.records() if r["type"].startswith("APPROVAL_")]
    assert types == ["APPROVAL_REQUESTED", "APPROVAL_ESCALATED", "APPROVAL_GRANTED"]


def test_a_later_level_is_not_asked_when_the_first_answers_in_time(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    pol = policy(60.0, EscalationLevel(targets=("@oncall",)),
                 EscalationLevel(targets=("@head-of-risk",), after_seconds=50))
    answered = person(store, hook)
    run_wire(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal, pol)))
    answered.join(30)
    assert hook.count == 1 and not bodies(wal, "APPROVAL_ESCALATED")


def test_break_glass_grants_and_is_recorded_apart_flagged_for_review(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    answered = person(store, hook, "break-glass", approver="cto@corp", note="payroll deadline")
    wire = run_wire(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal)))
    answered.join(30)
    assert wire.sent == [80_000]
    (glass,) = bodies(wal, "APPROVAL_BREAK_GLASS")
    assert glass["requires_review"] is True and glass["approver"] == "cto@corp"
    assert glass["note"] == "payroll deadline"
    assert not bodies(wal, "APPROVAL_GRANTED")  # it must not read as a normal approval
    (entry,) = store.entries()
    assert entry.status is Status.BREAK_GLASS and entry.requires_review


def test_a_person_who_denies_refuses_the_step_and_is_named(hook: Hook, wal: FileWAL, store: FileApprovalStore) -> None:
    answered = person(store, hook, "deny", note="unknown beneficiary")
    err = refused(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal)))
    answered.join(30)
    assert err.reason == "denied by risk@corp: unknown beneficiary"
    (denied,) = bodies(wal, "APPROVAL_DENIED")
    assert denied["approver"] == "risk@corp"
    (step_refused,) = bodies(wal, "STEP_REFUSED")
    assert step_refused["rule"] == "irreversible"


def test_a_webhook_answering_500_denies(wal: FileWAL, store: FileApprovalStore) -> None:
    broken = Hook(status=500)
    try:
        err = refused(wal, PreFlightGate(approval_provider=gateway(store, broken.url, wal)))
    finally:
        broken.close()
    assert broken.count == 1 and "HTTP 500" in err.reason
    (denied,) = bodies(wal, "APPROVAL_DENIED")
    assert denied["approver"] is None and "HTTP 500" in denied["note"]
    assert "secret" not in denied["note"]  # the webhook URL is a credential: never logged whole
    (entry,) = store.entries()
    assert entry.status is Status.DENIED
    # the request was in the log before anyone was (not) told
    types = [r["type"] for r in wal.records() if r["type"].startswith("APPROVAL_")]
    assert types == ["APPROVAL_REQUESTED", "APPROVAL_DENIED"]


def test_an_unreachable_webhook_denies(wal: FileWAL, store: FileApprovalStore) -> None:
    notifier = WebhookNotifier(f"http://127.0.0.1:{dead_port()}/hook", timeout=2)
    gate = PreFlightGate(approval_provider=gateway(store, notifier, wal))
    err = refused(wal, gate)
    assert "unreachable" in err.reason
    assert store.entries()[0].status is Status.DENIED


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_an_unreachable_store_denies_before_anyone_is_asked(
    kind: str, hook: Hook, wal: FileWAL, tmp_path: Path
) -> None:
    if kind == "file":
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("x")
        store: Any = FileApprovalStore(blocker)
    else:
        store = RedisApprovalStore(f"redis://127.0.0.1:{dead_port()}/0", timeout=0.3)
    err = refused(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal)))
    assert "approval store" in err.reason
    assert hook.count == 0
    (denied,) = bodies(wal, "APPROVAL_DENIED")
    assert denied["approver"] is None and store.location in denied["note"]
    if kind == "redis":
        store.client.close()


def test_a_store_that_breaks_while_waiting_denies(hook: Hook, wal: FileWAL, store: FileApprovalStore) -> None:
    def break_store() -> None:
        wait_for(lambda: hook.count == 1, "the notification")
        # One atomic rename, not rmtree: the gateway keeps writing into the store while
        # it waits, and a tree removed file by file under a writer can fail half-way.
        store.path.rename(store.path.with_name("gone"))
        store.path.write_text("the disk went away")

    t = threading.Thread(target=break_store, daemon=True)
    t.start()
    err = refused(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal)))
    t.join(30)
    assert "approval store" in err.reason
    assert bodies(wal, "APPROVAL_DENIED")


def test_a_retried_step_finds_its_decision_instead_of_asking_twice(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    gw = gateway(store, hook.url, wal)
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=80_000), "irreversible", "cannot be undone")
    answered = person(store, hook)
    first = gw.request_approval(request)
    answered.join(30)
    again = gw.request_approval(request)
    assert first.approved and again.approved and again.approver == "risk@corp"
    assert hook.count == 1
    assert len(bodies(wal, "APPROVAL_REQUESTED")) == 1 and len(bodies(wal, "APPROVAL_GRANTED")) == 1
    # Another step (or another rule) is another question.
    assert request_id("saga-1", 2, "wire.send", "irreversible") != hook.requests()[0]
    other = ApprovalRequest(req("wire.send", "IRREVERSIBLE", step=2, amount=5), "irreversible", "cannot be undone")
    decide_later = threading.Thread(target=lambda: (
        wait_for(lambda: hook.count == 2, "the second request"),
        decide(store, hook.requests()[1], "deny", approver="risk@corp"),
    ), daemon=True)
    decide_later.start()
    assert gw.request_approval(other).approved is False
    decide_later.join(30)


async def test_the_async_wait_keeps_the_event_loop_running(hook: Hook, wal: FileWAL, store: FileApprovalStore) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    def answer() -> None:
        wait_for(lambda: hook.count == 1, "the notification")
        seen = ticks
        # Only a loop that is not blocked by the wait keeps ticking.
        wait_for(lambda: ticks >= seen + 5, "the event loop to keep running while the saga waits")
        decide(store, hook.requests()[0], "approve", approver="risk@corp", note="async", key=KEY)

    running = asyncio.create_task(ticker())
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    wire = Wire()
    gate = PreFlightGate(approval_provider=gateway(store, hook.url, wal))
    async with saga_scope(wal, gate=gate, saga_id="saga-async") as saga:
        await saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=wire, args={"amount": 1})
    running.cancel()
    t.join(30)
    assert wire.sent == [80_000]
    (granted,) = bodies(wal, "APPROVAL_GRANTED")
    assert granted["note"] == "async"


@pytest.mark.slow
def test_a_decision_logged_by_the_cli_to_the_same_log_is_not_written_twice(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    def answer() -> None:
        wait_for(lambda: hook.count == 1, "the notification")
        subprocess.run(
            [sys.executable, "-m", "agent_saga", "approvals", "approve", hook.requests()[0][:10],
             "--approver", "risk@corp", "--note", "by phone", "--store", str(store.path), "--wal-path", str(wal.path)],
            check=True, capture_output=True, timeout=60,
        )

    t = threading.Thread(target=answer, daemon=True)
    t.start()
    run_wire(wal, PreFlightGate(approval_provider=gateway(store, hook.url, wal)))
    t.join(30)
    (granted,) = bodies(wal, "APPROVAL_GRANTED")
    assert granted["written_by"] == "cli"
    wal.close()
    assert verify_log(wal.path).ok


def test_a_fresh_claim_by_another_writer_is_honoured_and_a_stale_one_is_not(
    hook: Hook, wal: FileWAL, store: FileApprovalStore
) -> None:
    class Counting(FileApprovalStore):
        gets = 0

        def get(self, request_id: str) -> Any:
            Counting.gets += 1
            return super().get(request_id)

    store = Counting(store.path)
    gw = gateway(store, hook.url, wal)
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible", "cannot be undone")
    key = log_key("decided", wal)

    def decide_with_claim(claimed_at: float) -> Any:
        wait_for(lambda: hook.count >= 1 and store.entries(), "the request")
        rid = store.entries()[0].id
        return store.update(rid, lambda e: KEY.sign(e.replace(
            status=Status.GRANTED, approver="web@corp", note="clicked", decided_at=time.time(),
            decided_via="web", claims={key: claimed_at})))

    # A claim made just now: the gateway leaves the record to its claimant, who writes it.
    def claimant() -> None:
        entry = decide_with_claim(time.time())
        seen = Counting.gets
        # The gateway has read the decision at least once since: it must have waited, not written.
        wait_for(lambda: Counting.gets >= seen + 2, "the gateway to observe the decision")
        from agent_saga.approvals._evidence import decision_body, decision_type, mark_logged

        wal.barrier(wal.append(decision_type(entry).value, entry.saga_id, decision_body(entry, "web"), entry.step))
        store.update(entry.id, mark_logged(key))

    t = threading.Thread(target=claimant, daemon=True)
    t.start()
    assert gw.request_approval(request).approved
    t.join(30)
    assert [b["written_by"] for b in bodies(wal, "APPROVAL_GRANTED")] == ["web"]

    # A claim older than the grace period: its writer died; the gateway writes the record itself.
    second = ApprovalRequest(req("wire.send", "IRREVERSIBLE", saga="saga-2", amount=1), "irreversible", "x")
    t2 = threading.Thread(target=lambda: (
        wait_for(lambda: hook.count >= 2, "the second request"),
        store.update(hook.requests()[1], lambda e: KEY.sign(e.replace(
            status=Status.GRANTED, approver="web@corp", decided_at=time.time(), decided_via="web",
            claims={key: time.time() - CLAIM_GRACE - 1}))),
    ), daemon=True)
    t2.start()
    assert gw.request_approval(second).approved
    t2.join(30)
    assert [b["written_by"] for b in bodies(wal, "APPROVAL_GRANTED")] == ["web", "gateway"]


def test_the_console_notifier_prints_and_a_closed_stream_denies(wal: FileWAL, store: FileApprovalStore) -> None:
    out = io.StringIO()
    gw = gateway(store, ConsoleNotifier(out), wal)
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible", "cannot be undone")

    def read_and_deny() -> None:
        printed = wait_for(out.getvalue, "the printed request")
        (shown,) = re.findall(r"approvals approve ([0-9a-f]{8})", printed)  # the command it tells you to run
        decide(store, shown, "deny", approver="ops@corp", note="read it on the console")

    t = threading.Thread(target=read_and_deny, daemon=True)
    t.start()
    decision = gw.request_approval(request)
    t.join(30)
    assert (decision.approved, decision.approver) == (False, "ops@corp")
    assert "wire.send" in out.getvalue()

    closed = io.StringIO()
    closed.close()
    gw = gateway(store, ConsoleNotifier(closed), wal)
    other = ApprovalRequest(req("wire.send", "IRREVERSIBLE", step=2, amount=1), "irreversible", "x")
    with pytest.raises(Exception, match="failed"):
        gw.request_approval(other)


def test_the_example_in_the_approvals_guide_runs(hook: Hook, monkeypatch: pytest.MonkeyPatch) -> None:
    guide = Path(__file__).resolve().parents[3] / "docs" / "APPROVALS.md"
    code = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S)[0]
    monkeypatch.setenv("SLACK_WEBHOOK", hook.url)
    sent: list[str] = []
    answered = person(FileApprovalStore(), hook)
    namespace: dict[str, Any] = {"send_wire": lambda: sent.append("wire") or "sent"}
    exec(compile(code, str(guide), "exec"), namespace)
    answered.join(30)
    namespace["wal"].close()
    assert sent == ["wire"]
    assert [r["type"] for r in read_records(Path("agent-saga.wal")) if r["type"].startswith("APPROVAL_")] == [
        "APPROVAL_REQUESTED", "APPROVAL_GRANTED"]


def test_a_restart_tells_a_level_whose_message_never_went_out(hook: Hook, wal: FileWAL, store: FileApprovalStore) -> None:
    from agent_saga.approvals._entry import new_entry

    # The first attempt took level 1's turn and died before delivering: the store says so.
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=1), "irreversible", "cannot be undone")
    stranded = new_entry(request, time.time(), 60.0, ((("@oncall",), 0.0),)).replace(escalated=(0,))
    store.create(stranded)
    answered = person(store, hook)
    assert gateway(store, hook.url, wal).request_approval(request).approved
    answered.join(30)
    assert hook.count == 1 and hook.requests() == [stranded.id]
    (entry,) = store.entries()
    assert entry.notified == (0,) and entry.escalated == (0,)


async def test_the_async_path_fails_closed_too(wal: FileWAL, store: FileApprovalStore) -> None:
    broken = Hook(status=503)
    try:
        gate = PreFlightGate(approval_provider=gateway(store, broken.url, wal))
        wire = Wire()
        with pytest.raises(SagaAborted) as caught:
            async with saga_scope(wal, gate=gate, saga_id="saga-async-broken") as saga:
                await saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=wire, args={"amount": 1})
    finally:
        broken.close()
    assert isinstance(caught.value.__cause__, StepRefused) and "HTTP 503" in caught.value.__cause__.reason
    assert wire.sent == []
    (denied,) = bodies(wal, "APPROVAL_DENIED")
    assert "HTTP 503" in denied["note"]
