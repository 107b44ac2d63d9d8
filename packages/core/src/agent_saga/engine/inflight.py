"""Steps in flight: the effects of one saga that may be running right now, and waiting for them.

Models call several tools at once, and frameworks run them on pools and tasks, so when one
call fails its siblings may still be running. A saga's end must not outrun them: the rollback
(or the commit) first fences the saga (no new step starts its effect), then waits for every
step already past the fence to land, whatever thread or task runs it, for at most the saga's
``rollback_grace``. A step still out after that is left: its outcome is settled when it lands
(``engine.unwind.settle_late``), never dropped.

The waiting works for both drivers: a blocking caller waits on a condition (in slices, so that
Ctrl-C is handled); an awaiting one on a future of its own loop, which a landing step on any
thread resolves through ``call_soon_threadsafe``. A step lands with the saga's lock held, so
"in flight" and a step's outcome change together.
"""

from __future__ import annotations

import asyncio
import threading
import time

__all__ = ["ROLLBACK_GRACE", "InFlight"]

#: Seconds a rollback (or a commit) waits, by default, for the saga's steps still in flight.
ROLLBACK_GRACE = 30.0
#: The longest a blocking waiter sleeps at once: a pending Ctrl-C is handled this often.
_SLICE = 0.2


class InFlight:
    """How many of one saga's steps are in flight, and who waits for none to be.

    The saga changes ``count`` with ``lock`` held (its own lock), and calls ``wake`` (lock
    held) after a landing when ``waiters`` is not 0: a step's hot path pays for no
    notification nobody listens to. ``wait`` and ``wait_async`` take the lock themselves.
    """

    __slots__ = ("_async", "_landed", "_lock", "count", "waiters")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.count = 0
        self.waiters = 0
        self._landed = threading.Condition(lock)
        self._async: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def wake(self) -> None:
        """Tell every waiter a step landed (lock held)."""
        waiters, self._async = self._async, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # its loop is closed: nobody waits there any more
                pass
        self._landed.notify_all()

    def wait(self, deadline: float) -> bool:
        """Block until no step is in flight (True) or ``deadline`` (``time.monotonic()``) passed (False)."""
        with self._lock:
            self.waiters += 1
            try:
                while self.count:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._landed.wait(min(left, _SLICE))
                return True
            finally:
                self.waiters -= 1

    async def wait_async(self, deadline: float) -> bool:
        """Await until no step is in flight (True) or ``deadline`` passed (False), without blocking the loop."""
        loop = asyncio.get_running_loop()
        with self._lock:
            self.waiters += 1
        try:
            while True:
                with self._lock:
                    if not self.count:
                        return True
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    future: asyncio.Future[None] = loop.create_future()
                    self._async.append((loop, future))
                try:
                    async with asyncio.timeout(left):
                        await future
                except TimeoutError:
                    pass  # the loop above decides: the deadline passed, or a step landed just now
        finally:
            with self._lock:
                self.waiters -= 1


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
