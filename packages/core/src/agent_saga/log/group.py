"""Group commit: the one lifecycle every durable log shares (file, Postgres, Redis).

Callers only queue records; one flusher thread per log commits everything queued
meanwhile, from every saga and thread, in one round (one ``write`` + ``fdatasync``,
one transaction, one script call), and wakes the barriers that round covers.

A backend supplies only its commit (:meth:`GroupCommitWAL._commit`) and, if it has
them, what a commit holds on to (a file lock, a connection). Everything else is
here and therefore the same for every backend: the queue and its backpressure,
both barriers and their bound (``WALStalled``), the flusher's linger, the retry of
a commit that failed on a lost connection, the error that breaks the log, close
and the at-exit registry.

When nobody waits on a barrier, the flusher lingers a moment before committing,
so that a step's commit record and the next step's intent share one round; a
record nobody waits for is still committed within ``linger`` seconds.

A server goes away and comes back. A commit that failed on an error the backend
calls transient (:meth:`GroupCommitWAL._transient`: a lost connection) is
retried, with backoff, for as long as it takes: the records stay queued, barriers
wait (up to their bound, then ``WALStalled``), and appends queue up to
``max_pending`` (then backpressure). A backend answers whether the failed commit
landed before the connection died (a per-writer marker written in the same
transaction), so a retried batch is never written twice. Any other error (a full
disk, a missing table, a script error) breaks the log: it refuses further
records rather than guess.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, Self, TypedDict, Unpack

from agent_saga.errors import WALClosed, WALError, WALFull, WALStalled
from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher, encode_entry
from agent_saga.log.waiters import AsyncWaiters, settle

__all__ = ["Entry", "GroupCommitWAL", "LogKeywords", "LogOptions"]

log = logging.getLogger("agent_saga.wal")

#: One queued record: ts (µs), type, saga, step, the body's canonical JSON. Its ticket is
#: its place in the queue: tickets are consecutive, and a batch ends at ``_batch_end``.
Entry = tuple[int, str, str, "int | None", str]
_MAX_BACKOFF = 1.0
# Where the flusher is: running, waiting a bounded moment for more records, idle, or
# waiting to retry a commit. Appends wake it only when idle, barriers when lingering
# or idle, close from anywhere (a barrier must not cut a retry's backoff short).
_RUNNING, _LINGERING, _IDLE, _BACKOFF = 0, 1, 2, -1
_open_logs: weakref.WeakSet[GroupCommitWAL] = weakref.WeakSet()


@dataclass(frozen=True)
class LogOptions:
    """How a durable log commits, whatever it writes to (FileWAL, PostgresWAL, RedisWAL).

    ``chain``: hash-chain the records. ``linger`` bounds how long a record nobody waits for
    stays only in memory; ``barrier_timeout`` bounds every barrier (then ``WALStalled``);
    ``max_pending`` with ``backpressure="refuse"`` makes ``append`` raise ``WALFull`` instead
    of growing without bound, ``"block"`` waits (at most ``barrier_timeout``). ``encryptor``
    (``agent_saga.log.crypto``; default: a key in ``$AGENT_SAGA_WAL_KEY``, else none) stores
    every body encrypted. Each constructor takes these as keywords too (``FileWAL(p, chain=False)``).
    """

    chain: bool = True
    linger: float = 0.002
    barrier_timeout: float = 30.0
    max_pending: int = 100_000
    backpressure: Literal["refuse", "block"] = "refuse"
    encryptor: BodyCipher | None = None

    def __post_init__(self) -> None:
        if self.backpressure not in ("refuse", "block"):
            raise ValueError(f"backpressure must be 'refuse' or 'block', got {self.backpressure!r}")
        if self.max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {self.max_pending!r}")
        if self.barrier_timeout <= 0:
            raise ValueError(f"barrier_timeout must be a positive number of seconds, got {self.barrier_timeout!r}")

    @classmethod
    def given(cls, options: LogOptions | None, keywords: LogKeywords) -> LogOptions:
        """``options`` (or the defaults) with the keywords a constructor was called with on top."""
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            known = ", ".join(f.name for f in fields(cls))
            raise TypeError(f"unknown log option(s) {', '.join(unknown)}: a log takes {known} (see LogOptions)")
        return replace(options or cls(), **keywords)


class LogKeywords(TypedDict, total=False):
    """:class:`LogOptions`' fields as a constructor's keywords (``**keywords: Unpack[LogKeywords]``)."""

    chain: bool
    linger: float
    barrier_timeout: float
    max_pending: int
    backpressure: Literal["refuse", "block"]
    encryptor: BodyCipher | None


class GroupCommitWAL(WAL):
    """The queue, flusher, barriers and close shared by every durable log.

    A backend implements :meth:`_commit` (make a batch durable; exactly once even
    when called again for a batch whose first attempt may have landed) and may
    implement :meth:`_transient` (is this error a lost connection worth retrying;
    default: no, every failure breaks the log), :meth:`_idle` (the flusher has
    nothing to do), :meth:`_disconnect` (the flusher stops) and :meth:`_release`
    (the log closed). It calls :meth:`_start` once it is ready to commit.
    """

    durable = True
    encodes_on_append = True  # see append
    #: The most records one commit carries (a server caps a statement or script's size).
    max_batch = 5000
    #: What holds the queued records, and what to suspect when a barrier stalls.
    _store = "the server"
    _stall_hint = "the server is unreachable or very slow"

    def __init__(self, location: str, options: LogOptions | None = None, *, name: str | None = None,
                 **keywords: Unpack[LogKeywords]) -> None:
        options = LogOptions.given(options, keywords)
        self.location = location
        self.linger = options.linger
        self.barrier_timeout = options.barrier_timeout
        self.max_pending = options.max_pending
        self.backpressure = options.backpressure
        self.chain = options.chain
        self.encryptor = _default_encryptor(options.encryptor)
        #: Names this writer in a server's commit marker: which of its tickets are committed.
        self.writer = uuid.uuid4().hex
        self.commits = 0  # rounds committed, for benchmarks
        self.retries = 0  # commits tried again after a lost connection
        self._name = name or location
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
        self._pending: list[Entry] = []
        self._last_ticket = 0
        self._batch_end = 0  # the ticket of the last record of the batch being committed
        self._durable = 0
        self._wanted = 0
        self._waiters = AsyncWaiters(self._lock, self._stalled, self._name)
        self._broken: WALError | None = None
        self._closing = False
        self._abandon = False  # close gave up waiting: stop retrying
        self._flusher: threading.Thread | None = None

    def _start(self) -> None:
        """Start the flusher (the backend calls this once it can commit)."""
        self._flusher = threading.Thread(target=self._run, name=f"agent-saga-wal:{self._name}", daemon=True)
        self._flusher.start()
        _open_logs.add(self)

    # -- what a backend provides -------------------------------------------------------

    @abc.abstractmethod
    def _commit(self, batch: list[Entry]) -> None:
        """Make ``batch`` (tickets ``_batch_end - len(batch) + 1`` .. ``_batch_end``) durable, once."""

    def _transient(self, err: BaseException) -> bool:
        """Whether ``err`` is a lost or refused connection (retry) rather than a fault (break)."""
        return False

    def _idle(self) -> None:
        """The flusher found nothing to do and is about to wait (lock held)."""

    def _disconnect(self) -> None:
        """Release what the flusher holds (runs on the flusher thread as it stops)."""

    def _release(self, clean: bool) -> None:
        """Release the log's resources, once, as :meth:`close` ends.

        ``clean``: every record was committed and the log is not broken.
        """

    # -- the caller's side ---------------------------------------------------------------

    def append(
        self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None
    ) -> int:
        # Encoded on the caller's thread: a record the log cannot hold is refused to this
        # caller (WALRefused) and never reaches the commit it would break for every saga.
        return self.append_encoded(type, saga, encode_entry(type, saga, step, body), step)

    def append_encoded(self, type: str, saga: str, body_json: str, step: int | None = None) -> int:
        """Queue a record whose body is given as its canonical JSON, already checked; return its ticket.

        What :meth:`append` does after :func:`encode_entry`, for a caller that made the text and
        checked it (valid UTF-8, ``canonical`` of the body) and its header's parts itself: the
        engine's usual REVERSIBLE commit record (``engine/commit_record.py``). A subclass that
        overrides :meth:`append` is never given a record this way.
        """
        ts = time.time_ns() // 1000
        lock = self._lock  # acquire/release, not `with`: no bound __enter__/__exit__ made per record
        lock.acquire()
        try:
            if self._broken is not None or self._closing or len(self._pending) >= self.max_pending:
                self._admit()
            self._last_ticket = ticket = self._last_ticket + 1
            self._pending.append((ts, type, saga, step, body_json))
            if self._parked == _IDLE and not self._kicked:
                self._kicked = True
                self._kick.release()
            return ticket
        finally:
            lock.release()

    def _admit(self) -> None:
        """Raise why a record cannot be queued now, or wait for room ('block'); lock held."""
        if self._broken is not None:
            raise self._broken
        if self._closing:
            raise WALClosed(f"{self!r} is closed; records can no longer be appended")
        if self.backpressure == "refuse":
            raise WALFull(
                f"{self!r} has {len(self._pending)} records waiting for {self._store} "
                f"(max_pending={self.max_pending}); refusing rather than dropping. "
                "Raise max_pending or use backpressure='block'"
            )
        deadline = time.monotonic() + self.barrier_timeout
        self._blocked += 1
        try:
            while len(self._pending) >= self.max_pending:
                if self._broken is not None:
                    raise self._broken
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WALStalled(
                        f"{self!r}: no room in the queue after {self.barrier_timeout:g}s ({self._stall_hint})"
                    )
                self._done.wait(remaining)
        finally:
            self._blocked -= 1
        if self._broken is not None:
            raise self._broken
        if self._closing:
            raise WALClosed(f"{self!r} is closed; records can no longer be appended")

    def _want(self, target: int) -> None:
        """Someone waits for ``target``: wake the flusher from a linger or idle wait (lock held)."""
        self._wanted = target
        if self._parked > 0 and not self._kicked:
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
            # Bounded by the waiters' watchdog, not by a timer on the caller's loop: the
            # flusher may be the one stuck (a wedged fdatasync, a server that is gone).
            self._waiters.add(target, future, deadline, limit)
            if target > self._wanted:
                self._want(target)
        await future

    def _stalled(self, ticket: int, limit: float) -> WALStalled:
        return WALStalled(
            f"record {ticket} of {self!r} was not durable after {limit:g}s (durable up to "
            f"{self._durable}); {self._stall_hint}, the record is still queued"
        )

    # -- the flusher -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                if not self._commit_until_done(batch):
                    return
                self._acknowledge()
        except BaseException as err:
            # Anything escaping the loop (a backend's idle hook, a waiter's loop) would end
            # this thread silently and leave every barrier to wait out its bound: break the
            # log with it instead, so they fail at once naming why.
            if self._broken is None:
                self._fail(err, "its flusher")
            raise
        finally:
            try:
                self._disconnect()
            except Exception:
                log.debug("%r: releasing the flusher's hold failed", self, exc_info=True)

    def _next_batch(self) -> list[Entry] | None:
        """Wait for records worth committing and take them; None once closed and drained."""
        with self._lock:
            lingered = False
            if not self._pending and not self._closing:
                if self.linger > 0:
                    # Right after a commit: a record queued now waits at most linger.
                    self._park(_LINGERING, self.linger)
                    lingered = True
                # A loop, not one wait: a barrier can wake us with nothing queued (it looked at
                # the durable mark just before our last commit raised it); only close may end us.
                while not self._pending and not self._closing:
                    self._idle()
                    self._park(_IDLE, -1)
                    lingered = False
            if not self._pending:
                return None
            if not lingered and self._wanted <= self._durable and not self._closing and self.linger > 0:
                # Nobody is waiting: give the next step's intent a moment to join.
                self._park(_LINGERING, self.linger)
            if len(self._pending) <= self.max_batch:
                # Tickets are consecutive: a batch of everything pending ends with the last one given.
                batch, self._pending = self._pending, []
                self._batch_end = self._last_ticket
            else:
                batch = self._pending[: self.max_batch]
                del self._pending[: self.max_batch]
                self._batch_end = self._last_ticket - len(self._pending)
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

    def _commit_until_done(self, batch: list[Entry]) -> bool:
        """Commit one batch, retrying lost connections; False once the log is broken."""
        delay = 0.02
        while True:
            try:
                self._commit(batch)
            except BaseException as err:  # noqa: BLE001 - every failure is either retried or breaks the log
                if not self._transient(err) or self._abandon:
                    self._fail(err)
                    return False
                if delay == 0.02:  # one line per outage, not one per retry (a restart can take minutes)
                    log.warning("%r: commit failed (%s); retrying, the records stay queued", self, err)
                self.retries += 1
                with self._lock:
                    if not self._abandon:
                        self._park(_BACKOFF, delay)  # close() kicks us to give up sooner
                delay = min(delay * 2, _MAX_BACKOFF)
                continue
            self.commits += 1
            return True

    def _acknowledge(self) -> None:
        with self._lock:
            self._durable = self._batch_end
            if self._blocked:
                self._done.notify_all()
            ready = self._waiters.ready(self._durable)
        if ready:
            settle(ready)

    def _fail(self, err: BaseException, doing: str = "committing") -> None:
        broken = err if isinstance(err, WALError) else WALError(f"{self!r}: {doing} failed: {err!r}")
        if broken is not err:
            broken.__cause__ = err
        log.error("%r is broken and refuses further records: %s", self, err)
        with self._lock:
            self._broken = broken
            self._done.notify_all()
            waiting = self._waiters.take_all(broken)
        settle(waiting)

    # -- state and closing -------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closing

    @property
    def broken(self) -> WALError | None:
        """The error that stopped this log, if any."""
        return self._broken

    def close(self, timeout: float | None = None) -> None:
        """Commit what is queued, stop the flusher, release the log. Bounded and idempotent.

        Waits up to ``timeout`` (default ``barrier_timeout``) for the queue to drain;
        then gives up retrying and logs how many records were not committed. Only the
        first call does this; later ones return at once.
        """
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._parked and not self._kicked:
                self._kicked = True
                self._kick.release()
        _open_logs.discard(self)
        flusher = self._flusher
        stuck = False
        if flusher is not None:
            flusher.join(self.barrier_timeout if timeout is None else timeout)
            stuck = flusher.is_alive()
        with self._lock:
            if stuck:
                self._abandon = True  # stop retrying: the store did not come back in time
                if self._parked and not self._kicked:
                    self._kicked = True
                    self._kick.release()
            lost = self._last_ticket - self._durable  # queued, or in the commit that did not end
            self._waiters.close()
        if lost:
            why = self._stall_hint if self._broken is None else f"it broke: {self._broken}"
            log.error("%r closed with %d records not durable (%s)", self, lost, why)
        self._release(not stuck and not lost and self._broken is None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    # What is queued at exit (a last commit record nobody waited for) is committed.
    for wal in list(_open_logs):
        try:
            wal.close(timeout=5.0)
        except Exception:  # best effort at interpreter exit
            log.exception("closing %r at exit failed", wal)


def _default_encryptor(encryptor: BodyCipher | None) -> BodyCipher | None:
    """``encryptor``, else the key in ``$AGENT_SAGA_WAL_KEY``, else None: the same for every backend."""
    if encryptor is None and os.environ.get("AGENT_SAGA_WAL_KEY"):
        from agent_saga.log.crypto import AESGCMEncryptor

        return AESGCMEncryptor.from_env()
    return encryptor
