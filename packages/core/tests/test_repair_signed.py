"""A repair is an operator's signature, never a name in the log (issue 40 item 3).

The agent writes its own log: on its own dead saga it wrote REPAIR_OPENED naming
``ops@example.com`` and left it open, and the recovery daemon skipped the saga forever (0
undos, 0 escalations), so the charge stood. Now REPAIR_* records count only signed by an
operator key the host trusts, in the session they name; anything else is a claim the
daemon recovers through, and pictures and plans mark ``(unsigned)``. A signed session left
open (its claim free, or older than ``REPAIR_STALE_TTLS`` lease ttls) is escalated once as
``repair-stale``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from operator_support import untrusted_operator_key
from repair_checks import (
    LATER,
    OPERATOR,
    WHY,
    assert_both_undone,
    dead_onboarding,
    repair_world,
    signer,
    types,
)

from agent_saga import FileWAL, RecoveryDaemon, RepairSession
from agent_saga.audit import verify_records
from agent_saga.log.attestation import OperatorKey
from agent_saga.recovery.fold import DEFAULT_LEASE_TTL
from agent_saga.ui import reconstruct

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("repair_world")


def _opening(signed_by: str, saga_id: str, tmp_path: Path) -> dict[str, Any]:
    """The REPAIR_OPENED body the agent writes into its own log, without the operator's key."""
    opened = {"operator": OPERATOR, "reason": WHY, "retained": [1, 2], "session": "f" * 32}
    if signed_by == "nobody":
        return opened
    assert signed_by == "a key of its own"  # one the agent made for itself: the host never trusted it
    return OperatorKey.load(untrusted_operator_key(tmp_path, "ops@example.com")).sign_saga(
        "REPAIR_OPENED", saga_id, opened
    )


@pytest.mark.parametrize("signed_by", ["nobody", "a key of its own"])
async def test_a_repair_the_agent_opened_itself_does_not_silence_recovery(
    wal: FileWAL, tmp_path: Path, signed_by: str
) -> None:
    saga_id = await dead_onboarding(wal)  # the account made, the card charged, then the process died
    rtype = "REPAIR_OPENED"
    wal.barrier(wal.append(rtype, saga_id, _opening(signed_by, saga_id, tmp_path), None))  # and left open
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert saga_id not in report.skipped, report.summary()
    assert_both_undone(report, saga_id)  # the charge does not stand
    # Where a person reads it, the name is shown as the claim it is.
    (picture,) = [run for run in reconstruct(wal.records()) if run.saga_id == saga_id]
    assert any(v.type == rtype and f"{OPERATOR} (unsigned)" in v.label for v in picture.verdicts)
    assert f"{rtype} by {OPERATOR} (unsigned)" in RepairSession.plan(wal, saga_id, clock=LATER).format_text()
    verdict = verify_records(list(wal.records()))  # readable and intact: a claim is not a break
    assert verdict.ok and any(f"{rtype} record at seq" in n and f"{OPERATOR} (unsigned)" in n for n in verdict.notes)


async def test_an_end_the_agent_wrote_itself_is_neither_believed_nor_silent(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)
    wal.barrier(wal.append("REPAIR_RESUMED", saga_id, {  # "continued elsewhere": the effects kept on purpose
        "operator": OPERATOR, "reason": WHY, "continued_as": "0" * 32, "retained": [], "session": "f" * 32,
    }, None))
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        first, again = daemon.sweep(), daemon.sweep()
    # Not over (no key proves it), and not undone blindly (a repair resumed before repairs were
    # signed reads the same): a person is asked, once.
    assert [(e.saga, e.kind) for e in first.new_escalations] == [(saga_id, "repair-unsigned")]
    assert first.compensated == 0 and again.new_escalations == [] and saga_id in again.skipped
    assert "REPAIR_RESUMED by ops@example.com (unsigned)" in first.new_escalations[0].detail
    # The operator's signed session decides: abandoned, the daemon unwinds it.
    RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER).abandon(
        reason="never resumed by us"
    )
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert_both_undone(report, saga_id)


async def test_a_copy_of_a_signed_opening_opens_nothing(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)
    RepairSession.open(wal, saga_id, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER).abandon(
        reason="handed back"
    )
    opened = next(r for r in wal.records() if r["type"] == "REPAIR_OPENED")
    wal.barrier(wal.append("REPAIR_OPENED", saga_id, opened["body"], None))  # replayed in its own saga
    other = await dead_onboarding(wal)  # and moved to another saga
    wal.barrier(wal.append("REPAIR_OPENED", other, opened["body"], None))
    plan_text = RepairSession.plan(wal, saga_id, clock=LATER).format_text()
    assert "was opened before: a copy of its opening record opens nothing" in plan_text
    assert "does not cover this body" in RepairSession.plan(wal, other, clock=LATER).format_text()
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert sorted(report.recovered) == sorted([saga_id, other]) and report.compensated == 4


async def test_a_signed_repair_left_open_is_escalated_once_as_repair_stale(wal: FileWAL) -> None:
    from agent_saga.recovery.daemon import REPAIR_STALE_TTLS

    ttl = DEFAULT_LEASE_TTL
    soon = lambda: time.time() + ttl + 10
    old = lambda: time.time() + REPAIR_STALE_TTLS * ttl + 60
    left, held = await dead_onboarding(wal), await dead_onboarding(wal)
    RepairSession.open(wal, left, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER).close()
    session = RepairSession.open(wal, held, signer=signer(), operator=OPERATOR, reason=WHY, clock=LATER)
    with RecoveryDaemon(wal, clock=soon) as daemon:
        first = daemon.sweep()
        again = daemon.sweep()
    # The left session's claim is free: its process is gone. The held one is at work.
    assert [(e.saga, e.kind) for e in first.new_escalations] == [(left, "repair-stale")]
    assert "its claim is free" in first.new_escalations[0].detail
    assert again.new_escalations == [] and {left, held} <= set(again.skipped)
    with RecoveryDaemon(wal, clock=old) as daemon:
        late = daemon.sweep()
    assert [(e.saga, e.kind) for e in late.new_escalations] == [(held, "repair-stale")]
    assert f"more than {REPAIR_STALE_TTLS} lease ttls" in late.new_escalations[0].detail
    assert late.compensated == 0  # escalated, not taken from the operator
    assert types(wal, left).count("ESCALATED") == 1 and types(wal, held).count("ESCALATED") == 1
    # Ending the session answers its escalation, and the daemon unwinds what it handed back.
    session.abandon(reason="the customer cancelled")
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
        pending = [e.saga for e in daemon.escalations.pending()]
    assert held in report.recovered and pending == [left]
