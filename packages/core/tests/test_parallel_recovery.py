"""A step left in flight by its rollback, and its process killed before settling it: recovery finishes.

The worker (``recovery_worker.py late``) runs a charge beside a call that fails, with no
rollback grace: the rollback ends with the charge still in flight, the charge then lands and
its undo starts in the charge's own thread. The process is killed there, in two places; the
saga is rolled back in the log, yet the charge stands. The recovery daemon must treat that
saga as open, refund the charge exactly once, and answer the ``in-flight`` escalation.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import recovery_world as world
from concurrent_worker import encode, run_points
from recovery_checks import read_log, run_worker, wait_until_expired

from agent_saga.proving._concurrent_shapes import ConcurrentShape, Face, Fate, Sibling, Slot
from agent_saga.recovery import RecoveryDaemon, fold
from agent_saga.recovery.escalations import queue_of

pytestmark = pytest.mark.slow  # a worker process is killed


def _seen(ev: str, role: str | None = None) -> Counter[str]:
    """What the world saw, as "op:ref" -> count."""
    return Counter(f"{e['op']}:{e['ref']}" for e in world.entries() if e["ev"] == ev and role in (None, e["role"]))


@pytest.mark.parametrize("crash", [
    {"RECOVERY_CRASH_AT": "after:STEP_COMMITTED"},  # the late commit is on disk, its undo not begun
    {"RECOVERY_CRASH_EFFECT": "refund:L:before"},  # inside the late undo, before it applies
], ids=["after-the-late-commit", "inside-the-late-undo"])
def test_a_late_commit_whose_process_died_is_undone_by_the_daemon_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: dict[str, str]
) -> None:
    wal = tmp_path / "saga.wal"
    assert run_worker(wal, tmp_path, "late", **crash) == 137
    before = read_log(wal)
    types = [r["type"] for r in before]
    assert types.index("SAGA_ROLLED_BACK") < types.index("STEP_COMMITTED")  # it landed after the end
    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    assert _seen("applied") == {"charge:L": 1}  # and it stands
    (view,) = fold(before).values()
    assert view.ended == "SAGA_ROLLED_BACK" and view.open  # closed, yet open for recovery

    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    wait_until_expired()
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        first = daemon.sweep()
    assert (first.recovered, first.compensated) == ([view.saga_id], 1), first.summary()
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        second = daemon.sweep()
    assert (second.open_sagas, second.actions) == (0, []), second.summary()

    assert _seen("applied") == {"charge:L": 1, "refund:L": 1}
    assert _seen("attempt", role="daemon") == {"refund:L": 1}
    after = read_log(wal)
    assert [r["type"] for r in after].count("SAGA_ROLLED_BACK") == 1  # no second end record
    (done,) = fold(after).values()
    assert done.steps[1].compensated and not done.open
    (escalation,) = queue_of(wal).all()
    assert (escalation.kind, escalation.resolved) == ("in-flight", True)


@pytest.mark.parametrize(("slot", "crash"), [
    (Slot.AFTER, "after:STEP_COMPENSATED"),  # its late undo is on disk; the answer to its escalation is not
    (Slot.ENDING, "after:ESCALATED"),  # it was undone before the end's hook filed the escalation
], ids=["after-the-late-undo", "escalated-after-the-undo"])
def test_an_in_flight_escalation_whose_step_was_settled_before_its_process_died_is_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slot: Slot, crash: str
) -> None:
    """The late charge was refunded in its own thread, then the process died before it answered the
    step's in-flight escalation: the saga is closed (recovery has nothing to undo), yet a person is
    left told the step is still running. The daemon answers it once the owner's lease has run out.

    The ordering is forced by the concurrent model checker's scheduler, and every append of the
    worker's log waits for its record to be durable, so the kill comes right after that record.
    """
    shape = ConcurrentShape(0, (Sibling(Fate.COMMITS, slot),), (0,), True, Face.THREADS)
    env = {"RECOVERY_WORLD": str(tmp_path), "RECOVERY_CRASH_AT": crash}
    assert run_points(tmp_path, [{"shape": encode(shape), "dir": str(tmp_path), "env": env}]) == [137]
    wal = tmp_path / "saga.wal"
    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    assert _seen("applied") == {"charge:s1": 1, "refund:s1": 1}  # nothing stands
    (view,) = fold(read_log(wal)).values()
    assert view.ended == "SAGA_ROLLED_BACK" and not view.open
    (escalation,) = queue_of(wal).all()
    assert (escalation.kind, escalation.resolved) == ("in-flight", False)

    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    wait_until_expired()
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        first = daemon.sweep()
    assert (first.compensated, first.pending_escalations) == (0, 0), first.summary()
    assert [(a.step, a.kind) for a in first.actions] == [(1, "answer")]
    (escalation,) = queue_of(wal).all()
    assert escalation.resolved and "compensated" in escalation.note
    after = read_log(wal)
    assert [(r["step"], r["body"]["kind"]) for r in after if r["type"] == "ESCALATION_RESOLVED"] == [(1, "in-flight")]
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        second = daemon.sweep()
    assert second.actions == [] and len(read_log(wal)) == len(after)
    assert _seen("attempt", role="daemon") == {}  # it ran nothing


def test_an_in_flight_escalation_queued_without_its_record_is_answered_in_the_sweep_that_settles_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process died with the step still in flight, after the end's hook queued its in-flight
    escalation and before the ESCALATED record reached the log (record 6: start, intent, rollback
    started, left in flight, end, ESCALATED). The sweep that settles the step answers it too: a
    second sweep has nothing to do."""
    shape = ConcurrentShape(0, (Sibling(Fate.COMMITS, Slot.AFTER),), (0,), True, Face.THREADS)
    env = {"RECOVERY_WORLD": str(tmp_path), "RECOVERY_CRASH_AT": "before:6"}
    assert run_points(tmp_path, [{"shape": encode(shape), "dir": str(tmp_path), "env": env}]) == [137]
    wal = tmp_path / "saga.wal"
    assert [r["type"] for r in read_log(wal)][-1] == "SAGA_ROLLED_BACK"
    ((kind, resolved),) = [(e.kind, e.resolved) for e in queue_of(wal).all()]
    assert (kind, resolved) == ("in-flight", False)

    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    wait_until_expired()
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        first = daemon.sweep()
    # it never landed and its undo needed the result: a person checks the remote system
    assert [(a.step, a.kind) for a in first.actions] == [(1, "escalate"), (None, "finish"), (1, "answer")]
    assert {e.kind: e.resolved for e in queue_of(wal).all()} == {"in-flight": True, "unknown-outcome": False}
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        second = daemon.sweep()
    assert second.actions == [], second.summary()
