"""The 2.x names on a server log (PostgreSQL, Redis): read_all, read_since, RecoveryDaemon.compact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from open_saga import leave_open

from agent_saga import ActionSemantics, Compensation, RecoveryDaemon, saga_scope
from agent_saga.audit import verify_records
from agent_saga.log.resolve import open_log

C = ActionSemantics.COMPENSABLE


def undo(r: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def test_read_all_read_since_and_daemon_compact_on_a_server_log(url: str, operator_key: Path) -> None:
    with open_log(url) as wal:
        with saga_scope(wal, name="done") as s:
            done = s.saga_id
            s.execute(tool="crm.add", semantics=C, forward=lambda: {"id": 1}, compensate=undo)

        running = leave_open(wal, undo)
        wal.barrier()
        every = wal.read_all()
        seqs = [r["seq"] for r in every]
        assert seqs == [r["seq"] for r in wal.records()] and seqs == sorted(seqs)
        assert [r["seq"] for r in wal.read_since(seqs[2])] == seqs[3:]
        newest = max(r["ts"] for r in every) / 1e6

    with RecoveryDaemon(url) as daemon:
        assert daemon.compact(signer=operator_key, grace_seconds=60, now=newest + 1).removed == 0
        result = daemon.compact(signer=operator_key, grace_seconds=60, now=newest + 61)
    assert result.removed == sum(1 for r in every if r["saga"] == done)
    with open_log(url) as wal:
        after = wal.read_all()
    assert not any(r["saga"] == done for r in after)
    assert any(r["saga"] == running for r in after)  # open: kept whatever its age
    assert verify_records(after).status == "intact"
