"""What every log promises, as test bodies shared by every backend.

Imported by ``test_wal_contract.py`` (the file and memory logs) and by
``fleet/test_wal_contract_servers.py`` (PostgresWAL and RedisWAL against real
servers). Each of those supplies two fixtures built from :class:`Backend`:

- ``backend``: every log (append, barriers, reading back, close);
- ``durable_backend``: the group-commit logs, which can also stall. Its ``stall()``
  holds the real store off (the file's lock held by another writer, the head row
  locked by another transaction, the Redis server stopped), so a commit in flight
  waits as it would on a wedged device or an unreachable server.

The group-commit logs share one implementation of all this (``log.group``); these
tests pin that they also share the behaviour, whatever the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent_saga import WAL
from agent_saga.errors import WALClosed, WALFull, WALStalled
from agent_saga.log.chain import verify_records
from agent_saga.log.group import GroupCommitWAL

__all__ = [
    "Backend",
    "test_a_closed_log_refuses_records_with_one_error",
    "test_a_durable_log_is_a_group_commit_log",
    "test_a_stalled_commit_stalls_the_barrier_with_one_error_and_keeps_the_record",
    "test_block_backpressure_waits_at_most_the_barrier_timeout",
    "test_close_keeps_what_was_queued_and_is_idempotent",
    "test_close_of_a_stalled_log_is_bounded_and_says_what_it_left",
    "test_refuse_backpressure_refuses_once_the_queue_is_full",
    "test_signed_redaction_and_compaction_plan_and_attest_alike_on_every_backend",
    "test_the_async_barrier_covers_the_ticket_it_names",
    "test_the_async_barrier_stalls_with_the_same_error",
    "test_tickets_count_up_and_a_barrier_makes_them_readable",
]


@dataclass
class Backend:
    """How to open, reopen and stall one kind of log."""

    name: str
    #: A fresh, empty log; keywords are the group-commit options (ignored by a memory log).
    make: Callable[..., WAL]
    #: The same log opened again (what a new process would read); the log itself if it has no store.
    reopen: Callable[[WAL], WAL]
    #: Holds the store off while the context is open (a nullcontext for a log that cannot stall).
    stall: Callable[[WAL], contextlib.AbstractContextManager[None]] = lambda wal: contextlib.nullcontext()
    #: The log's rewrites (redact_record, redact_where, compact), as the backend offers them.
    rewriter: Callable[[WAL], Any] | None = None
    #: The bytes the log's records take in its store, as the store holds them.
    stored_bytes: Callable[[WAL], int] | None = None
    opened: list[WAL] = field(default_factory=list)

    def open(self, **options: Any) -> WAL:
        wal = self.make(**options)
        self.opened.append(wal)
        return wal

    def read(self, wal: WAL) -> list[Any]:
        """The bodies of every record, read as a new process would."""
        again = self.reopen(wal)
        if again is not wal:
            self.opened.append(again)
        return [r["body"] for r in again.records()]

    def close_all(self) -> None:
        for wal in self.opened:
            wal.close()


def _bodies(wal: WAL) -> list[Any]:
    return [r["body"] for r in wal.records()]


# -- every log ----------------------------------------------------------------------------


def test_tickets_count_up_and_a_barrier_makes_them_readable(backend: Backend) -> None:
    wal = backend.open()
    tickets = [wal.append("NOTE", "s", {"i": i}, i) for i in range(5)]
    assert tickets == list(range(tickets[0], tickets[0] + 5))
    wal.barrier()
    assert _bodies(wal) == [{"i": i} for i in range(5)]
    assert [r["step"] for r in wal.records()] == list(range(5))


def test_the_async_barrier_covers_the_ticket_it_names(backend: Backend) -> None:
    wal = backend.open()

    async def run() -> None:
        first = wal.append("NOTE", "s", {"i": 1})
        await wal.barrier_async(first)
        second = wal.append("NOTE", "s", {"i": 2})
        await wal.barrier_async()
        assert second == first + 1

    asyncio.run(run())
    assert _bodies(wal) == [{"i": 1}, {"i": 2}]


def test_close_keeps_what_was_queued_and_is_idempotent(backend: Backend) -> None:
    wal = backend.open()
    wal.append("NOTE", "s", {"unwaited": True})  # nobody waits for it: close must still keep it
    wal.close()
    wal.close()
    assert backend.read(wal) == [{"unwaited": True}]


def test_a_closed_log_refuses_records_with_one_error(backend: Backend) -> None:
    wal = backend.open()
    wal.close()
    with pytest.raises(WALClosed, match="is closed"):
        wal.append("NOTE", "s", {})


# -- the group-commit logs ----------------------------------------------------------------


def test_a_durable_log_is_a_group_commit_log(durable_backend: Backend) -> None:
    # One lifecycle: the queue, barriers, stall errors and close come from log.group.
    assert isinstance(durable_backend.open(), GroupCommitWAL)


def test_a_stalled_commit_stalls_the_barrier_with_one_error_and_keeps_the_record(durable_backend: Backend) -> None:
    wal = durable_backend.open(barrier_timeout=30.0)
    first = wal.append("NOTE", "s", {"i": 1})
    wal.barrier(first)
    with durable_backend.stall(wal):
        ticket = wal.append("NOTE", "s", {"i": 2})
        with pytest.raises(WALStalled) as stalled:
            wal.barrier(ticket, timeout=0.3)
        wal.barrier(first, timeout=0.3)  # what is already durable never waits on the store
    assert re.search(
        rf"record {ticket} of .+ was not durable after 0\.3s \(durable up to {first}\); .+, "
        r"the record is still queued", str(stalled.value),
    ), str(stalled.value)
    wal.barrier(ticket)  # the store is back: the queued record commits, once
    assert durable_backend.read(wal) == [{"i": 1}, {"i": 2}]


def test_the_async_barrier_stalls_with_the_same_error(durable_backend: Backend) -> None:
    wal = durable_backend.open(barrier_timeout=30.0)
    wal.barrier(wal.append("NOTE", "s", {"i": 1}))

    async def wait(ticket: int) -> None:
        await wal.barrier_async(ticket, timeout=0.3)

    with durable_backend.stall(wal):
        ticket = wal.append("NOTE", "s", {"i": 2})
        with pytest.raises(WALStalled) as stalled:
            asyncio.run(wait(ticket))
    assert re.search(rf"record {ticket} of .+ was not durable after 0\.3s", str(stalled.value))
    asyncio.run(wal.barrier_async(ticket))
    assert durable_backend.read(wal) == [{"i": 1}, {"i": 2}]


def test_refuse_backpressure_refuses_once_the_queue_is_full(durable_backend: Backend) -> None:
    wal = durable_backend.open(max_pending=2, backpressure="refuse")
    with durable_backend.stall(wal):
        # The flusher holds at most one batch in flight, however many records it took (at most
        # every one appended so far): with two queued behind it, the next append is refused.
        with pytest.raises(WALFull, match=r"records waiting for .*\(max_pending=2\); refusing rather than dropping"):
            for i in range(5):
                wal.append("NOTE", "s", {"i": i})
        kept = i
    wal.barrier()
    assert durable_backend.read(wal) == [{"i": n} for n in range(kept)]


def test_block_backpressure_waits_at_most_the_barrier_timeout(durable_backend: Backend) -> None:
    wal = durable_backend.open(max_pending=1, backpressure="block", barrier_timeout=0.3)
    with durable_backend.stall(wal), pytest.raises(WALStalled, match=r"no room in the queue after 0\.3s"):
        for i in range(3):
            wal.append("NOTE", "s", {"i": i})
    wal.barrier(timeout=30.0)
    assert wal.broken is None


def test_close_of_a_stalled_log_is_bounded_and_says_what_it_left(
    durable_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    wal = durable_backend.open()
    wal.barrier(wal.append("NOTE", "s", {"i": 1}))
    with durable_backend.stall(wal):
        wal.append("NOTE", "s", {"i": 2})
        with caplog.at_level(logging.ERROR, logger="agent_saga.wal"):
            wal.close(timeout=0.3)
        assert wal.closed
        with pytest.raises(WALClosed, match="is closed; records can no longer be appended"):
            wal.append("NOTE", "s", {"i": 3})
        wal.close()  # a second close returns at once
    assert any(re.search(r"closed with 1 records not durable", m) for m in caplog.messages), caplog.messages
    # Whatever became of the record left behind, nothing is written twice or out of order.
    assert durable_backend.read(wal) in ([{"i": 1}], [{"i": 1}, {"i": 2}])


def test_signed_redaction_and_compaction_plan_and_attest_alike_on_every_backend(
    durable_backend: Backend, operator_key: Path
) -> None:
    assert durable_backend.rewriter is not None and durable_backend.stored_bytes is not None
    wal = durable_backend.open()
    for i in range(3):  # a settled saga, with text that takes more bytes than characters
        wal.append("STEP_INTENT", "done", {"name": f"Zoë {i}", "note": "日本"}, i)
    wal.append("SAGA_COMPLETED", "done", {})
    kept = wal.append("STEP_INTENT", "open", {"email": "ann@example.com"}, 1)
    wal.barrier()
    rewriter = durable_backend.rewriter(wal)

    redacted = rewriter.redact_record(kept, by="dpo", reason="erasure request", signer=operator_key)
    assert (redacted.seqs, redacted.record_seq) == ((kept,), kept + 1)
    before = durable_backend.stored_bytes(wal)
    compacted = rewriter.compact(by="ops", reason="settled", signer=operator_key)
    # Counted in bytes as stored, whatever the backend (the file always did; a server counted characters).
    assert (compacted.bytes_before, compacted.bytes_after) == (before, durable_backend.stored_bytes(wal))
    assert (compacted.removed, compacted.kept, compacted.ranges, compacted.attestation_seq) == (
        4, 3, ((kept - 4, kept - 1),), kept + 2
    )
    again = rewriter.compact(by="ops", reason="settled", signer=operator_key)
    assert (again.removed, again.attestation_seq, again.bytes_after) == (0, None, again.bytes_before)

    wal.append("NOTE", "open", {"after": True})  # writers continue the chain after both rewrites
    wal.barrier()
    durable_backend.opened.append(reopened := durable_backend.reopen(wal))
    records = list(reopened.records())
    assert verify_records(records).status == "intact", verify_records(records).reason
    assert [(r["seq"], r["type"]) for r in records] == [
        (kept, "STEP_INTENT"), (kept + 1, "REDACTION"), (kept + 2, "COMPACTION"), (kept + 3, "NOTE"),
    ]
    assert "body" not in records[0] and records[0]["redacted"]["by"] == "dpo"
    assert records[1]["body"]["seqs"] == [kept] and records[2]["body"]["records"] == 4
