"""The parts of recovery on their own: log tail, ledger, claims, escalation queue, leases, replay check."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples

from agent_saga import ActionSemantics, FileWAL, MemoryWAL, NonDeterminismError, saga_scope
from agent_saga.log.file import read_records
from agent_saga.log.lines import parses
from agent_saga.recovery import (
    EscalationQueue,
    FileLedger,
    LogTail,
    check_replay,
    check_step,
    fold,
    read_lease,
    try_claim,
)
from agent_saga.recovery.lease import LeaseKeeper, lease_keeper, lease_path

REVERSIBLE = ActionSemantics.REVERSIBLE
# The module, not the function of the same name that the package exports.
fold_module: Any = importlib.import_module("agent_saga.recovery.fold")


def wait_for(condition: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


# -- LogTail ----------------------------------------------------------------------------


def _write_log(path: Path, sagas: int, steps: int) -> None:
    with FileWAL(path) as wal:
        for s in range(sagas):
            saga = f"saga{s}"
            wal.append("SAGA_STARTED", saga, {"name": saga, "lease_ttl": 7})
            for i in range(1, steps + 1):
                wal.append("STEP_INTENT", saga, {"tool": f"tool{i}", "semantics": "COMPENSABLE",
                                                 "compensation": None}, i)
                wal.append("STEP_COMMITTED", saga, {"compensation": {"handler": "h", "kwargs": {},
                                                                     "key": f"k{s}.{i}", "recoverable": True}}, i)
            if s % 2:
                wal.append("SAGA_COMPLETED", saga, {"steps": steps})


@settings(max_examples=examples(30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sagas=st.integers(1, 4), steps=st.integers(0, 3),
       cuts=st.lists(st.floats(0, 1), min_size=1, max_size=6), chunk=st.sampled_from([7, 300, 1 << 22]))
def test_reading_a_log_in_pieces_folds_to_the_same_state(
    tmp_path_factory: pytest.TempPathFactory, sagas: int, steps: int, cuts: list[float], chunk: int
) -> None:
    """However the bytes arrive (cut mid-line, or just before a newline), the tail folds what a full read folds."""
    fold_module._CHUNK, default_chunk = chunk, fold_module._CHUNK  # reads cut mid-line too
    try:
        _read_in_pieces(tmp_path_factory, sagas, steps, cuts)
    finally:
        fold_module._CHUNK = default_chunk


def _read_in_pieces(tmp_path_factory: pytest.TempPathFactory, sagas: int, steps: int, cuts: list[float]) -> None:
    source = tmp_path_factory.mktemp("src") / "full.wal"
    _write_log(source, sagas, steps)
    data = source.read_bytes()
    grown = source.with_name("grown.wal")
    grown.write_bytes(b"")
    tail = LogTail(grown)
    for offset in [*sorted(int(c * len(data)) for c in cuts), len(data)]:
        grown.write_bytes(data[:offset])
        tail.refresh()
        cut = data[:offset]
        complete = cut[: cut.rfind(b"\n") + 1]
        rest = cut[len(complete):]  # a last line counts once it parses (the log's final-line rule)
        assert tail.records == complete.count(b"\n") + bool(rest.strip() and parses(rest))
    expected = fold(read_records(source))
    assert tail.sagas == expected
    assert {s for s, v in tail.sagas.items() if v.open} == {f"saga{s}" for s in range(sagas) if not s % 2}
    assert all(v.lease_ttl == 7 for v in tail.sagas.values())


def test_a_replaced_log_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    _write_log(path, 2, 1)
    tail = LogTail(path)
    tail.refresh()
    replacement = tmp_path / "b.wal"
    _write_log(replacement, 1, 2)
    os.replace(replacement, path)  # what a compaction does
    tail.refresh()
    assert set(tail.sagas) == {"saga0"}
    assert len(tail.sagas["saga0"].steps) == 2


def test_a_log_replaced_under_the_same_inode_is_read_again_from_the_start(tmp_path: Path) -> None:
    # Two rewrites between two refreshes can leave the inode unchanged (ext4 hands a new file the
    # inode an earlier rewrite freed); made certain here by rewriting the file in place.
    path, replacement = tmp_path / "a.wal", tmp_path / "b.wal"
    _write_log(path, 2, 1)
    _write_log(replacement, 1, 6)
    assert replacement.stat().st_size > path.stat().st_size
    tail = LogTail(path)
    tail.refresh()
    inode = path.stat().st_ino
    path.write_bytes(replacement.read_bytes())
    assert path.stat().st_ino == inode
    tail.refresh()
    assert set(tail.sagas) == {"saga0"}
    assert len(tail.sagas["saga0"].steps) == 6


# -- ledger -----------------------------------------------------------------------------


def test_ledger_keeps_attempts_apart_from_successes_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first, second = FileLedger(path), FileLedger(path)
    first.attempt("k", "s", 1, "a")
    first.failed("k", "s", 1, "a", "ConnectionError: down")
    second.refresh()
    state = second.state("k")
    assert (state.attempts, state.failures, state.done, state.last_error) == (1, 1, False, "ConnectionError: down")
    second.attempt("k", "s", 1, "b")
    second.done("k", "s", 1, "b")
    first.refresh()
    assert (first.state("k").attempts, first.state("k").done) == (2, True)
    assert first.state("other").attempts == 0


def test_a_ledger_line_torn_by_a_dead_writer_does_not_swallow_the_next_entry(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b'{"event":"attempt","key":"k1"')  # a writer died mid-line
    ledger = FileLedger(path)
    ledger.done("k2", "s", 1, "a")
    fresh = FileLedger(path)
    fresh.refresh()
    assert fresh.state("k2").done
    assert fresh.state("k1").attempts == 0  # never fsynced, so never counted


# -- claims -----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_claim_is_exclusive_and_dies_with_its_holder(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    mine = try_claim(claims, "s1")
    assert mine is not None
    assert try_claim(claims, "s1") is None  # a second open file description: refused
    assert try_claim(claims, "s2") is not None
    mine.release(remove=True)
    assert not (claims / "s1").exists()

    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from agent_saga.recovery import try_claim; "
         f"c = try_claim(Path({str(claims)!r}), 's1'); print(c is not None, flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "True"
        assert try_claim(claims, "s1") is None
        holder.kill()  # a daemon killed while holding the claim
        holder.wait(timeout=30)
        again = try_claim(claims, "s1")
        assert again is not None
        again.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()


# -- escalation queue -------------------------------------------------------------------


def test_an_escalation_is_queued_once_and_can_be_resolved(tmp_path: Path) -> None:
    queue = EscalationQueue(tmp_path / "q.jsonl")
    first, created = queue.add("s", 3, "irreversible", "sent an email")
    again, created_again = EscalationQueue(tmp_path / "q.jsonl").add("s", 3, "irreversible", "sent an email")
    assert created
    assert not created_again
    assert again.id == first.id
    other, _ = queue.add("s", 2, "irreversible", "another step")
    assert other.id != first.id
    assert [e.id for e in queue.pending()] == [first.id, other.id]
    queue.resolve(first.id, "called the customer")
    assert [e.id for e in queue.pending()] == [other.id]
    assert queue.all()[0].note == "called the customer"
    with pytest.raises(KeyError, match="no escalation 'nope'"):
        queue.resolve("nope")
    with pytest.raises(ValueError, match="unknown escalation kind"):
        queue.add("s", 1, "bored", "x")


# -- replay check -----------------------------------------------------------------------


def test_a_resumed_run_asking_for_another_tool_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.wal"
    _write_log(path, 1, 3)
    view = fold(read_records(path))["saga0"]
    check_replay(view, ["tool1", "tool2", "tool3", "tool4"])  # same path, plus new work
    check_step(view, 9, "anything")
    with pytest.raises(NonDeterminismError, match=r"step 2 was recorded as 'tool2'.*now asks for 'refund'"):
        check_replay(view, ["tool1", "refund"])


# -- leases -----------------------------------------------------------------------------


def test_the_keeper_writes_renews_and_removes_a_lease(tmp_path: Path) -> None:
    keeper = LeaseKeeper(ttl=0.15)
    wal = tmp_path / "x.wal"
    keeper.hold(wal, "s1")
    wait_for(lambda: read_lease(wal, "s1") is not None, "the lease file")
    lease = read_lease(wal, "s1")
    assert lease is not None
    assert lease.ttl == 0.15
    assert lease.owner.endswith(f":{os.getpid()}")
    written = keeper.renewals
    wait_for(lambda: keeper.renewals >= written + 3, "three renewals")
    renewed = read_lease(wal, "s1")
    assert renewed is not None
    assert renewed.renewed_at > lease.renewed_at
    keeper.release(wal, "s1")
    # gone at once, not at the next tick: a process that ends right after its
    # saga must not leave the lease of a finished saga behind
    assert not lease_path(wal, "s1").exists()


def test_a_lease_released_while_being_written_is_not_left_behind(tmp_path: Path) -> None:
    keeper = LeaseKeeper(ttl=30, background=False)
    wal = tmp_path / "x.wal"
    real_write = keeper._write
    entered = threading.Event()

    def slow_write(path: Path, saga: str) -> bool:  # the keeper is mid-write when the saga ends
        entered.set()
        time.sleep(0.2)
        return real_write(path, saga)

    keeper._write = slow_write  # type: ignore[method-assign]
    keeper.hold(wal, "s1")
    ticker = threading.Thread(target=keeper.tick)
    ticker.start()
    assert entered.wait(5)
    keeper.release(wal, "s1")  # waits for that write, then removes what it wrote
    ticker.join()
    assert keeper.renewals == 1
    assert not lease_path(wal, "s1").exists()


def test_bad_lease_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="positive"):
        LeaseKeeper(ttl=0)
    monkeypatch.setenv("AGENT_SAGA_LEASE_TTL", "soon")
    with pytest.raises(ValueError, match="AGENT_SAGA_LEASE_TTL='soon' is not a number"):
        LeaseKeeper()


def test_a_saga_on_a_file_log_holds_a_lease_until_its_end_is_durable(wal: FileWAL, short_leases: float) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="read", semantics=REVERSIBLE, forward=lambda: 1)
        assert (wal.path, s.saga_id) in lease_keeper().held()
        wait_for(lambda: read_lease(wal.path, s.saga_id) is not None, "the lease file")
    assert (wal.path, s.saga_id) not in lease_keeper().held()
    wait_for(lambda: read_lease(wal.path, s.saga_id) is None, "the lease file to be removed")
    started = next(r for r in wal.records() if r["type"] == "SAGA_STARTED")
    assert started["body"]["lease_ttl"] == short_leases


def test_a_memory_log_takes_no_lease(mem: MemoryWAL) -> None:
    with saga_scope(mem) as s:
        assert all(saga != s.saga_id for _, saga in lease_keeper().held())
    started = next(r for r in mem.records() if r["type"] == "SAGA_STARTED")
    assert "lease_ttl" not in started["body"]


@pytest.mark.slow
def test_a_forked_child_does_not_renew_its_parents_leases(tmp_path: Path) -> None:
    keeper = lease_keeper()
    keeper.hold(tmp_path / "x.wal", "parents-saga")
    try:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            os.write(write_end, repr(lease_keeper().held()).encode())
            os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            seen_by_child = pipe.read()
        os.waitpid(pid, 0)
    finally:
        keeper.release(tmp_path / "x.wal", "parents-saga")
    assert seen_by_child == "[]"
