"""Recovery over a server log verifies the chain first, as it does over a file log.

A record edited in the database (what anyone with write access to the table or
the Redis keys could do) must stop recovery before it acts on anything; the
operator's override acts only on records sound on their own and says so in the
log; a compaction between two sweeps is not mistaken for an edit. Each test runs
on both backends.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from refund_world import fresh_refunds, later, refunds
from servers import edit_stored_line

from agent_saga import ActionSemantics, Compensation, saga_scope
from agent_saga.log.chain import ChainUnverified
from agent_saga.log.resolve import open_log
from agent_saga.recovery import RecoveryDaemon
from agent_saga.recovery.fold import ServerTail

__all__ = ["fresh_refunds"]  # the fixture, imported for pytest


def dead_saga(wal: Any, saga: str, ref: str) -> None:
    """An open saga with one committed charge whose undo is known from its commit record."""
    wal.append("SAGA_STARTED", saga, {"name": "checkout", "lease_ttl": 1.0})
    wal.append("STEP_INTENT", saga, {"tool": "stripe.charge", "semantics": "COMPENSABLE", "op": f"o-{saga}",
                                     "args": {}, "compensation": None}, 1)
    wal.append("STEP_COMMITTED", saga, {"op": f"o-{saga}", "compensation": {
        "handler": "evidence.refund", "kwargs": {"ref": ref}, "key": f"key-{saga}", "recoverable": True}}, 1)
    wal.barrier()


def types(url: str) -> list[str]:
    with open_log(url, create=False) as wal:
        return [r["type"] for r in wal.records()]


def test_recovery_refuses_an_edited_server_log_and_the_override_never_acts_on_the_edit(
    url: str, backend: str
) -> None:
    with open_log(url) as wal:
        dead_saga(wal, "s1", "A")
        edit_stored_line(wal, backend, 3, '"kwargs":{"ref":"A"}', '"kwargs":{"ref":"Z"}')  # the attack
    written = types(url)

    with RecoveryDaemon(url, clock=later, lease_grace=0) as daemon:
        with pytest.raises(ChainUnverified, match=r"seq 3 \(line 3\).*trust_unverified=True"):
            daemon.sweep()
        assert daemon.verdict is not None and daemon.verdict.status == "broken"
    assert refunds == [] and types(url) == written  # refused before acting, nothing written

    with RecoveryDaemon(url, clock=later, lease_grace=0, trust_unverified=True) as daemon:
        report = daemon.sweep()
        escalated = {e.kind for e in daemon.escalations.pending()}
    assert refunds == []  # the forged undo is never run, trusted or not
    assert report.recovered or report.held
    assert "unverified-records" in escalated
    with open_log(url, create=False) as wal:
        claim = next(r for r in wal.records() if r["type"] == "RECOVERY_CLAIMED")
    assert claim["body"]["trust_unverified"].startswith("BROKEN at seq 3")
    assert claim["body"]["ignored_seqs"] == [3]


def test_recover_cli_over_a_server_url_refuses_in_one_line_naming_the_override(url: str, backend: str) -> None:
    with open_log(url) as wal:
        dead_saga(wal, "s1", "A")
        edit_stored_line(wal, backend, 2, '"tool":"stripe.charge"', '"tool":"stripe.refund"')
    done = subprocess.run([sys.executable, "-m", "agent_saga", "recover", "--wal-path", url, "--lease-grace", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    # (Redis without persistence also gets its warning logged: the refusal is one line of its own.)
    (message,) = [line for line in done.stderr.splitlines() if line.startswith("agent-saga recover:")]
    assert url.rpartition("log=")[2] in message and "Traceback" not in done.stderr
    assert "seq 2 (line 2)" in message and "--trust-unverified" in message


def test_a_sweep_after_a_compaction_still_finds_the_chain_intact(url: str, operator_key: Path) -> None:
    with open_log(url) as wal:
        with saga_scope(wal, name="settled") as s:
            s.execute(tool="crm.add", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 1},
                      compensate=lambda r: Compensation(fn=lambda: None))
        before = time.time()
        dead_saga(wal, "s2", "B")
        # The daemon's clock stays at the moment before s2's records, so its 1 s lease has not run
        # out at either sweep. (On the wall clock, a process stalled 1 s before the first sweep,
        # as on a loaded machine, saw it run out and recovered s2: then no saga was left open.)
        with RecoveryDaemon(url, clock=lambda: before, lease_grace=0) as daemon:
            assert daemon.sweep().live == ["s2"]  # nothing is done
            assert daemon.verdict is not None and daemon.verdict.ok
            assert wal.compact(by="ops", reason="settled", signer=operator_key).removed > 0
            report = daemon.sweep()
            assert daemon.verdict.ok, daemon.verdict.label
            assert report.open_sagas == 1


def test_a_compaction_landing_between_the_tails_two_reads_is_not_taken_for_an_edit(
    url: str, operator_key: Path
) -> None:
    # A tail that starts over reads the log twice: once for what its COMPACTION records
    # attest, once to check and fold. A compaction in between must not read as deleted records.
    with open_log(url) as wal:
        with saga_scope(wal, name="settled") as s:
            s.execute(tool="crm.add", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 1},
                      compensate=lambda r: Compensation(fn=lambda: None))
        dead_saga(wal, "s3", "C")
        read = wal.lines_after
        reads: list[int] = []

        def compact_before_the_second_read(seq: int = 0) -> Iterator[tuple[int, str]]:
            reads.append(seq)
            if len(reads) == 2:  # another process compacts just then
                with open_log(url) as other:
                    assert other.compact(by="ops", reason="settled", signer=operator_key).removed > 0
            return iter(list(read(seq)))

        wal.lines_after = compact_before_the_second_read
        tail = ServerTail(wal)
        tail.refresh()
    assert tail.verdict.status == "intact", tail.verdict.label
    assert len(reads) > 2  # it noticed, and read again
    assert set(tail.sagas) == {"s3"}


def test_a_dead_saga_hidden_behind_an_unsigned_compaction_stops_recovery(url: str, operator_key: Path) -> None:
    """Issue 25, item 4, on a server log: the agent holds the log's credentials and rewrites it itself."""
    import hashlib
    import json

    from agent_saga.log.codec import seal
    from agent_saga.log.rewrite import Change, Stored

    with open_log(url) as wal:
        with saga_scope(wal, name="settled") as s:
            s.execute(tool="crm.add", semantics=ActionSemantics.COMPENSABLE, forward=lambda: {"id": 1},
                      compensate=lambda r: Compensation(fn=lambda: None))
        dead_saga(wal, "s4", "D")
        wal.append("SAGA_COMPLETED", "later", {})
        wal.barrier()

        def hide(stored: Stored) -> Change:
            records = [json.loads(line) for _, line in stored.lines]
            gone = [r for r in records if r["saga"] == "s4"]
            body = {"removed": [{
                "first": gone[0]["seq"], "last": gone[-1]["seq"], "count": len(gone), "last_hash": gone[-1]["hash"],
                "hashes_sha256": hashlib.sha256("\n".join(r["hash"] for r in gone).encode()).hexdigest(),
            }], "records": len(gone), "by": "agent-saga compact", "reason": "settled sagas"}
            seq = stored.head_seq + 1
            data, head, _ = seal([(seq, time.time_ns() // 1000, "COMPACTION", "", None, body)], stored.head_hash)
            return Change(removed=[r["seq"] for r in gone], appended=(seq, data.decode().rstrip("\n"), head))

        wal._rewrite(hide)
        with RecoveryDaemon(url, clock=later, lease_grace=0) as daemon, pytest.raises(
            ChainUnverified, match=r"the COMPACTION record at seq [0-9]+ cannot be trusted: it carries no operator"
        ):
            daemon.sweep()
        assert refunds == []
        with pytest.raises(ValueError, match="must be signed by an operator key"):
            wal.compact(by="ops", reason="settled")
