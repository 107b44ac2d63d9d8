"""FileWAL: durability, ordering across reopen and processes, torn tails, limits."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_saga import ActionSemantics, Compensation, FileWAL, SagaAborted, WALFull, WALStalled, saga_scope
from agent_saga.errors import WALClosed, WALCorrupt, WALError
from agent_saga.log import read_records, set_default_wal
from agent_saga.log.codec import chain_hash, content_digest
from agent_saga.log.default import default_wal
from agent_saga.log.group import Entry


def lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_records_are_chained_and_readable_with_plain_json(wal: FileWAL) -> None:
    for i in range(5):
        wal.append("T", "s1", {"i": i}, step=i)
    wal.barrier()
    recs = lines(wal.path)
    assert [r["seq"] for r in recs] == [1, 2, 3, 4, 5]
    prev = "0" * 64
    for r in recs:
        assert r["prev"] == prev
        assert r["digest"] == content_digest(r["salt"], json.dumps(r["body"], sort_keys=True, separators=(",", ":")))
        assert r["hash"] == chain_hash(r)
        prev = r["hash"]


async def test_the_intent_is_on_disk_before_the_effect_runs(wal: FileWAL) -> None:
    seen_on_disk: list[str] = []

    def effect() -> dict[str, str]:
        # Read the file the way another process would: only what reached it counts.
        seen_on_disk.extend(r["type"] for r in read_records(wal.path))
        return {"id": "ch_1"}

    async with saga_scope(wal) as s:
        await s.execute(tool="pay", semantics=ActionSemantics.COMPENSABLE, forward=effect,
                        compensate=lambda r: Compensation(fn=print))
    assert seen_on_disk[-1] == "STEP_INTENT"
    assert "SAGA_STARTED" in seen_on_disk


def test_sync_face_also_writes_ahead(wal: FileWAL) -> None:
    seen: list[str] = []
    with saga_scope(wal) as s:
        s.execute(tool="pay", semantics="IRREVERSIBLE",
                  forward=lambda: seen.extend(r["type"] for r in read_records(wal.path)))
    assert seen[-1] == "STEP_INTENT"


def test_reversible_steps_never_wait_for_the_disk(tmp_path: Path) -> None:
    wal = FileWAL(tmp_path / "r.wal", linger=5.0)  # a record nobody waits for would sit 5 s
    try:
        with saga_scope(wal) as s:
            s.execute(tool="read", semantics="REVERSIBLE", forward=lambda: None)
            assert wal.flushes == 0  # neither start nor the reversible step forced a flush
    finally:
        wal.close()


def test_sequence_never_restarts_across_reopen(wal_path: Path) -> None:
    for round_ in range(3):
        log = FileWAL(wal_path)
        for _ in range(4):
            log.append("T", f"r{round_}", {})
        log.close()
    recs = lines(wal_path)
    assert [r["seq"] for r in recs] == list(range(1, 13))
    assert all(b["prev"] == a["hash"] for a, b in itertools.pairwise(recs))


@pytest.mark.slow
def test_two_processes_append_to_one_chain(wal_path: Path) -> None:
    script = (
        "import sys; from agent_saga import FileWAL\n"
        "w = FileWAL(sys.argv[1])\n"
        "for i in range(200): w.append('T', sys.argv[2], {'i': i})\n"
        "w.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(wal_path), f"p{n}"]) for n in range(3)]
    local = FileWAL(wal_path)
    for i in range(200):
        local.append("T", "local", {"i": i})
    local.close()
    assert all(p.wait(60) == 0 for p in procs)
    recs = lines(wal_path)
    assert [r["seq"] for r in recs] == list(range(1, 801))
    assert all(b["prev"] == a["hash"] for a, b in itertools.pairwise(recs))
    assert {r["saga"] for r in recs} == {"p0", "p1", "p2", "local"}


def test_a_busy_writer_lets_another_writer_of_the_file_take_turns(wal_path: Path) -> None:
    """A flusher keeps the file lock across a burst of flushes, but never so long that another
    writer of the same file (here a second FileWAL, as a second process would be) stalls."""
    busy = FileWAL(wal_path, max_pending=500, backpressure="block")
    other = FileWAL(wal_path, barrier_timeout=5.0)
    done = threading.Event()

    def keep_busy(n: int) -> None:  # never lets the busy log's flusher run out of records
        i = 0
        while not done.is_set():
            busy.append("T", f"busy{n}", {"i": i})
            i += 1

    threads = [threading.Thread(target=keep_busy, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        for i in range(50):
            other.barrier(other.append("T", "other", {"i": i}))  # WALStalled if starved
    finally:
        done.set()
        for t in threads:
            t.join()
        busy.close()
        other.close()
    recs = lines(wal_path)
    assert [r["seq"] for r in recs] == list(range(1, len(recs) + 1))
    assert all(b["prev"] == a["hash"] for a, b in itertools.pairwise(recs))
    assert [r["body"]["i"] for r in recs if r["saga"] == "other"] == list(range(50))


def test_group_commit_shares_flushes_across_threads(wal: FileWAL) -> None:
    def writer(n: int) -> None:
        for i in range(50):
            wal.barrier(wal.append("T", f"s{n}", {"i": i}))

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(lines(wal.path)) == 800
    assert wal.flushes < 800  # several waiting records shared each fsync


async def test_async_barriers_from_many_sagas(wal: FileWAL) -> None:
    async def one(n: int) -> None:
        for i in range(20):
            await wal.barrier_async(wal.append("T", f"s{n}", {"i": i}))

    await asyncio.gather(*(one(n) for n in range(32)))
    assert len(lines(wal.path)) == 640
    assert wal.flushes < 640


def test_torn_final_line_is_set_aside_and_appends_stay_safe(wal_path: Path) -> None:
    log = FileWAL(wal_path)
    for i in range(3):
        log.append("T", "s", {"i": i})
    log.close()
    with open(wal_path, "ab") as fh:
        fh.write(b'{"seq":4,"type":"T","bo')  # a write cut off by a crash
    assert [r["seq"] for r in read_records(wal_path)] == [1, 2, 3]  # earlier records intact

    log = FileWAL(wal_path)
    assert log.torn_tail is not None and log.torn_tail.saved_to.read_bytes().startswith(b'{"seq":4')
    log.append("T", "s", {"i": 3})
    log.close()
    recs = lines(wal_path)
    assert [r["seq"] for r in recs] == [1, 2, 3, 4]
    assert recs[3]["prev"] == recs[2]["hash"]


def test_corruption_in_the_middle_is_refused_not_skipped(wal_path: Path) -> None:
    log = FileWAL(wal_path)
    for i in range(3):
        log.append("T", "s", {"i": i})
    log.close()
    data = wal_path.read_bytes().split(b"\n")
    data[1] = b"garbage"
    wal_path.write_bytes(b"\n".join(data))
    with pytest.raises(WALCorrupt, match="line 2"):
        list(read_records(wal_path))


def test_an_unreadable_last_line_is_refused_at_open(wal_path: Path) -> None:
    wal_path.write_bytes(b'{"seq":1,"type":"T"}\nnot json\n')
    with pytest.raises(WALCorrupt, match="agent-saga verify"):
        FileWAL(wal_path)


def test_backpressure_refuses_instead_of_dropping(tmp_path: Path) -> None:
    # Nobody waits and the flusher lingers 10 s, so queued records stay queued.
    log = FileWAL(tmp_path / "bp.wal", max_pending=3, linger=10.0)
    try:
        for i in range(3):
            log.append("T", "s", {"i": i})
        with pytest.raises(WALFull, match="refusing rather than dropping"):
            log.append("T", "s", {"i": 3})
    finally:
        log.close()
    assert [r["body"] for r in lines(tmp_path / "bp.wal")] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_barrier_times_out_with_walstalled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = os.fdatasync

    def wedged(fd: int) -> None:  # a device that stops answering
        release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", wedged)
    log = FileWAL(tmp_path / "w.wal")
    try:
        with pytest.raises(WALStalled, match=r"not durable after 0\.1s"):
            log.barrier(log.append("T", "s", {}), timeout=0.1)
    finally:
        release.set()
        log.close()


async def test_async_barrier_times_out_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (release.wait(10), real(fd)))
    log = FileWAL(tmp_path / "w.wal")
    try:
        with pytest.raises(WALStalled):
            await log.barrier_async(log.append("T", "s", {}), timeout=0.1)
    finally:
        release.set()
        log.close()


def test_a_failing_disk_breaks_the_log_loudly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    log = FileWAL(tmp_path / "b.wal")
    with pytest.raises(Exception, match="Input/output error"):
        log.barrier(log.append("T", "s", {}))
    with pytest.raises(Exception, match="Input/output error"):
        log.append("T", "s", {})
    assert log.broken is not None
    monkeypatch.undo()
    log.close()


async def test_a_failing_disk_fails_async_waiters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fdatasync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left")))
    log = FileWAL(tmp_path / "b.wal")
    with pytest.raises(Exception, match="No space left"):
        await log.barrier_async(log.append("T", "s", {}))
    monkeypatch.undo()
    log.close()


class DiesAfterAFlush(FileWAL):
    """A log whose flusher raises outside its commit, once, after acknowledging its first flush.

    It stops there until ``go`` is set, so the test can queue a record the dead flusher would
    never commit.
    """

    def __init__(self, path: Path) -> None:
        self.acknowledged = threading.Event()
        self.go = threading.Event()
        super().__init__(path, linger=0.0, barrier_timeout=5.0)

    def _acknowledge(self) -> None:
        super()._acknowledge()
        if not self.acknowledged.is_set():
            self.acknowledged.set()
            self.go.wait(30)
            raise RuntimeError("the flusher's own bug")


@pytest.fixture
def dying(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[DiesAfterAFlush, list[BaseException]]]:
    # The flusher's error still reaches threading.excepthook (its traceback is printed): kept here.
    escaped: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    log = DiesAfterAFlush(tmp_path / "d.wal")
    log.barrier(log.append("T", "s", {}))
    assert log.acknowledged.wait(30)
    try:
        yield log, escaped
    finally:
        log.go.set()
        log.close()


def test_a_flusher_that_raises_breaks_the_log_rather_than_stalling_barriers(
    dying: tuple[DiesAfterAFlush, list[BaseException]],
) -> None:
    log, escaped = dying
    ticket = log.append("T", "s", {})  # queued while the flusher is about to die
    log.go.set()
    with pytest.raises(WALError, match="its flusher failed: RuntimeError") as raised:
        log.barrier(ticket)
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "the flusher's own bug"
    assert log.broken is raised.value
    with pytest.raises(WALError, match="its flusher failed"):
        log.append("T", "s", {})
    log.close()  # joins the flusher: its error has been handed on by then
    assert [str(e) for e in escaped] == ["the flusher's own bug"]


async def test_a_flusher_that_raises_fails_async_barriers_too(
    dying: tuple[DiesAfterAFlush, list[BaseException]],
) -> None:
    log, _ = dying
    ticket = log.append("T", "s", {})
    log.go.set()
    with pytest.raises(WALError, match="its flusher failed: RuntimeError") as raised:
        await log.barrier_async(ticket)
    assert isinstance(raised.value.__cause__, RuntimeError)


class LateBarrier(FileWAL):
    """A log whose next barrier reads the durable mark just before its record is flushed, and
    takes the lock only once the flusher has committed that record and gone idle.

    The interleaving a loaded machine produces now and then: the barrier's first, unlocked
    look at the mark is stale by the time it asks the flusher for its record.
    """

    def __init__(self, path: Path) -> None:
        self.reader: threading.Thread | None = None  # the thread whose next read of the mark is stale
        self.read = threading.Event()
        self.idle_after_a_flush = threading.Event()
        self.woken = threading.Event()  # the flusher, woken with nothing queued, idles again or stops
        super().__init__(path, linger=0.0, barrier_timeout=5.0)

    @property  # type: ignore[override]
    def _durable(self) -> int:
        if self.reader is threading.current_thread():
            self.reader = None
            stale: int = self.__dict__["_durable"]
            self.read.set()
            assert self.idle_after_a_flush.wait(30)
            return stale
        return int(self.__dict__["_durable"])

    @_durable.setter
    def _durable(self, value: int) -> None:
        self.__dict__["_durable"] = value

    def _commit(self, batch: list[Entry]) -> None:
        assert self.read.wait(30)  # the first flush waits for the barrier's look at the mark
        super()._commit(batch)

    def _idle(self) -> None:
        super()._idle()
        if self.commits:
            if self.idle_after_a_flush.is_set():
                self.woken.set()  # it went back to waiting for records
            self.idle_after_a_flush.set()  # the lock is released as the flusher parks, right after this

    def _disconnect(self) -> None:
        self.woken.set()  # it stopped
        super()._disconnect()


def test_a_barrier_that_wakes_an_idle_flusher_with_nothing_queued_does_not_end_it(tmp_path: Path) -> None:
    log = LateBarrier(tmp_path / "l.wal")
    try:
        log.reader = threading.current_thread()
        log.barrier(log.append("T", "s", {"i": 0}))  # durable by the time it asks: it wakes the idle flusher
        assert log.woken.wait(30)
        # The flusher still commits what comes next (it used to end there: every later barrier stalled).
        log.barrier(log.append("T", "s", {"i": 1}))
    finally:
        log.close()
    assert [r["body"] for r in lines(tmp_path / "l.wal")] == [{"i": 0}, {"i": 1}]


def test_closed_log_refuses_appends(wal: FileWAL) -> None:
    wal.close()
    with pytest.raises(WALClosed):
        wal.append("T", "s", {})
    wal.close()  # idempotent


def test_unchained_log_has_no_chain_fields(tmp_path: Path) -> None:
    log = FileWAL(tmp_path / "u.wal", chain=False)
    log.append("T", "s", {"a": 1}, step=2)
    log.close()
    (rec,) = lines(tmp_path / "u.wal")
    assert rec == {"saga": "s", "seq": 1, "step": 2, "ts": rec["ts"], "type": "T", "body": {"a": 1}}


def test_bad_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="backpressure"):
        FileWAL(tmp_path / "x.wal", backpressure="drop")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_pending"):
        FileWAL(tmp_path / "x.wal", max_pending=0)


def test_default_log_is_a_file_in_the_working_directory(tmp_path: Path) -> None:
    with saga_scope() as s:
        s.execute(tool="t", semantics="IRREVERSIBLE", forward=lambda: None)
    log = default_wal()
    assert isinstance(log, FileWAL) and log.path == tmp_path / "agent-saga.wal"
    assert any(r["type"] == "STEP_INTENT" for r in read_records(tmp_path / "agent-saga.wal"))


def test_default_log_honours_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_SAGA_WAL", str(tmp_path / "env.wal"))
    assert default_wal().location == str(tmp_path / "env.wal")


def test_set_default_wal_by_path_and_reset(tmp_path: Path) -> None:
    try:
        chosen = set_default_wal(tmp_path / "chosen.wal")
        assert default_wal() is chosen
    finally:
        set_default_wal(None)
    assert default_wal().location == str(tmp_path / "agent-saga.wal")


@pytest.mark.slow
def test_a_log_is_closed_cleanly_at_interpreter_exit(wal_path: Path) -> None:
    script = (
        "import sys; from agent_saga import FileWAL\n"
        "w = FileWAL(sys.argv[1], linger=30)\n"  # nobody waits: only exit can flush these
        "for i in range(100): w.append('T', 's', {'i': i})\n"
    )
    subprocess.run([sys.executable, "-c", script, str(wal_path)], check=True, timeout=60)
    assert len(lines(wal_path)) == 100


@pytest.mark.slow
def test_saga_end_covers_the_last_commit(wal_path: Path) -> None:
    script = (
        "import os, sys; from agent_saga import FileWAL, saga_scope, Compensation\n"
        "w = FileWAL(sys.argv[1], linger=30)\n"
        "with saga_scope(w) as s:\n"
        "    s.execute(tool='pay', semantics='COMPENSABLE', forward=lambda: 1,\n"
        "              compensate=lambda r: Compensation(fn=print))\n"
        "os._exit(0)\n"  # no atexit: only what the saga's end made durable survives
    )
    subprocess.run([sys.executable, "-c", script, str(wal_path)], check=True, timeout=60)
    assert [r["type"] for r in lines(wal_path)] == [
        "SAGA_STARTED", "STEP_INTENT", "STEP_COMMITTED", "SAGA_COMPLETED"]


def test_rollback_records_reach_the_disk(wal: FileWAL) -> None:
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="pay", semantics="COMPENSABLE", forward=lambda: 1,
                  compensate=lambda r: Compensation(fn=lambda: None))
        raise RuntimeError
    types = [r["type"] for r in read_records(wal.path)]
    assert types[-4:] == ["ROLLBACK_STARTED", "COMPENSATION_STARTED", "STEP_COMPENSATED", "SAGA_ROLLED_BACK"]


# -- issue 40 item 12: a log deleted or renamed under a live writer ----------------------------------


def _charge_saga(wal: FileWAL, charges: list[str], name: str) -> None:
    with saga_scope(wal) as s:
        s.execute(tool="charge", semantics=ActionSemantics.COMPENSABLE, forward=lambda: charges.append(name),
                  compensate=lambda r: Compensation(fn=lambda: None))


@pytest.mark.parametrize(("how", "says"), [
    ("delete", "was deleted while this writer appended to it (no file is at that path now)"),
    ("rename", "was moved to another name while this writer appended to it (no file is at that path now)"),
    ("replace", "was moved to another name while this writer appended to it (another file is at that path now)"),
])
def test_a_log_deleted_or_renamed_under_a_live_writer_breaks_it_loudly(tmp_path: Path, how: str, says: str) -> None:
    path = tmp_path / "agent.wal"
    wal = FileWAL(path)
    charges: list[str] = []
    _charge_saga(wal, charges, "before")
    # The agent removes its log while its writer is open.
    if how == "delete":
        path.unlink()
    else:
        path.rename(tmp_path / "moved.wal")
        if how == "replace":
            path.write_bytes(b"")
    with pytest.raises(SagaAborted):  # never told "completed"
        _charge_saga(wal, charges, "after")
    assert charges == ["before"]  # its intent was not durable at the path, so the charge never ran
    assert isinstance(wal.broken, WALError) and says in str(wal.broken), wal.broken
    assert "\n" not in str(wal.broken)
    with pytest.raises(WALError, match=r"was (deleted|moved)"):
        wal.append("T", "s", {})
    wal.close()

