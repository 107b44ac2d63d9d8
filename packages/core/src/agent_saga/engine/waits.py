"""Durable timers and events: a sleep, and a wait for a named event, inside a ``@durable`` run.

A wait is keyed in its run by (kind, name, n): the n-th wait of that kind and name the entry
point began. Its start (WAIT_STARTED: the key and the wake-up time ``until``, seconds since
the epoch) is durable before the run waits, and its end (WAIT_ENDED: ``woke``, ``signalled``
with the ``signal`` record's seq, or ``timed_out``) is durable before the run goes on. A
resumed run (engine/resumed.py) asks for the same waits again: one that ended is answered from
its record without waiting; one that was under way waits only until its recorded ``until``.

Events are EVENT_SIGNALLED records in the saga's log (``agent_saga.signal``, written by any
process). A wait takes the oldest signal of its name that no earlier wait took (WAIT_ENDED
names the one it took), so a signal sent before the wait began, or while the run was dead,
is seen. The WAIT_ENDED record is the decision: when the waiter looks and a signal is in
the log, it is delivered even if the deadline has just passed; once ``timed_out`` is
recorded, a later signal is left for the next wait of that name, and a resume times out too.

Waking: a signal sent in this process nudges the waiter at once (``nudge``); one sent by
another process is seen at the waiter's next look at the log, at most ``poll`` seconds later
(engine/inbox.py: a file log is followed, only what was appended since is read).
Time is the ``WaitClock``'s (``SYSTEM_CLOCK``: the wall clock, because a wake-up time must
mean the same to the process that resumes the run).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_saga.engine.inbox import Inbox
from agent_saga.engine.invoke import Barrier, Park
from agent_saga.engine.invoke import Protocol as Steps
from agent_saga.engine.resumed import DurableRun, RecordedWait
from agent_saga.errors import ConfigurationError, EventTimedOut
from agent_saga.log.records import RecordType as R

if TYPE_CHECKING:
    from agent_saga.engine.saga import Saga

__all__ = [
    "DEFAULT_POLL", "EVENT", "SLEEP", "SYSTEM_CLOCK", "SystemClock", "WaitClock", "Wakeup", "event_wait", "nudge",
    "seconds", "sleep",
]

SLEEP, EVENT = "sleep", "event"
#: How often a wait for an event looks at the log for a signal another process wrote.
DEFAULT_POLL = 1.0


class Wakeup:
    """A waiter's doorbell: rung (``nudge``) when a signal is sent to its saga from this process.

    ``clear`` before each look at the log, so a ring between that look and the park is not lost.
    """

    def __init__(self) -> None:
        self._rung = threading.Event()
        self._lock = threading.Lock()
        self._futures: list[asyncio.Future[None]] = []

    def ring(self) -> None:
        with self._lock:
            self._rung.set()
            futures, self._futures = self._futures, []
        for future in futures:
            try:
                future.get_loop().call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # its loop closed: nobody waits on it any more
                pass

    def clear(self) -> None:
        self._rung.clear()

    def wait(self, seconds: float) -> bool:
        """Return after ``seconds``, or as soon as it is rung; whether it was rung."""
        return self._rung.wait(seconds)

    async def wait_async(self, seconds: float) -> bool:
        """The awaitable :meth:`wait`: the event loop runs meanwhile."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._lock:
            if self._rung.is_set():
                return True
            self._futures.append(future)
        try:
            await asyncio.wait_for(future, seconds)
        except TimeoutError:
            return False
        finally:
            with self._lock:
                if future in self._futures:
                    self._futures.remove(future)
        return True


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class WaitClock(Protocol):
    """Where a durable wait reads the time (seconds since the epoch) and how it spends it.

    ``park`` returns after ``seconds`` or as soon as ``wakeup`` is rung, whichever is first; the
    wait looks at the clock and the log again after every park. A test passes its own clock to
    record the parks and move time on without sleeping.
    """

    def now(self) -> float: ...

    def park(self, seconds: float, wakeup: Wakeup) -> None: ...

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None: ...


class SystemClock:
    """The wall clock, and real waiting."""

    def now(self) -> float:
        return time.time()

    def park(self, seconds: float, wakeup: Wakeup) -> None:
        wakeup.wait(seconds)

    async def park_async(self, seconds: float, wakeup: Wakeup) -> None:
        await wakeup.wait_async(seconds)


SYSTEM_CLOCK = SystemClock()

_lock = threading.Lock()
_waiting: dict[str, set[Wakeup]] = {}  # saga id -> the doorbells of its waits under way in this process


def nudge(saga_id: str) -> None:
    """A signal was written to ``saga_id``'s log here: every wait of it in this process looks again now."""
    with _lock:
        bells = list(_waiting.get(saga_id, ()))
    for bell in bells:
        bell.ring()


@dataclass(slots=True)
class _Parking:
    """What ``invoke.Park`` parks on: the wait's clock and its doorbell."""

    clock: WaitClock
    wakeup: Wakeup

    def park(self, seconds: float) -> None:
        self.clock.park(seconds, self.wakeup)

    async def park_async(self, seconds: float) -> None:
        await self.clock.park_async(seconds, self.wakeup)


def seconds(value: Any, what: str) -> float:
    """``value`` as a finite number of seconds >= 0; ConfigurationError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)


def _begin(saga: Saga, run: DurableRun, kind: str, name: str, seconds: float | None,
           clock: WaitClock) -> tuple[dict[str, Any], RecordedWait | None, Steps[float | None]]:
    """The wait's key fields, what a resume recorded for it, and the protocol that records its start.

    The protocol's value is the wake-up time: the recorded one when the run is resumed.
    """
    (_, _, n), recorded = run.next_wait(kind, name)
    key = {"wait": kind, "name": name, "n": n}

    def start() -> Steps[float | None]:
        if recorded is not None:
            return recorded.until
        until = None if seconds is None else clock.now() + seconds
        ticket = saga.wal.append(R.WAIT_STARTED, saga.saga_id, {**key, "seconds": seconds, "until": until})
        yield Barrier(saga.wal, ticket)  # the wake-up time is on disk before the run waits
        return until

    return key, recorded, start()


def _end(saga: Saga, key: dict[str, Any], outcome: str, **more: Any) -> Steps[None]:
    ticket = saga.wal.append(R.WAIT_ENDED, saga.saga_id, {**key, "outcome": outcome, **more})
    yield Barrier(saga.wal, ticket)  # the run goes on only once the answer a resume gives is on disk


def sleep(saga: Saga, run: DurableRun, seconds: float, clock: WaitClock) -> Steps[None]:
    """A durable sleep of ``seconds`` in ``run`` (only the remainder of a recorded one; none if it ended)."""
    key, recorded, start = _begin(saga, run, SLEEP, "", seconds, clock)
    if recorded is not None and recorded.outcome is not None:
        return  # it ended before the crash: nothing to wait for, nothing to write
    until = yield from start
    parking = _Parking(clock, Wakeup())
    while until is not None and (left := until - clock.now()) > 0:
        yield Park(parking, left)
    yield from _end(saga, key, "woke")


def event_wait(saga: Saga, run: DurableRun, name: str, timeout: float | None, clock: WaitClock,
               poll: float) -> Steps[Any]:
    """Wait in ``run`` for the event ``name``; its data, or EventTimedOut once ``timeout`` has passed."""
    key, recorded, start = _begin(saga, run, EVENT, name, timeout, clock)
    if recorded is not None and recorded.outcome == "signalled":
        return recorded.data
    if recorded is not None and recorded.outcome is not None:
        raise _timed_out(name, recorded.until, served=True)
    until = yield from start
    parking, inbox = _Parking(clock, Wakeup()), Inbox(saga.wal, saga.saga_id)
    with _lock:
        _waiting.setdefault(saga.saga_id, set()).add(parking.wakeup)
    try:
        while True:
            parking.wakeup.clear()  # a ring from here on makes the next park return at once
            first = inbox.first(name)
            if first is not None:
                yield from _end(saga, key, "signalled", signal=first[0])
                return first[1]
            now = clock.now()
            if until is not None and now >= until:
                yield from _end(saga, key, "timed_out")
                raise _timed_out(name, until, served=False)
            yield Park(parking, poll if until is None else min(poll, until - now))
    finally:
        with _lock:
            bells = _waiting.get(saga.saga_id, set())
            bells.discard(parking.wakeup)
            if not bells:
                _waiting.pop(saga.saga_id, None)


def _timed_out(name: str, until: float | None, *, served: bool) -> EventTimedOut:
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(until)) if until is not None else "?"
    how = "as the log recorded before the run was resumed" if served else "recorded in the log"
    return EventTimedOut(f"no signal {name!r} came before {when} ({how}); a later one is left for the next wait "
                         f"for {name!r}")
