"""Several calls at once on a server log (PostgreSQL, Redis): what the file log promises, the same.

A step the rollback left in flight lands, is undone in its own thread, and only then does the
saga's server lease go; a commit recorded after the saga rolled back makes the saga open again
for the recovery daemon on any host, which undoes it once.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from agent_saga import Compensation, RecoveryDaemon, SagaAborted, SagaClosed, compensator, saga_scope
from agent_saga.recovery.server_leases import server_leases

STANDING: set[str] = set()
_lock = threading.Lock()


@compensator("servers_parallel.cancel")
def cancel(ref: str, idempotency_key: str | None = None) -> None:
    with _lock:
        STANDING.discard(ref)


def _undo(result: Any) -> Compensation:
    return Compensation(fn=cancel, handler="servers_parallel.cancel", kwargs={"ref": result["ref"]})


def _records(wal: Any) -> list[tuple[str, int | None]]:
    wal.barrier()
    return [(r["type"], r.get("step")) for r in wal.records()]


def test_a_step_left_in_flight_is_undone_as_it_lands_and_the_lease_goes_last(server_wal: Any) -> None:
    ref = f"b-{uuid.uuid4().hex[:8]}"
    began, release = threading.Event(), threading.Event()

    def book() -> dict[str, str]:
        began.set()
        assert release.wait(30)
        with _lock:
            STANDING.add(ref)
        return {"ref": ref}

    with ThreadPoolExecutor(1) as pool:
        with pytest.raises(SagaAborted) as caught, saga_scope(server_wal, rollback_grace=0) as s:
            late = pool.submit(s.execute, tool="book", semantics="COMPENSABLE", forward=book, compensate=_undo)
            assert began.wait(30)
            raise RuntimeError("the other call failed")
        saga_id = caught.value.report.saga_id
        assert [o.step for o in caught.value.report.in_flight] == [1]
        assert saga_id in server_leases().held()  # a step still runs: the saga's lease is kept
        release.set()
        with pytest.raises(SagaClosed):
            late.result(30)
    assert ref not in STANDING
    assert saga_id not in server_leases().held()
    seen = _records(server_wal)
    end = seen.index(("SAGA_ROLLED_BACK", None))
    assert [t for t, step in seen[end:] if step == 1] == ["STEP_COMMITTED", "COMPENSATION_STARTED", "STEP_COMPENSATED"]
    with RecoveryDaemon(server_wal) as daemon:
        swept = daemon.sweep()
    assert (swept.open_sagas, swept.actions) == (0, []), swept.summary()


def test_a_commit_recorded_after_the_saga_rolled_back_is_undone_by_a_daemon_once(server_wal: Any) -> None:
    """As if the process had died between a late commit and its undo (its records are written here)."""
    ref = f"z-{uuid.uuid4().hex[:8]}"
    with pytest.raises(SagaAborted) as caught, saga_scope(server_wal) as s:
        s.execute(tool="noop", semantics="REVERSIBLE", forward=lambda: 1)
        raise RuntimeError("x")
    saga_id = caught.value.report.saga_id
    with _lock:
        STANDING.add(ref)  # the late call's effect
    server_wal.append("STEP_INTENT", saga_id, {"tool": "book", "semantics": "COMPENSABLE", "op": "op-z",
                                              "compensation": None}, 2)
    server_wal.append("STEP_COMMITTED", saga_id, {"op": "op-z", "compensation": {
        "handler": "servers_parallel.cancel", "kwargs": {"ref": ref}, "key": f"k-{ref}", "recoverable": True}}, 2)
    server_wal.barrier()
    later = time.time() + 3600  # the owner's lease and its last record, long past
    with RecoveryDaemon(server_wal, clock=lambda: later) as daemon:
        first = daemon.sweep()
    with RecoveryDaemon(server_wal, clock=lambda: later) as daemon:
        second = daemon.sweep()
    assert (first.recovered, first.compensated) == ([saga_id], 1), first.summary()
    assert (second.open_sagas, second.actions) == (0, []), second.summary()
    assert ref not in STANDING
    assert [t for t, _ in _records(server_wal)].count("SAGA_ROLLED_BACK") == 1
