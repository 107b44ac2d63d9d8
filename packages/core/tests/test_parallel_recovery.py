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
from recovery_checks import read_log, run_worker, wait_until_expired

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
