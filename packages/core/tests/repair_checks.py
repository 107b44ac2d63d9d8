"""The repair scenarios, written once and run on every log: FileWAL here, Postgres and Redis in fleet/.

``dead_onboarding`` leaves a saga as a dead process would: the account created, the card
charged, step 3 refused for the model's malformed postcode, and no end record. Its
process is "gone" for the checks because they judge leases at ``LATER`` (an hour on),
the recovery daemon's own way of telling live from dead.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import repair_world as world
from operator_support import trusted_operator_key

from agent_saga import RecoveryDaemon, RepairRefused, RepairSession, Saga, SagaAborted, saga_scope
from agent_saga.audit import certify, verify_records
from agent_saga.log.base import WAL

__all__ = ["ACCOUNT", "CHARGE", "LATER", "assert_both_undone", "dead_onboarding", "later", "repair_world", "signer"]


def later() -> float:
    return time.time() + 3600


LATER = later
OPERATOR, WHY = "ops@example.com", "malformed postcode from the model"
CHARGE, ACCOUNT = "ch-acct-ada@example.com-4200", "acct-ada@example.com"  # what dead_onboarding's steps made


OPERATOR_KEY_ENV = "AGENT_SAGA_OPERATOR_KEY"  # where `agent-saga repair` reads its key


def signer() -> Path:
    """The operator key of this test's host (``repair_world`` makes it and the host trusts it)."""
    return Path(os.environ[OPERATOR_KEY_ENV])


@pytest.fixture
def repair_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = tmp_path / "world"
    monkeypatch.setenv("REPAIR_WORLD", str(where))
    # A repair is signed by an operator key the host trusts; the CLI reads it from the environment.
    monkeypatch.setenv(OPERATOR_KEY_ENV, str(trusted_operator_key(tmp_path)))
    world.register()
    try:
        yield where
    finally:
        world.unregister_all()


def assert_both_undone(report: Any, saga_id: str) -> None:
    """The sweep of ``report`` recovered ``saga_id`` and undid both its steps: the charge refunded, the account deleted."""
    assert report.recovered == [saga_id] and report.compensated == 2
    assert world.undone("stripe.refund") == [CHARGE]
    assert world.undone("crm.delete_account") == [ACCOUNT]


async def dead_onboarding(wal: WAL) -> str:
    """Steps 1 and 2 committed, step 3 refused (NOT_APPLIED), then the process "died": no end record."""
    boundary = saga_scope(wal, name="onboarding")
    saga = await boundary.__aenter__()  # never exited: the process died here
    account_id = await world.account_and_charge(saga)
    try:
        await world.address(saga, account_id, "SW1A1AA")
    except world.NotApplied:
        pass  # the agent was told; then its process died
    wal.barrier()
    return saga.saga_id


def types(wal: WAL, saga_id: str) -> list[str]:
    return [r["type"] for r in wal.records() if r["saga"] == saga_id]


async def check_the_seed_snippet(wal: WAL, records: Any) -> None:
    """The issue's snippet as written, with a real continuation; the repaired saga completes."""
    saga_id = await dead_onboarding(wal)
    continuation = world.onboard

    session = RepairSession.open(records, saga_id, signer=signer(), operator="ops@example.com",
                                 reason="malformed postcode from the model", clock=LATER)
    print(session.format_text())          # what is kept, what failed, any blockers
    session.amend(postcode="SW1A 1AA")    # recorded, with the old value
    assert await session.resume(continuation, wal=wal) == "onboarded"

    text = session.format_text()
    assert "step 1 crm.create_account [COMPENSABLE] undo: crm.delete_account(account_id='acct-ada@example.com')" in text
    assert "step 3 'crm.set_address': not-applied" in text
    assert "postcode: 'SW1A1AA' -> 'SW1A 1AA'" in text
    new_id = session.continued_as
    assert new_id is not None and new_id != saga_id
    records_now = list(wal.records())
    assert verify_records(records_now).ok
    mine = [r for r in records_now if r["saga"] == saga_id and r["type"].startswith("REPAIR_")]
    assert [r["type"] for r in mine] == ["REPAIR_OPENED", "REPAIR_AMENDED", "REPAIR_RESUMED"]
    opened, amended, resumed = (r["body"] for r in mine)
    assert (opened["operator"], opened["reason"], opened["retained"]) == (OPERATOR, WHY, [1, 2])
    assert (amended["field"], amended["old"], amended["new"], amended["seen_in"]) == (
        "postcode", "SW1A1AA", "SW1A 1AA", "step 3")
    assert resumed["continued_as"] == new_id
    assert [(k["step"], k["from_step"], k["tool"]) for k in resumed["retained"]] == [
        (1, 1, "crm.create_account"), (2, 2, "stripe.charge")]
    assert types(wal, new_id) == ["SAGA_STARTED", "STEP_INTENT", "STEP_COMMITTED", "SAGA_COMPLETED"]
    assert [r["step"] for r in records_now if r["saga"] == new_id and r["type"] == "STEP_INTENT"] == [3]
    assert world.undone("crm.set_address") == ["acct-ada@example.com"]
    assert not world.undone("stripe.refund") and not world.undone("crm.delete_account")
    cert = certify(records_now)
    assert cert.certified, cert.format_text()  # the old saga's effects are accounted for through the new one
    # The old saga is finished (continued), the new one completed: the daemon has nothing to do.
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert report.recovered == [] and report.compensated == 0


async def check_a_failed_continuation_unwinds_everything_once(wal: WAL, records: Any) -> None:
    """The resumed step fails: the whole transaction unwinds, retained steps included, newest first, once."""
    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    session.amend(postcode="SW1A 1AA")

    async def continuation(saga: Saga, amendments: dict[str, Any]) -> None:
        await world.address(saga, "acct-ada@example.com", amendments["postcode"])
        raise RuntimeError("the welcome e-mail bounced")

    with pytest.raises(SagaAborted) as aborted:
        await session.resume(continuation, wal=wal)
    report = aborted.value.report
    assert report.clean and [o.step for o in report.compensated] == [3, 2, 1]
    undos = [(e["op"], e["ref"]) for e in world.entries() if e["ev"] == "applied" and e["op"] in (
        "crm.clear_address", "stripe.refund", "crm.delete_account")]
    assert undos == [
        ("crm.clear_address", "acct-ada@example.com"),
        ("stripe.refund", "ch-acct-ada@example.com-4200"),
        ("crm.delete_account", "acct-ada@example.com"),
    ]
    # Same idempotency keys the old saga recorded: a provider would dedupe a second undo.
    old = {r["step"]: r["body"]["compensation"]["key"] for r in wal.records()
           if r["saga"] == saga_id and r["type"] == "STEP_COMMITTED"}
    refund_keys = [e["key"] for e in world.entries() if e["op"] in ("stripe.refund", "crm.delete_account")]
    assert refund_keys == [old[2], old[1]]
    # Nothing is left for a daemon: it undoes nothing twice.
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        swept = daemon.sweep()
    assert swept.compensated == 0 and swept.recovered == []
    assert len([e for e in world.entries() if e["op"] == "stripe.refund"]) == 1
    assert verify_records(list(wal.records())).ok
    assert certify(list(wal.records())).certified


async def check_a_second_open_is_refused(wal: WAL, records: Any, second: Any = None) -> None:
    """``second``: how the other operator names the log (default: as the first one does)."""
    saga_id = await dead_onboarding(wal)
    first = RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    try:
        with pytest.raises(RepairRefused, match=f"saga {saga_id} is being repaired or recovered by another process"):
            RepairSession.open(second or records, saga_id, signer=signer(), operator="other@example.com", reason="me too",
                               clock=LATER)
        # ... and the daemon leaves it alone while the session is open.
        with RecoveryDaemon(wal, clock=LATER) as daemon:
            report = daemon.sweep()
        assert saga_id not in report.recovered and report.compensated == 0
    finally:
        first.abandon(reason="handing it back")
    assert types(wal, saga_id).count("REPAIR_OPENED") == 1


async def check_an_abandoned_repair_is_finished_by_the_daemon(wal: WAL, records: Any) -> None:
    saga_id = await dead_onboarding(wal)
    session = RepairSession.open(records, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        held = daemon.sweep()
        assert saga_id in held.skipped and held.compensated == 0
        session.abandon(reason="the customer cancelled")
        report = daemon.sweep()
    assert_both_undone(report, saga_id)
    assert types(wal, saga_id)[-1] == "SAGA_ROLLED_BACK"
    assert verify_records(list(wal.records())).ok
