"""FileWAL: the embedded, fsync-durable default log.

One JSON record per line (see ``codec`` for the chain rule). FileWAL is a backend
of the group-commit base (``log.group``), which owns the queue, the flusher, the
barriers and close: one ``write`` + ``fdatasync`` covers every record queued
meanwhile, from every saga and thread. What is here is the file's own commit.

Several processes may append to one file: a flush holds an exclusive ``flock``
and continues the sequence and chain from whatever the file ends with. A busy
flusher keeps the lock across the flushes of a short burst (at most
``_HOLD_MAX``, and never while idle): while it holds the lock nobody else can
have written, so the burst pays no lock, ``fstat`` or catch-up per flush.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Unpack

from agent_saga.errors import WALCorrupt, WALError
from agent_saga.log.codec import BodyCipher, chain_lines, decode_line, prepare_lines, seal
from agent_saga.log.fs import FILE_MODE, fsync_dir, open_regular, private_dir, write_new
from agent_saga.log.group import Entry, GroupCommitWAL, LogKeywords, LogOptions
from agent_saga.log.lines import is_torn, iter_lines
from agent_saga.log.records import GENESIS, Record

__all__ = ["FileWAL", "TornTail", "read_records"]

log = logging.getLogger("agent_saga.wal")

_TAIL_WINDOW = 1 << 16
# How long a busy flusher may keep the file lock across flushes before letting
# another writer (a process, the recovery daemon, a compaction) have its turn.
_HOLD_MAX = 0.01


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


class FileWAL(GroupCommitWAL):
    """The default durable log. Construct it and pass it on; no start/stop needed.

    ``options`` (or the same names as keywords: ``chain``, ``linger``, ``barrier_timeout``,
    ``max_pending``, ``backpressure``, ``encryptor``) are :class:`~agent_saga.log.group.LogOptions`.

    The queue, flusher, barriers and close are the group-commit base's
    (``log.group``); this class is the file's commit: prepare and chain the lines,
    take the lock, write, ``fdatasync``, and reopen the path after a rewrite.
    """

    max_batch = sys.maxsize  # one write takes everything queued
    _store = "the disk"
    _stall_hint = "the device may be wedged or very slow"

    def __init__(
        self,
        path: str | os.PathLike[str] = "agent-saga.wal",
        *,
        options: LogOptions | None = None,
        **keywords: Unpack[LogKeywords],
    ) -> None:
        self.path = Path(path).absolute()
        super().__init__(str(self.path), options, name=self.path.name, **keywords)
        self.torn_tail: TornTail | None = None
        self.flushes = 0  # number of write+fsync rounds, for benchmarks

        self._seq = 0
        self._prev = GENESIS
        self._size = 0
        self._terminate = False  # the file ends in a complete record without its newline
        self._held_since: float | None = None  # when the flusher took the file lock it still holds
        self._identity = (0, 0)  # (st_dev, st_ino) of the file the descriptor holds, set by _lock_file
        self._open()
        self._fd_users = 2  # close() and the flusher (see _drop_fd)
        self._start()

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
        reopen the path and lock again. Deleted with nothing in its place, it is a break.
        """
        while True:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            status = os.fstat(self._fd)
            if status.st_nlink > 0:
                self._identity = (status.st_dev, status.st_ino)
                return status
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            except FileNotFoundError:
                raise WALError(self._lost(None)) from None  # deleted, not replaced: nobody would read it
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

    # -- the commit (on the flusher thread) -------------------------------------------

    def _commit(self, batch: list[Entry]) -> None:
        self._write(batch)

    def _write(self, batch: list[Entry]) -> None:
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
        self._still_at_path()
        self._terminate = False
        self._seq += len(batch)
        self._size += len(data)
        self.flushes += 1
        if time.monotonic() - self._held_since > _HOLD_MAX:
            self._unlock_file()  # a long burst: let another writer have a turn

    def _still_at_path(self) -> None:
        """WALError unless the file just synced is still the one at ``self.path``.

        Asked after every sync, before the batch is acknowledged: a file deleted or renamed
        under this writer (by hand, by the agent) takes what it was told is durable with it.
        Compaction replaces the file only under the lock this writer holds while it writes,
        so a replaced file is never seen here (``_lock_file`` reopens it). One stat per flush.
        """
        try:
            here: os.stat_result | None = os.stat(self.path)
        except FileNotFoundError:
            here = None
        if here is not None and (here.st_dev, here.st_ino) == self._identity:
            return
        raise WALError(self._lost(here))

    def _lost(self, here: os.stat_result | None) -> str:
        """Why the file this writer appends to is not the log at its path any more (one line)."""
        moved = os.fstat(self._fd).st_nlink > 0
        there = "no file is at that path now" if here is None else "another file is at that path now"
        return (
            f"the log file {self.path} was {'moved to another name' if moved else 'deleted'} while this "
            f"writer appended to it ({there}): the records of this flush went with it and none was "
            f"acknowledged. The log is broken: find what {'moved' if moved else 'deleted'} it, put it back, "
            "and open the log again"
        )

    def _idle(self) -> None:
        self._unlock_file()  # idle: other writers need not wait for us

    def _disconnect(self) -> None:
        try:
            self._unlock_file()
        finally:
            self._drop_fd()

    def _unlock_file(self) -> None:
        if self._held_since is not None:
            self._held_since = None
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _release(self, clean: bool) -> None:
        self._drop_fd()

    def _drop_fd(self) -> None:
        """Close the file once neither close() nor the flusher needs it.

        A close that gave up on a wedged flusher must not close the descriptor under
        it: the number could be reused by another open file, which the flusher's
        write, once the device answers, would then land in.
        """
        with self._lock:
            self._fd_users -= 1
            last = self._fd_users == 0
        if last:
            os.close(self._fd)

    # -- reading -------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """Every durable record of the file (call ``barrier()`` first to include queued ones)."""
        return read_records(self.path, encryptor=self.encryptor)
