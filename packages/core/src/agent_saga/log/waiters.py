"""The async side of a log's barriers: futures waiting for a ticket to become durable.

A log that makes records durable on a thread of its own (the flusher of every
group-commit log, ``log.group``) keeps here the futures that event loops await.
The flusher pops the ready ones under the log's lock and completes them on their
loops, one ``call_soon_threadsafe`` per loop and flush, however many futures that
flush released.

Every barrier is bounded. A watchdog thread, not the flusher (which may be the
one stuck, in a wedged ``fdatasync``), fails the futures that outlived their
limit. It looks every ``WATCH_INTERVAL`` while barriers come and go and parks once
a whole interval passed without any, so an idle log costs nothing and a busy one
schedules no timer per barrier on anyone's event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import Callable

__all__ = ["WATCH_INTERVAL", "AsyncWaiters", "settle"]

WATCH_INTERVAL = 0.05

_Waiter = tuple[int, int, "asyncio.Future[None]", float, float]  # ticket, tiebreak, future, deadline, limit
_Outcome = tuple["asyncio.Future[None]", "BaseException | None"]


def settle(outcomes: list[_Outcome]) -> None:
    """Complete each future on its own loop (callable from any thread)."""
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, some in by_loop.items():
        try:
            loop.call_soon_threadsafe(_complete, some)
        except RuntimeError:  # that loop is closed: nobody awaits these any more
            pass


def _complete(outcomes: list[_Outcome]) -> None:
    for future, error in outcomes:
        if future.done():  # the awaiting task was cancelled
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


class AsyncWaiters:
    """Futures waiting on tickets, under the log's own lock.

    ``add``, ``ready`` and ``take_all`` must be called with ``lock`` held, the lock
    under which the log moves its durable mark: a barrier that checked the mark
    and then added its future cannot miss the flush that passes it.
    ``stalled(ticket, limit)`` makes the error for a barrier that ran out of time.
    """

    def __init__(self, lock: threading.Lock, stalled: Callable[[int, float], BaseException], name: str) -> None:
        self._lock = lock
        self._stalled = stalled
        self._name = name
        self._heap: list[_Waiter] = []
        self._tiebreak = itertools.count()
        self._added = 0  # barriers ever added: the watchdog's sign of activity
        self._watchdog: threading.Thread | None = None
        self._parked = False
        self._unpark = threading.Condition(lock)
        self._closed = False

    def add(self, ticket: int, future: asyncio.Future[None], deadline: float, limit: float) -> None:
        heapq.heappush(self._heap, (ticket, next(self._tiebreak), future, deadline, limit))
        self._added += 1
        if self._parked:
            self._parked = False
            self._unpark.notify()
        elif self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch, name=f"agent-saga-barriers:{self._name}", daemon=True)
            self._watchdog.start()

    def ready(self, durable: int) -> list[_Outcome]:
        """Pop every future whose ticket is now durable."""
        heap = self._heap
        out: list[_Outcome] = []
        while heap and heap[0][0] <= durable:
            out.append((heapq.heappop(heap)[2], None))
        return out

    def take_all(self, error: BaseException) -> list[_Outcome]:
        """Pop every future, to be failed with ``error`` (the log broke)."""
        heap, self._heap = self._heap, []
        return [(waiter[2], error) for waiter in heap]

    def close(self) -> None:
        """Let the watchdog end once no barrier is left (lock held)."""
        self._closed = True
        self._unpark.notify()

    def _watch(self) -> None:
        seen = -1
        while True:
            time.sleep(WATCH_INTERVAL)
            now = time.monotonic()
            with self._lock:
                expired = [w for w in self._heap if w[3] <= now]
                if expired:
                    self._heap = [w for w in self._heap if w[3] > now]
                    heapq.heapify(self._heap)
                idle = not self._heap and not expired and self._added == seen
                seen = self._added
                while idle and not self._closed:
                    self._parked = True
                    self._unpark.wait()
                    idle = self._parked  # False once a barrier arrived
                ending = self._closed and not self._heap
                if ending:
                    self._watchdog, self._parked = None, False
            if expired:
                settle([(w[2], self._stalled(w[0], w[4])) for w in expired])
            if ending:
                return
