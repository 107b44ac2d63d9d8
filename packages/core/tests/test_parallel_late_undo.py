"""A step that lands after its rollback is undone in its own task; that task may be cancelled then.

An async step left in flight by a rollback (``rollback_grace=0``) lands late and is undone in the
task that ran it (``settle_late``). A framework whose tasks outlive its run (AutoGen's runtime)
has that task cancelled when the loop shuts down, while the undo, a sync handler, runs on the
engine's tool pool: a thread the cancellation does not stop. The undo's effect happens; what the
log holds of it decides whether recovery runs it a second time. Seen through AutoGen before its
sync steps moved onto its executor thread: ``COMPENSATION_STARTED`` with no outcome, and the
recovery daemon ran each undo again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from parallel_support import BOUND, Bookings, SignalWAL

from agent_saga import Compensation, RecoveryDaemon, SagaAborted, compensator, saga_scope

HELD = "late_undo.held_cancel"


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SignalWAL]:
    wal = SignalWAL(tmp_path / "late-undo.wal")
    yield wal
    wal.close()


def test_a_late_undo_whose_task_is_cancelled_is_recorded_when_it_returns_and_never_run_again(
    log: SignalWAL,
) -> None:
    world = Bookings()
    entered, release = threading.Event(), threading.Event()

    @compensator(HELD)
    def held_cancel(ref: str, idempotency_key: str | None = None) -> None:
        entered.set()
        release.wait(BOUND)
        world.cancel(ref)

    async def main() -> None:
        started, land = asyncio.Event(), asyncio.Event()

        async def forward() -> dict[str, str]:
            started.set()
            await land.wait()
            return world.book("b1")

        def undo(result: Any) -> Compensation:
            return Compensation(fn=held_cancel, handler=HELD, kwargs={"ref": result["ref"]})

        step: asyncio.Future[Any] | None = None
        with pytest.raises(SagaAborted):
            async with saga_scope(log, rollback_grace=0) as s:
                step = asyncio.ensure_future(s.execute(tool="book", semantics="COMPENSABLE", forward=forward,
                                                       compensate=undo))
                await started.wait()  # the step's call is running when the rollback begins
                raise RuntimeError("a sibling failed")
        assert step is not None
        land.set()  # the step lands after its rollback: its undo starts, in the step's task
        assert await asyncio.to_thread(entered.wait, BOUND)
        step.cancel()  # as a loop shutting down cancels the tasks left over
        await asyncio.gather(step, return_exceptions=True)

    asyncio.run(main())
    release.set()  # the undo, on its thread, now returns: the booking is cancelled
    log.wait_for("STEP_COMPENSATED", 1)
    log.barrier()
    with RecoveryDaemon(log.path, clock=lambda: time.time() + 3600) as daemon:  # once the lease ran out
        daemon.sweep()
    assert world.cancelled == {"b1": 1}
