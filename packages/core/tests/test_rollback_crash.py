"""A worker SIGKILLed inside its own rollback: the daemon repeats at most the one undo in flight.

A real worker process charges U1..U5 (COMPENSABLE, refund known before the call)
on a FileWAL, fails, and unwinds newest first. Its k-th undo, once its refund has
landed in the world, tells the test and waits; the test SIGKILLs it there. Then
the real ``agent-saga recover`` runs. Judged by the world, which records every
call: every refund landed exactly once, and no undo key but the one in flight was
called twice (an undo that returned had its record on disk before the next began).

The worker's log lingers 60 s (see unwind_worker.py): no record reaches the disk
unless something waits for it, so a rollback that does not wait for each undo's
record loses all of them, every time, instead of in a 2 ms race.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from recovery_checks import chain_ok
from rollback_crash import Unwound, crash_in_rollback

pytestmark = pytest.mark.slow  # real worker and daemon processes

COUNT = 5


def check(run: Unwound, kill_at: int) -> None:
    """What must hold for any log, after a kill inside the ``kill_at``-th undo of COUNT."""
    # The kill point fired where intended: undos 1..k were called, once each, by the worker.
    assert len(run.worker_calls) == kill_at and set(run.worker_calls.values()) == {1}, run.worker_calls
    assert run.in_flight in run.worker_calls
    # Every undo ran, and landed once (the world dedupes by key) ...
    assert len(run.applied) == COUNT and set(run.applied.values()) == {1}, (run.applied, run.daemon_output)
    # ... and was *called* again only if it was the one in flight when the worker died.
    assert set(run.repeated) <= {run.in_flight} and max(run.calls.values()) <= 2, (
        f"undo keys called twice: {run.repeated}; only the one in flight ({run.in_flight}) may be "
        f"repeated: an undo that returned must have its record on disk before the next undo starts"
    )
    # On disk before the kill: each returned undo's outcome, and the in-flight undo's intent.
    returned = set(run.worker_calls) - {run.in_flight}
    done = {r["body"]["key"] for r in run.before if r["type"] == "STEP_COMPENSATED"}
    started = {r["body"]["key"] for r in run.before if r["type"] == "COMPENSATION_STARTED"}
    assert done == returned, (done, returned)
    assert run.in_flight in started
    ended = [r for r in run.after if r["type"] == "SAGA_ROLLED_BACK"]
    assert len(ended) == 1 and ended[0]["body"]["clean"] is True, run.daemon_output


@pytest.mark.parametrize(("face", "kill_at"), [("sync", 1), ("sync", 3), ("sync", COUNT), ("async", 3)])
def test_a_kill_inside_the_rollback_repeats_only_the_undo_in_flight(
    tmp_path: Path, face: str, kill_at: int
) -> None:
    wal = tmp_path / "saga.wal"
    run = crash_in_rollback(str(wal), tmp_path, COUNT, kill_at, face)
    check(run, kill_at)
    assert chain_ok(wal)
