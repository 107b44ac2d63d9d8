"""Group commit for logs that live on a server (Postgres, Redis).

Callers only queue records; one flusher thread per log commits everything queued
meanwhile, from every saga and thread, in one round (one transaction, one script
call), and wakes the barriers that round covers.

What a server adds over a file is that it goes away and comes back. A commit
that failed because the connection broke is retried, with backoff, for as long
as it takes: the records stay queued, barriers wait (up to their bound, then
``WALStalled``), and appends queue up to ``max_pending`` (then backpressure).
A broken connection leaves one question open, whether the failed commit landed
before the connection died; a backend answers it from a per-writer marker
written in the same transaction, so a retried batch is never written twice.
Any other error (a missing table, a refused login, a script error) breaks the
log: it refuses further records rather than guess.
"""

from __future__ import annotations

import abc
import asyncio
import atexit
import itertools
import logging
import threading
import time
import uuid
import weakref
from collections.abc import Mapping
from typing import Any, Literal

from agent_saga.errors import WALClosed, WALError, WALFull, WALStalled
from agent_saga.log.base import WAL
from agent_saga.log.codec import encode_entry

__all__ = ["Entry", "GroupCommitWAL"]

log = logging.getLogger("agent_saga.wal")

#: One queued record: ticket, ts (µs), type, saga, step, the body's canonical JSON.
Entry = tuple[int, int, str, str, "int | None", str]
_Waiter = tuple[int, asyncio.AbstractEventLoop, "asyncio.Future[None]"]
_MAX_BACKOFF = 1.0
_open_logs: weakref.WeakSet[GroupCommitWAL] = weakref.WeakSet()


class GroupCommitWAL(WAL):
    """The queue, flusher and barriers shared by the server-backed logs.

    A subclass implements :meth:`_commit` (make a batch durable, exactly once even
    when called again for a batch whose first attempt may have landed),
    :meth:`_transient` (is this error a lost connection worth retrying) and
    :meth:`_disconnect` (called on the flusher thread when it stops).
    """

    durable = True
    #: The most records one commit carries (a server caps a statement or script's size).
    max_batch = 5000

    def __init__(
        self,
        location: str,
        *,
        linger: float,
        barrier_timeout: float,
        max_pending: int,
        backpressure: Literal["refuse", "block"],
    ) -> None:
        if backpressure not in ("refuse", "block"):
            raise ValueError(f"backpressure must be 'refuse' or 'block', got {backpressure!r}")
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, got {max_pending!r}")
        if barrier_timeout <= 0:
            raise ValueError(f"barrier_timeout must be a positive number of seconds, got {barrier_timeout!r}")
        self.location = location
        self.linger = linger
        self.barrier_timeout = barrier_timeout
        self.max_pending = max_pending
        self.backpressure = backpressure
        #: Names this writer in the commit marker: which of its tickets are committed.
        self.writer = uuid.uuid4().hex
        self.commits = 0  # rounds committed, for benchmarks
        self.retries = 0  # commits tried again after a lost connection
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._done = threading.Condition(self._lock)
        self._pending: list[Entry] = []
        self._tickets = itertools.count(1)
        self._last_ticket = 0
        self._durable = 0
        self._wanted = 0
        self._waiters: list[_Waiter] = []
        self._broken: WALError | None = None
        self._closing = False
        self._abandon = False
        self._flusher: threading.Thread | None = None

    def _start(self) -> None:
        """Start the flusher (the subclass calls this once it is connected)."""
        self._flusher = threading.Thread(target=self._run, name=f"agent-saga-wal:{self.location}", daemon=True)
        self._flusher.start()
        _open_logs.add(self)

    # -- what a backend provides -------------------------------------------------------

    @abc.abstractmethod
    def _commit(self, batch: list[Entry]) -> None:
        """Make ``batch`` durable in one round, exactly once."""

    @abc.abstractmethod
    def _transient(self, err: BaseException) -> bool:
        """Whether ``err`` is a lost or refused connection (retry) rather than a fault (break)."""

    def _disconnect(self) -> None:
        """Release the flusher's connection (runs on the flusher thread as it stops)."""

    # -- the caller's side ---------------------------------------------------------------

    def append(
        self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None
    ) -> int:
        ts = time.time_ns() // 1000
        # Encoded on the caller's thread: a record the log cannot hold is refused to this
        # caller (WALRefused) and never reaches the commit it would break for every saga.
        body_json = encode_entry(type, saga, step, body)
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if self._closing:
                raise WALClosed(f"{self!r} is closed; records can no longer be appended")
            while len(self._pending) >= self.max_pending:
                if self.backpressure == "refuse":
                    raise WALFull(
                        f"{self!r} has {len(self._pending)} records waiting for the server "
                        f"(max_pending={self.max_pending}); refusing rather than dropping. "
                        "Raise max_pending or use backpressure='block'"
                    )
                if not self._done.wait(self.barrier_timeout):
                    raise WALStalled(
                        f"{self!r}: no room in the queue after {self.barrier_timeout:g}s "
                        "(the server is unreachable or very slow)"
                    )
                if self._broken is not None:
                    raise self._broken
            ticket = next(self._tickets)
            self._last_ticket = ticket
            self._pending.append((ticket, ts, str(type), saga, step, body_json))
            if len(self._pending) == 1:
                self._work.notify()
            return ticket

    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        target = self._last_ticket if ticket is None else ticket
        if target <= self._durable and self._broken is None:
            return
        limit = self.barrier_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        with self._lock:
            self._want(target)
            while self._durable < target:
                if self._broken is not None:
                    raise self._broken
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise self._stalled(target, limit)
                self._done.wait(remaining)

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        target = self._last_ticket if ticket is None else ticket
        if target <= self._durable and self._broken is None:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        limit = self.barrier_timeout if timeout is None else timeout
        with self._lock:
            if self._broken is not None:
                raise self._broken
            if self._durable >= target:
                return
            self._waiters.append((target, loop, future))
            self._want(target)
        try:
            async with asyncio.timeout(limit):
                await future
        except TimeoutError:
            raise self._stalled(target, limit) from None

    def _want(self, target: int) -> None:
        """Tell the flusher someone waits for ``target`` (lock held): it stops lingering."""
        if target > self._wanted:
            self._wanted = target
            self._work.notify()

    def _stalled(self, ticket: int, limit: float) -> WALStalled:
        return WALStalled(
            f"record {ticket} of {self!r} was not committed after {limit:g}s (committed up to "
            f"{self._durable}); the server is unreachable or very slow, the record is still queued"
        )

    # -- the flusher -------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._pending and not self._closing:
                        self._work.wait()
                    if not self._pending:
                        return
                    if self._wanted <= self._durable and not self._closing and self.linger > 0:
                        # Nobody is waiting: give the next step's intent a moment to join.
                        self._work.wait(self.linger)
                    batch = self._pending[: self.max_batch]
                    del self._pending[: len(batch)]
                    self._done.notify_all()  # room for 'block' backpressure
                if not self._commit_until_done(batch):
                    return
                self._acknowledge(batch[-1][0])
        finally:
            try:
                self._disconnect()
            except Exception:
                log.debug("%r: closing the connection failed", self, exc_info=True)

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
                    self._work.wait(delay)  # close() wakes us to give up sooner
                delay = min(delay * 2, _MAX_BACKOFF)
                continue
            self.commits += 1
            return True

    def _acknowledge(self, ticket: int) -> None:
        with self._lock:
            self._durable = ticket
            self._done.notify_all()
            ready = [w for w in self._waiters if w[0] <= ticket]
            self._waiters = [w for w in self._waiters if w[0] > ticket]
        self._settle(ready, None)

    def _fail(self, err: BaseException) -> None:
        broken = err if isinstance(err, WALError) else WALError(f"{self!r}: committing failed: {err!r}")
        if broken is not err:
            broken.__cause__ = err
        log.error("%r is broken and refuses further records: %s", self, err)
        with self._lock:
            self._broken = broken
            self._done.notify_all()
            waiting, self._waiters = self._waiters, []
        self._settle(waiting, broken)

    @staticmethod
    def _settle(waiters: list[_Waiter], error: WALError | None) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
        for _, loop, future in waiters:
            by_loop.setdefault(loop, []).append(future)
        for loop, futures in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, futures, error)
            except RuntimeError:  # that loop is closed; its waiters are gone
                pass

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
        """Commit what is queued, stop the flusher, disconnect. Bounded and idempotent."""
        with self._lock:
            already = self._closing
            self._closing = True
            self._work.notify_all()
        if already or self._flusher is None:
            return
        _open_logs.discard(self)
        self._flusher.join(self.barrier_timeout if timeout is None else timeout)
        if self._flusher.is_alive():
            self._abandon = True  # stop retrying: the server did not come back in time
            with self._lock:
                self._work.notify_all()
                lost = len(self._pending)
            log.error("%r closed with %d records not committed (the server was unreachable)", self, lost)

    def __enter__(self) -> GroupCommitWAL:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    # As FileWAL does: what is queued at exit (a last commit record nobody waited for) is committed.
    for wal in list(_open_logs):
        try:
            wal.close(timeout=5.0)
        except Exception:  # best effort at interpreter exit
            log.exception("closing %r at exit failed", wal)


def _resolve(futures: list[asyncio.Future[None]], error: WALError | None) -> None:
    for future in futures:
        if future.done():
            continue  # timed out or cancelled meanwhile
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
