"""The agent edits its approval store: the deadline and a denial hold anyway (issue 25, item 9).

The agent can write the store (its own files, or the Redis it shares). It must not get
more time by moving a request's deadline, nor a second chance at a person's "no" by
deleting (or resetting) the denied request: the gateway takes both from the saga's
hash-chained log. Real parts: a FileWAL, a FileApprovalStore or Redis, a webhook on
127.0.0.1, and a signing key the test host trusts.
"""

from __future__ import annotations

import datetime
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from approval_support import Hook, approval_store, bodies, gateway, of_type, policy, trusted_key, wait_for
from gate_support import req

from agent_saga import (
    FileApprovalStore,
    FileWAL,
    PreFlightGate,
    SagaAborted,
    StepRefused,
    saga_scope,
)
from agent_saga.approvals import ApprovalExpired, Notification, RedisApprovalStore, Status, decide
from agent_saga.audit import verify_log
from agent_saga.gate import ApprovalRequest


def seconds(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.UTC).timestamp()


class AgentMovesTheDeadline:
    """A notifier that, as the request goes out, has the agent push the store's deadline back.

    It runs inside the gateway's wait, before the first poll: the edit lands before the
    real deadline on any machine, however slow.
    """

    def __init__(self, store: FileApprovalStore, extra: float) -> None:
        self.store = store
        self.extra = extra
        self.moved_to: float | None = None

    def notify(self, notification: Notification) -> None:
        def later(entry: Any) -> Any:
            self.moved_to = entry.deadline + self.extra
            return entry.replace(deadline=self.moved_to)

        self.store.update(notification.entry.id, later)


def test_moving_the_deadline_in_the_store_does_not_move_it(wal: FileWAL, tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    agent = AgentMovesTheDeadline(store, extra=5.0)
    gate = PreFlightGate(approval_provider=gateway(store, agent, wal, policy(0.3)))
    sent: list[int] = []
    with pytest.raises(SagaAborted) as caught, saga_scope(wal, gate=gate) as saga:
        saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: sent.append(1),
                     args={"amount": 80_000})
    assert sent == [] and agent.moved_to is not None
    assert isinstance(caught.value.__cause__, StepRefused) and "expir" in caught.value.__cause__.reason
    (requested,) = bodies(wal, "APPROVAL_REQUESTED")
    (expired,) = bodies(wal, "APPROVAL_EXPIRED")
    # Expired at the deadline the log states, long before the one the agent wrote into the store.
    deadline = seconds(requested["expires_at"])
    assert deadline < agent.moved_to - 4
    assert deadline <= seconds(expired["decided_at"]) < agent.moved_to
    (entry,) = store.entries()
    assert entry.status is Status.EXPIRED and entry.deadline < agent.moved_to


class PersonShownAMovedDeadline(AgentMovesTheDeadline):
    """The agent moves the deadline; a person, shown the moved one, approves after the real one."""

    def __init__(self, store: FileApprovalStore, key: Any) -> None:
        super().__init__(store, extra=60.0)
        self.key = key

    def notify(self, notification: Notification) -> None:
        super().notify(notification)
        real = notification.entry.deadline  # what the gateway told people
        while time.time() <= real:  # the person answers after it (a wait for an instant, not a timing claim)
            time.sleep(0.05)
        decide(self.store, notification.entry.id, "approve", approver="risk@corp", note="ok", key=self.key)


def test_a_grant_signed_after_the_real_deadline_is_denied_as_late(wal: FileWAL, tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    person = PersonShownAMovedDeadline(store, trusted_key())
    gate = PreFlightGate(approval_provider=gateway(store, person, wal, policy(0.3)))
    sent: list[int] = []
    with pytest.raises(SagaAborted) as caught, saga_scope(wal, gate=gate) as saga:
        saga.execute(tool="wire.send", semantics="IRREVERSIBLE", forward=lambda: sent.append(1))
    assert sent == []
    cause = caught.value.__cause__
    assert isinstance(cause, StepRefused) and "after its deadline" in cause.reason
    (entry,) = store.entries()
    assert entry.status is Status.GRANTED  # the store says yes; the gateway did not believe it
    (denied,) = bodies(wal, "APPROVAL_DENIED")
    assert denied["approver"] is None and "after its deadline" in denied["note"]
    assert not bodies(wal, "APPROVAL_GRANTED")


def deny_once(store: Any, hook: Hook, key: Any) -> threading.Thread:
    def person() -> None:
        wait_for(lambda: hook.count >= 1, "the approval request")
        decide(store, hook.requests()[0], "deny", approver="risk@corp", note="unknown beneficiary", key=key)

    t = threading.Thread(target=person, daemon=True)
    t.start()
    return t


def forget(store: Any, request: str, how: str) -> None:
    """The agent's move: delete the denied request, or set it back to pending."""
    if how == "reset":
        store.update(request, lambda e: e.replace(status=Status.PENDING, approver=None, note="", decided_at=None,
                                                  decided_via="", notified=(), escalated=(), logged=(),
                                                  signer=None, signature=None))
    elif isinstance(store, RedisApprovalStore):
        store.client.delete(store._key(request))
        store.client.srem(f"{store.prefix}:ids", request)
    else:
        (Path(store.location) / f"{request}.json").unlink()


@pytest.mark.parametrize(("kind", "how"), [("file", "delete"), ("file", "reset"), pytest.param("redis", "delete", marks=pytest.mark.redis)])
def test_a_denied_request_the_agent_deletes_is_refused_without_asking_again(
    kind: str, how: str, hook: Hook, wal: FileWAL, tmp_path: Path
) -> None:
    key = trusted_key()
    with approval_store(kind, tmp_path) as store:
        gw = gateway(store, hook.url, wal, policy(3.0))
        request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=80_000), "irreversible", "cannot be undone")
        person = deny_once(store, hook, key)
        first = gw.request_approval(request)
        person.join(30)
        assert first.approved is False and first.approver == "risk@corp"
        forget(store, hook.requests()[0], how)

        again = gw.request_approval(request)

        assert again.approved is False and again.approver == "risk@corp"
        assert "unknown beneficiary" in again.note and "not asked again" in again.note
        assert hook.count == 1  # the person was not asked a second time
        if how == "delete":
            assert store.get(hook.requests()[0]) is None  # and no new request was made
    # The denial the gateway went by is the one in the log, under the saga and step that asked.
    (denied,) = of_type(list(wal.records()), "APPROVAL_DENIED")
    assert (denied["saga"], denied["step"]) == ("saga-1", 1)
    assert denied["body"]["approver"] == "risk@corp" and denied["body"]["request"] == hook.requests()[0]
    assert len(bodies(wal, "APPROVAL_REQUESTED")) == 1
    wal.close()
    assert verify_log(wal.path).ok


def test_an_expired_request_the_agent_deletes_stays_expired(hook: Hook, wal: FileWAL, tmp_path: Path) -> None:
    store = FileApprovalStore(tmp_path / "approvals")
    gw = gateway(store, hook.url, wal, policy(0.2))
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=5), "irreversible", "cannot be undone")
    with pytest.raises(ApprovalExpired):
        gw.request_approval(request)
    forget(store, hook.requests()[0], "delete")
    with pytest.raises(ApprovalExpired, match="nobody is asked again"):
        gw.request_approval(request)
    assert hook.count == 1


def test_a_denial_by_nobody_is_not_remembered(wal: FileWAL, tmp_path: Path) -> None:
    """A webhook that failed asked nobody: once the entry is gone, asking is no replay of a "no"."""
    broken = Hook(status=500)
    store = FileApprovalStore(tmp_path / "approvals")
    request = ApprovalRequest(req("wire.send", "IRREVERSIBLE", amount=5), "irreversible", "cannot be undone")
    try:
        gw = gateway(store, broken.url, wal, policy(3.0))
        with pytest.raises(Exception, match="HTTP 500"):
            gw.request_approval(request)
        forget(store, broken.requests()[0], "delete")
        with pytest.raises(Exception, match="HTTP 500"):
            gw.request_approval(request)
        assert broken.count == 2
    finally:
        broken.close()
