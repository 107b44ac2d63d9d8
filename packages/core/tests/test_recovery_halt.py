"""The recovery daemon's undos obey a halt that names them, as the agent's own rollback does (issue 40 item 13).

In-process undos stopped for a halt naming their tool; the daemon's did not: an operator who
halted ``stripe.refund`` (a refund API misbehaving) saw the daemon call it anyway. Both now
ask one rule (``engine.undo.halt_on_undo``). Real parts: the host's kill switch under the
test's AGENT_SAGA_HOST_ROOT, lever pulled and lifted through the process's own switch (which
this process obeys at once), a FileWAL, the onboarding world of the repair tests.
"""

from __future__ import annotations

import pytest
import repair_world as world
from repair_checks import ACCOUNT, CHARGE, LATER, assert_both_undone, dead_onboarding, repair_world, types

from agent_saga import FileWAL, RecoveryDaemon
from agent_saga.gate import default_switch

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("fresh_gate_globals", "repair_world")


@pytest.mark.parametrize("scope", ["tool:stripe.refund", "tool:stripe.*"])
async def test_the_daemon_leaves_an_undo_a_halt_names_and_runs_it_once_the_halt_is_lifted(
    wal: FileWAL, scope: str
) -> None:
    saga_id = await dead_onboarding(wal)  # the account made, the card charged, then the process died
    default_switch().halt(scope, reason="incident 50: the refund API double-pays", by="soc@corp")
    # max_attempts=1: were a halted undo counted as an attempt, the second sweep would dead-letter the saga.
    with RecoveryDaemon(wal, clock=LATER, max_attempts=1) as daemon:
        halted, again = daemon.sweep(), daemon.sweep()
    assert world.undone("stripe.refund") == []  # not attempted
    assert world.undone("crm.delete_account") == []  # the older step waits for it (newest first)
    assert halted.held == [saga_id] and again.held == [saga_id]
    assert not halted.dead_lettered and not again.dead_lettered
    (asked,) = halted.new_escalations  # escalated once, whatever the number of sweeps
    assert (asked.saga, asked.step, asked.kind) == (saga_id, 2, "undo-halted")
    assert "incident 50" in asked.detail and again.new_escalations == []
    assert "COMPENSATION_STARTED" not in types(wal, saga_id)
    assert types(wal, saga_id).count("ESCALATED") == 1

    assert default_switch().resume(scope, by="soc@corp") == 1
    with RecoveryDaemon(wal, clock=LATER, max_attempts=1) as daemon:
        lifted = daemon.sweep()
        pending = daemon.escalations.pending()
    assert lifted.recovered == [saga_id] and lifted.compensated == 2
    assert world.undone("stripe.refund") == [CHARGE] and world.undone("crm.delete_account") == [ACCOUNT]
    assert pending == []  # answered by the undo that ran
    assert types(wal, saga_id)[-1] == "SAGA_ROLLED_BACK"


@pytest.mark.parametrize("scope", ["global", "tool:stripe.charge"])
async def test_a_halt_that_does_not_name_the_undo_lets_the_daemon_run_it(wal: FileWAL, scope: str) -> None:
    saga_id = await dead_onboarding(wal)
    default_switch().halt(scope, reason="incident 51", by="soc@corp")  # stops new effects, not their undos
    with RecoveryDaemon(wal, clock=LATER) as daemon:
        report = daemon.sweep()
    assert_both_undone(report, saga_id)


async def test_a_daemon_given_no_gate_asks_no_switch(wal: FileWAL) -> None:
    saga_id = await dead_onboarding(wal)
    default_switch().halt("tool:stripe.refund", reason="incident 52", by="soc@corp")
    with RecoveryDaemon(wal, clock=LATER, gate=None) as daemon:  # the opt-out, as set_default_gate(None)
        report = daemon.sweep()
    assert report.recovered == [saga_id] and world.undone("stripe.refund") == [CHARGE]
