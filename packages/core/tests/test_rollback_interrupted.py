"""A rollback that cannot finish here hands its saga over at once, and says it was not clean."""

from __future__ import annotations

import asyncio
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from agent_saga import Compensation, FileWAL, SagaAborted, WALError, saga_scope
from agent_saga.recovery.lease import lease_keeper


class FillingDisk(FileWAL):
    """A FileWAL whose device fills up on demand (the write fails with ENOSPC)."""

    full = False

    def _write(self, batch: list[Any]) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
        super()._write(batch)


def _held(saga_id: str) -> bool:
    return any(sid == saga_id for _, sid in lease_keeper().held())


def test_a_broken_log_during_the_rollback_gives_a_not_clean_report_and_stops_the_lease(tmp_path: Path) -> None:
    wal = FillingDisk(tmp_path / "full.wal")
    undone: list[str] = []
    try:
        with pytest.raises(SagaAborted) as info, saga_scope(wal, wait_for_commit=True) as s:
            s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                      compensate=lambda r: Compensation(fn=lambda: undone.append(r["id"])))
            assert _held(s.saga_id)  # live: its lease is being renewed
            wal.full = True
            raise RuntimeError("the agent failed")
        report = info.value.report
        assert isinstance(info.value.cause, RuntimeError)  # a SagaAborted, not a bare WALError
        assert not report.clean
        assert report.interrupted is not None and "WALError" in report.interrupted
        # No undo starts before its intent is on disk: the log refused it, so the refund did
        # not run here, unrecorded; the report says so, and the daemon runs it once, same key.
        assert undone == []
        assert [(o.tool, o.outcome.value) for o in report.steps] == [("charge", "unresolved")]
        assert s.saga.status.value == "ABANDONED"
        assert not _held(s.saga_id)  # no longer renewed: a daemon takes it over once the lease expires
        assert "rollback interrupted" in report.format_text()
    finally:
        wal.close()


def test_a_commit_that_cannot_be_made_durable_hands_the_saga_over(tmp_path: Path) -> None:
    wal = FillingDisk(tmp_path / "full.wal")
    try:
        with pytest.raises(WALError), saga_scope(wal) as s:
            s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": "ch_1"},
                      compensate=lambda r: Compensation(fn=lambda: None))
            wal.full = True
        assert s.saga.status.value == "ABANDONED"
        assert not _held(s.saga_id)
    finally:
        wal.close()


async def test_a_cancelled_rollback_is_handed_over_and_the_cancellation_goes_on(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "cancel.wal")
    started = asyncio.Event()
    ids: list[str] = []

    async def slow_refund() -> None:
        started.set()
        await asyncio.sleep(60)

    async def run() -> None:
        async with saga_scope(wal) as s:
            ids.append(s.saga_id)
            await s.execute(tool="charge", semantics="COMPENSABLE", forward=lambda: {"id": 1},
                            compensate=lambda r: Compensation(fn=slow_refund))
            raise RuntimeError("the agent failed")

    task = asyncio.create_task(run())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not _held(ids[0])
    types = [r["type"] for r in wal.records()]
    assert "SAGA_ROLLED_BACK" not in types  # nothing pretends the unwind finished
    wal.close()
