"""FileWAL: the embedded, fsync-durable default log.

One JSON record per line (see ``codec`` for the chain rule). A dedicated flusher
thread owns the file: callers only queue records, and one ``write`` + ``fdatasync``
covers every record queued meanwhile, from every saga and thread (group commit).

When nobody is waiting on a barrier, the flusher lingers a moment before writing,
so that a step's commit record and the next step's intent share one flush; a
record nobody waits for is still durable within ``linger`` seconds.

Several processes may append to one file: a flush holds an exclusive ``flock``
and continues the sequence and chain from whatever the file ends with. A busy
flusher keeps the lock across the flushes of a short burst (at most
``_HOLD_MAX``, and never while idle): while it holds the lock nobody else can
have written, so the burst pays no lock, ``fstat`` or catch-up per flush.
"""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import itertools
import logging
import os
import stat
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from agent_saga.errors import WALClosed, WALCorrupt, WALError, WALFull, WALStalled
from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher, chain_lines, decode_line, encode_entry, prepare_lines, seal
from agent_saga.log.fs import FILE_MODE, fsync_dir, open_regular, private_dir, write_new
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import GENESIS, Record
from agent_saga.log.waiters import AsyncWaiters, settle

__all__ = ["FileWAL", "TornTail", "read_records"]

log = logging.getLogger("agent_saga.wal")

_Entry = tuple[int, str, str, "int | None", str]  # ts, type, saga, step, the body's canonical JSON
_TAIL_WINDOW = 1 << 16
# How long a busy flusher may keep the file lock across flushes before letting
# another writer (a process, the recovery daemon, a compaction) have its turn.
_HOLD_MAX = 0.01
# Where the flusher is: running, waiting a bounded moment for more records, or idle.
_RUNNING, _LINGERING, _IDLE = 0, 1, 2
_open_logs: weakref.WeakSet[FileWAL] = weakref.WeakSet()


class TornTail:
    """What was found and set aside when a log ended in a partial line."""

    def __init__(self, offset: int, fragment: bytes, saved_to: Path) -> None:
        self.offset = offset
        self.fragment = fragment
        self.saved_to = saved_to

    def __repr__(self) -> str:
        return f"TornTail(offset={self.offset}, bytes={len(self.fragment)}, saved_to={str(self.saved_to)!r})"


def _tail(fd: int, size: int, path: Path) -> tuple[Record | None, int, bool]:
    """The file's last record, where its good bytes end, and whether that record lacks its newline.

    Applies the final-line rule of ``agent_saga.log.lines``: a final line that
    parses is a complete record (only its newline is missing); a torn fragment
    ends the good bytes before it; anything else is damage (WALCorrupt).
    """
    start = max(0, size - _TAIL_WINDOW)
    while True:
        data = os.pread(fd, size - start, start)
        newline = data.rfind(b"\n")
        if newline < 0 and start > 0:
            start = max(0, start - _TAIL_WINDOW)  # one very long line: widen the window
            continue
        complete = newline + 1
        final = data[complete:]
        if final.strip() and not is_torn(final):
            return _decode_tail(final, start + complete, path), size, True
        kept = data[:complete].rstrip()
        begin = kept.rfind(b"\n")
        if begin < 0 and start > 0:
            start = max(0, start - _TAIL_WINDOW)
            continue
        if not kept:
            return None, start + complete, False
        return _decode_tail(kept[begin + 1 :], start + begin + 1, path), start + complete, False


def _decode_tail(line: bytes, offset: int, path: Path) -> Record:
    try:
        return decode_line(line)
    except ValueError as err:
        raise WALCorrupt(
            f"{path}: the last line (at byte {offset}) is not a record: {err}. Run "
            f"'agent-saga verify --wal-path {path}' to locate the damage"
        ) from err


def _set_aside_torn_tail(fd: int, path: Path, good_end: int, size: int) -> TornTail:
    """Move a torn final fragment to a sidecar file and cut it off the log.

    The fragment was never acknowledged as durable (a barrier only returns after a
    whole batch is written and synced), yet it is evidence, so it is kept. If it
    cannot be kept (a full disk), nothing changes and WALError says why: no empty
    sidecar is left behind and the log is not cut.
    """
    fragment = os.pread(fd, size - good_end, good_end)
    for attempt in itertools.count():
        saved = path.with_name(f"{path.name}.torn-{good_end}" + (f".{attempt}" if attempt else ""))
        try:
            write_new(saved, [fragment])
            break
        except FileExistsError:
            continue  # an earlier torn tail at the same offset: keep both
        except OSError as err:
            raise WALError(
                f"{path} ends in a torn record ({len(fragment)} bytes at offset {good_end}) that could "
                f"not be set aside in {saved.parent}: {err.strerror or err}. Free space (or fix the "
                "permissions) and open the log again; nothing was changed"
            ) from err
    os.ftruncate(fd, good_end)
    os.fsync(fd)
    fsync_dir(path.parent)
    log.warning(
        "%s ended in a torn record (%d bytes at offset %d); earlier records are intact, the "
        "fragment was saved to %s",
        path, len(fragment), good_end, saved,
    )
    return TornTail(good_end, fragment, saved)


def read_records(
    path: str | os.PathLike[str], *, encryptor: BodyCipher | None = None
) -> Iterator[Record]:
    """Every record of a log file, oldest first, read one line at a time.

    A torn final fragment is skipped: it never hides the records before it (see
    ``agent_saga.log.lines`` for the final-line rule). A malformed line anywhere
    else raises WALCorrupt naming the line, because a log that silently skips
    records is not evidence. Encrypted records are decrypted with ``encryptor``
    (default: the key in ``$AGENT_SAGA_WAL_KEY``); without a key they raise, never
    read as empty. Raises OSError (NotARegularFile for a directory or FIFO) if the
    file cannot be read.
    """
    p = Path(path)
    with open_regular(p) as fh:
        for line in iter_lines(fh):
            if not line.raw.strip():
                continue
            if not line.terminated and is_torn(line.raw):
                log.warning("%s: ignoring a torn final line (%d bytes)", p, len(line.raw))
                return
            try:
                record = decode_line(line.raw)
            except ValueError as err:
                raise WALCorrupt(f"{p}: line {line.number} is not a record: {err}") from err
            if "enc" in record:
                from agent_saga.log.crypto import open_record

                record = open_record(record, encryptor, p)
            yield record


class FileWAL(WAL):
    """The default durable log. Construct it and pass it on; no start/stop needed.

    ``linger`` bounds how long a record nobody waits for stays only in memory;
    ``barrier_timeout`` bounds every barrier (then ``WALStalled``);
    ``max_pending`` with ``backpressure="refuse"`` (default) makes ``append``
    raise ``WALFull`` instead of growing without bound; ``"block"`` waits.
    ``encryptor`` (see ``agent_saga.log.crypto``; default: a key in
    ``$AGENT_SAGA_WAL_KEY``, else none) stores every body encrypted.
    """

    durable = True

    def __init__(
        self,
        path: str | os.PathLike[str] = "agent-saga.wal",
        *,
        chain: bool = True,
        linger: float = 0.002,
        barrier_timeout: float = 30.0,
        max_pending: int = 100_000,
        backpressure: Literal["refuse", "block"] = "refuse",
        encryptor: BodyCipher | None = None,
    ) -> None:
        if backpressure not in ("refuse", "block"):
            raise ValueError(f"backpressure must be 'refuse' or 'block', got {backpressure!r}")
        if max_pending < 1:
            raise ValueError("max_pending must be at least 1")
        self.path = Path(path).absolute()
        self.location = str(self.path)
        self.chain = chain
        self.linger = linger
        self.barrier_timeout = barrier_timeout
        self.max_pending = max_pending
        self.backpressure = backpressure
        self.torn_tail: TornTail | None = None
        if encryptor is None and os.environ.get("AGENT_SAGA_WAL_KEY"):
            from agent_saga.log.crypto import AESGCMEncryptor

            encryptor = AESGCMEncryptor.from_env()
        self.encryptor = encryptor

        self._seq = 0
        self._prev = GENESIS
        self._size = 0
        self._terminate = False  # the file ends in a complete record without its newline
        self._open()

        self._lock = threading.Lock()
        # Threads blocked in barrier() (or in append() under 'block' backpressure) wait
        # on _done; the flusher signals it only when _blocked says someone does.
        self._done = threading.Condition(self._lock)
        self._blocked = 0
        # The flusher parks on _kick, a lock used as a one-shot signal: cheaper than a
        # Condition, which allocates a lock per wait. Released only with _lock held,
        # only while the flusher is parked, and at most once per park (_kicked).
        self._kick = threading.Lock()
        self._kick.acquire()
        self._parked = _RUNNING
        self._kicked = False
        self._pending: list[_Entry] = []
        self._last_ticket = 0
        self._batch_end = 0  # the ticket of the batch being written
        self._durable = 0
        self._wanted = 0
        self._waiters = AsyncWaiters(self._lock, self._stalled, self.path.name)
        self._held_since: float | None = None  # when the flusher took the file lock it still holds

        self._broken: WALError | None = None
        self._closing = False
        self._closed = False
        self.flushes = 0  # number of write+fsync rounds, for benchmarks
        self._flusher = threading.Thread(
            target=self._run, name=f"agent-saga-wal:{self.path.name}", daemon=True
        )
        self._flusher.start()
        _open_logs.add(self)

    def _open(self) -> None:
        """Open (creating it 0600 if need be) and catch up with the file; WALError if unusable."""
        try:
            private_dir(self.path.parent)
            created = not self.path.exists()
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
        except OSError as err:
            raise WALError(f"cannot open the log {self.path}: {err.strerror or err}") from err
        try:
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise WALError(f"cannot open the log {self.path}: it is not a regular file")
            if created:
                fsync_dir(self.path.parent)
            status = self._lock_file()
            try:
                self._catch_up(status)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        except BaseException as err:
            os.close(self._fd)
            if isinstance(err, OSError):
                raise WALError(f"cannot open the log {self.path}: {err.strerror or err}") from err
            raise

    # -- state shared with other writers of the same file ---------------------------

    def _lock_file(self) -> os.stat_result:
        """Take the exclusive lock on the file that is *now* at ``self.path``.

        Compaction and redaction (``log.maintenance``) replace the file under this
        same lock; a writer that kept its old descriptor would append to a file
        nobody reads any more. The replaced file has no name left (link count 0),
        which the fstat that catching up needs anyway shows at no extra cost: then
        reopen the path and lock again.
        """
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            status = os.fstat(self._fd)
            if status.st_nlink > 0:
                return status
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                return status  # deleted by hand, not replaced: write where we are, as before
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = fd
            self._size = -1  # make _catch_up read the new file's last record

    def _catch_up(self, status: os.stat_result) -> None:
        """Continue the sequence and chain from what the file ends with (lock held)."""
        size = status.st_size
        if size == self._size:
            return
        last, good_end, self._terminate = _tail(self._fd, size, self.path)
        if good_end < size:
            self.torn_tail = _set_aside_torn_tail(self._fd, self.path, good_end, size)
            size = good_end
        if last is not None:
            self._seq = int(last["seq"])
            self._prev = str(last.get("hash", GENESIS))
        self._size = size

    # -- the caller's side --------------------------------------------------------

    def append(
        self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None
    ) -> int:
        ts = time.time_ns() // 1000
        # Encoded here, on the caller's thread: a record the log cannot hold is refused
        # to this caller (WALRefused) and never reaches the flush it would break for all.
        body_json = encode_entry(type, saga, step, body)
        with self._lock:
            if self._broken is not None or self._closing or len(self._pending) >= self.max_pending:
                self._admit()
            self._last_ticket = ticket = self._last_ticket + 1
            self._pending.append((ts, type, saga, step, body_json))
            if self._parked == _IDLE and not self._kicked:
                self._kicked = True
                self._kick.release()
            return ticket

    def _admit(self) -> None:
        """Raise why a record cannot be queued now, or wait for room ('block'); lock held."""
        if self._broken is not None:
            raise self._broken
        if self._closing:
            raise WALClosed(f"{self!r} is closed; records can no longer be appended")
        if self.backpressure == "refuse":
            raise WALFull(
                f"{self!r} has {len(self._pending)} records waiting for the disk "
                f"(max_pending={self.max_pending}); refusing rather than dropping. "
                "Raise max_pending or use backpressure='block'"
            )
        self._blocked += 1
        try:
            while len(self._pending) >= self.max_pending and self._broken is None:
                self._done.wait(self.barrier_timeout)
        finally:
            self._blocked -= 1
        if self._broken is not None:
            raise self._broken

    def _want(self, target: int) -> None:
        """Someone waits for ``target``: wake the flusher from any wait (lock held)."""
        self._wanted = target
        if self._parked and not self._kicked:
            self._kicked = True
            self._kick.release()

    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        target = self._last_ticket if ticket is None else ticket
        if target <= self._durable and self._broken is None:
            return
        limit = self.barrier_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._lock:
            if target > self._wanted:
                self._want(target)
            self._blocked += 1
            try:
                while self._durable < target:
                    if self._broken is not None:
                        raise self._broken
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise self._stalled(target, limit)
                    self._done.wait(remaining)
            finally:
                self._blocked -= 1

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        target = self._last_ticket if ticket is None else ticket
        if target <= self._durable and self._broken is None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        limit = self.barrier_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if self._durable >= target:
                return
            self._waiters.add(target, future, deadline, limit)
            if target > self._wanted:
                self._want(target)
        await future

    def _stalled(self, ticket: int, limit: float) -> WALStalled:
        return WALStalled(
            f"record {ticket} of {self.path} was not durable after {limit:g}s "
            f"(durable up to {self._durable}); the device may be wedged or very slow"
        )

    # -- the flusher ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                try:
                    self._write(batch)
                except BaseException as err:  # noqa: BLE001 - any failure breaks durability
                    self._fail(err)
                    return
                self._acknowledge()
        finally:
            self._unlock_file()

    def _next_batch(self) -> list[_Entry] | None:
        """Wait for records worth writing and take them all; None once closed and drained."""
        with self._lock:
            lingered = False
            if not self._pending and not self._closing:
                if self.linger > 0:
                    # Right after a flush: a record queued now waits at most linger.
                    self._park(_LINGERING, self.linger)
                    lingered = True
                if not self._pending and not self._closing:
                    self._unlock_file()  # idle: other writers need not wait for us
                    self._park(_IDLE, -1)
                    lingered = False
            if not self._pending:
                return None
            if not lingered and self._wanted <= self._durable and not self._closing and self.linger > 0:
                # Nobody is waiting: give the next step's intent a moment to join.
                self._park(_LINGERING, self.linger)
            batch, self._pending = self._pending, []
            # Tickets are consecutive and a batch is everything pending: it ends
            # with the last ticket given.
            self._batch_end = self._last_ticket
            if self._blocked:
                self._done.notify_all()  # room for 'block' backpressure
            return batch

    def _park(self, state: int, timeout: float) -> None:
        """Release the lock and wait for a kick (at most ``timeout`` s; -1: forever); lock held."""
        self._parked = state
        self._lock.release()
        try:
            kicked = self._kick.acquire(True, timeout)
        finally:
            self._lock.acquire()
            self._parked = _RUNNING
        if self._kicked:
            if not kicked:  # kicked after the timeout, before we took the lock back
                self._kick.acquire()
            self._kicked = False

    def _write(self, batch: list[_Entry]) -> None:
        prepared = prepare_lines(batch) if self.chain and self.encryptor is None else None
        if self._held_since is None:
            status = self._lock_file()
            self._held_since = time.monotonic()
            self._catch_up(status)
        first = self._seq + 1
        if prepared is not None:
            data, self._prev = chain_lines(prepared, first, self._prev)
        else:
            data, self._prev, _ = seal(
                [(first + i, *entry) for i, entry in enumerate(batch)], self._prev, self.chain, self.encryptor
            )
        if self._terminate:
            data = b"\n" + data  # the last record is complete; only its newline was lost
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        os.fdatasync(self._fd)
        self._terminate = False
        self._seq += len(batch)
        self._size += len(data)
        self.flushes += 1
        if time.monotonic() - self._held_since > _HOLD_MAX:
            self._unlock_file()  # a long burst: let another writer have a turn

    def _unlock_file(self) -> None:
        if self._held_since is not None:
            self._held_since = None
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _acknowledge(self) -> None:
        with self._lock:
            self._durable = self._batch_end
            if self._blocked:
                self._done.notify_all()
            ready = self._waiters.ready(self._durable)
        if ready:
            settle(ready)

    def _fail(self, err: BaseException) -> None:
        broken = err if isinstance(err, WALError) else WALError(f"writing {self.path} failed: {err!r}")
        if broken is not err:
            broken.__cause__ = err
        log.error("%s is broken and refuses further records: %s", self.path, err)
        with self._lock:
            self._broken = broken
            self._done.notify_all()
            waiting = self._waiters.take_all(broken)
        settle(waiting)

    # -- reading and closing -------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Every durable record of the file (call ``barrier()`` first to include queued ones)."""
        return read_records(self.path, encryptor=self.encryptor)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closing

    @property
    def broken(self) -> WALError | None:
        """The error that stopped this log, if any."""
        return self._broken

    def close(self, timeout: float | None = None) -> None:
        """Flush what is queued, stop the flusher, close the file. Bounded and idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closing = True
            if self._parked and not self._kicked:
                self._kicked = True
                self._kick.release()
        self._flusher.join(self.barrier_timeout if timeout is None else timeout)
        with self._lock:
            self._closed = True
            lost = len(self._pending)
            self._waiters.close()
        if self._flusher.is_alive() or lost:
            log.error("%s closed with %d records not written (flusher stalled)", self.path, lost)
        os.close(self._fd)
        _open_logs.discard(self)

    def __enter__(self) -> FileWAL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for wal in list(_open_logs):
        try:
            wal.close(timeout=5.0)
        except Exception:  # best effort at interpreter exit
            log.exception("closing %s at exit failed", wal.path)
