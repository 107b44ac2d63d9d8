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
import repair_world as world
from operator_support import untrusted_operator_key
from repair_checks import LATER, OPERATOR, WHY, dead_onboarding, repair_world, signer, types

from agent_saga import FileWAL, RecoveryDaemon, RepairSession
from agent_saga.log.attestation import OperatorKey
from agent_saga.recovery.fold import DEFAULT_LEASE_TTL
from agent_saga.ui import reconstruct

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("repair_world")

CHARGE, ACCOUNT = "ch-acct-ada@example.com-4200", "acct-ada@example.com"


def _forged(form: str, saga_id: str, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """What the agent writes into its own log, without the operator's key."""
    opened = {"operator": OPERATOR, "reason": WHY, "retained": [1, 2], "session": "f" * 32}
    if form == "unsigned-open":
        return "REPAIR_OPENED", opened
    if form == "own-key-open":  # a key the agent made for itself: the host never trusted it
        key = OperatorKey.load(untrusted_operator_key(tmp_path, "ops@example.com"))
        return "REPAIR_OPENED", key.sign_saga("REPAIR_OPENED", saga_id, opened)
    assert form == "unsigned-resumed"  # "continued elsewhere": would end the saga with nothing undone
    return "REPAIR_RESUMED", {"operator": OPERATOR, "reason": WHY, "continued_as": "0" * 32, "retained": [],
                              "session": "f" * 32}


@pytest.mark.parametrize("form", ["unsigned-open", "own-key-open", "unsigned-resumed"])
async def test_a_repair_the_agent_wrote_itself_does_not_silence_recovery(
    wal: FileWAL, tmp_path: Path, form: str
) -> None:
    saga_id = await dead_onboarding(wal)  # the account made, the card charged, then the process died
    rtype, body = _forged(form, saga_id, tmp_path)
    wal.barrier(wal.append(rtype, saga_id, body, None))
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert saga_id not in report.skipped, report.summary()
    assert report.recovered == [saga_id] and report.compensated == 2
    assert world.undone("stripe.refund") == [CHARGE]  # the charge does not stand
    assert world.undone("crm.delete_account") == [ACCOUNT]
    # Where a person reads it, the name is shown as the claim it is.
    (picture,) = [run for run in reconstruct(wal.records()) if run.saga_id == saga_id]
    assert any(v.type == rtype and f"{OPERATOR} (unsigned)" in v.label for v in picture.verdicts)
    assert f"{rtype} by {OPERATOR} (unsigned)" in RepairSession.plan(wal, saga_id, clock=LATER).format_text()


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
