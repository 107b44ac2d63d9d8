"""The 2.x line's (and seed 000's) names for the log and the daemon, as the 3.x line provides them.

``BaseWAL`` is ``WAL``; ``read_all()`` and ``read_since(gseq)`` read any log;
``RecoveryDaemon.compact()`` computes the keep-set with a grace period and compacts
under a signed attestation. ``tool_executor_stats()`` and ``configure_tool_executor()`` name
the bounded tool pool again (docs/MIGRATING.md), and the last test here pins where a blocking tool runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from pathlib import Path
from typing import Any

import pytest
from open_saga import leave_open, settle_two

import agent_saga
from agent_saga import (
    ActionSemantics,
    BaseWAL,
    Compensation,
    ConfigurationError,
    FileWAL,
    MemoryWAL,
    RecoveryDaemon,
    saga_scope,
)
from agent_saga.audit import verify_log
from agent_saga.log import read_records

C = ActionSemantics.COMPENSABLE


def undo(r: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def test_basewal_is_the_wal_interface_itself() -> None:
    assert BaseWAL is agent_saga.WAL is agent_saga.log.BaseWAL
    assert isinstance(MemoryWAL(), BaseWAL)


def _three_sagas(wal: agent_saga.WAL) -> list[int]:
    for n in range(3):
        with saga_scope(wal, name=f"s{n}") as s:
            s.execute(tool="db.insert", semantics=C, forward=lambda n=n: {"id": n}, compensate=undo)
    wal.barrier()
    return [r["seq"] for r in wal.records()]


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_read_all_is_every_record_and_read_since_is_a_cursor(kind: str, tmp_path: Path) -> None:
    wal: agent_saga.WAL = MemoryWAL() if kind == "memory" else FileWAL(tmp_path / "a.wal")
    try:
        seqs = _three_sagas(wal)
        assert [r["seq"] for r in wal.read_all()] == seqs and len(seqs) >= 9
        assert [r["seq"] for r in wal.read_since(0)] == seqs
        cursor = seqs[4]
        assert [r["seq"] for r in wal.read_since(cursor)] == seqs[5:]
        assert list(wal.read_since(seqs[-1])) == []
    finally:
        wal.close()


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_read_since_refuses_what_is_not_a_seq(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"read_since\(gseq\) needs a record's seq"):
        MemoryWAL().read_since(bad)


def _settled_and_open(path: Path) -> dict[str, str]:
    wal = FileWAL(path)
    ids = settle_two(wal, undo)
    wal.close()
    return ids


def test_daemon_compact_removes_settled_sagas_past_the_grace_period(tmp_path: Path, operator_key: Path) -> None:
    path = tmp_path / "agent-saga.wal"
    ids = _settled_and_open(path)
    newest = max(r["ts"] for r in read_records(path)) / 1e6  # the log keeps microseconds
    with RecoveryDaemon(path) as daemon:
        # Within the grace period: both settled sagas are kept, nothing is rewritten.
        assert daemon.compact(signer=operator_key, grace_seconds=3600, now=newest + 10).removed == 0
        assert {r["saga"] for r in read_records(path)} >= set(ids.values())
        # Past it: both go, under an attestation, and the chain still verifies.
        result = daemon.compact(signer=operator_key, grace_seconds=3600, now=newest + 3601)
    assert result.removed > 0
    left = list(read_records(path))
    assert not {r["saga"] for r in left} & set(ids.values())
    assert [r["type"] for r in left] == ["COMPACTION"]
    assert verify_log(path).ok


def test_daemon_compact_keeps_an_open_saga_whatever_its_age(tmp_path: Path, operator_key: Path) -> None:
    path = tmp_path / "agent-saga.wal"
    wal = FileWAL(path)

    running = leave_open(wal, undo)  # never ended: a crashed owner
    wal.barrier()
    wal.close()
    with RecoveryDaemon(path) as daemon:
        assert daemon.compact(signer=operator_key, grace_seconds=0, now=10**12).removed == 0
    assert {r["saga"] for r in read_records(path)} == {running}


def test_daemon_compact_without_an_operator_key_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "agent-saga.wal"
    _settled_and_open(path)
    before = path.read_bytes()
    with RecoveryDaemon(path) as daemon, pytest.raises(ConfigurationError, match="operator key"):
        daemon.compact(signer=None, grace_seconds=0)
    assert path.read_bytes() == before


@pytest.mark.parametrize("bad", [-1, "1h", True])
def test_daemon_compact_refuses_a_grace_that_is_not_seconds(tmp_path: Path, bad: Any) -> None:
    path = tmp_path / "agent-saga.wal"
    _settled_and_open(path)
    with RecoveryDaemon(path) as daemon, pytest.raises(ValueError, match="grace_seconds"):
        daemon.compact(signer=None, grace_seconds=bad)


def test_tool_executor_stats_and_configure_tool_executor_are_back_for_the_tool_pool() -> None:
    # 2.x's tool_executor_stats()/configure_tool_executor(max_workers=) name the bounded pool
    # again (issue 32): a sync tool awaited in a saga runs there, not on the loop's default
    # executor, which stays the application's (docs/MIGRATING.md).
    seen: list[str] = []

    def charge() -> dict[str, str]:
        seen.append(threading.current_thread().name)
        return {"id": "ch_1"}

    async def main() -> None:
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="tools")
        asyncio.get_running_loop().set_default_executor(pool)
        async with saga_scope(MemoryWAL()) as s:
            await s.execute(tool="payments.charge", semantics=C, forward=charge, compensate=undo)

    size = agent_saga.tool_executor_stats().size
    agent_saga.configure_tool_executor(max_workers=size)
    asyncio.run(main())
    assert len(seen) == 1 and seen[0].startswith("agent-saga-tool-")
