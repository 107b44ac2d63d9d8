"""Forcing the orderings of sibling steps: a log that signals what it was given, and a world.

Tests of several tool calls at once wait on these events, never on time: a sibling's tool
blocks until the log holds ``ROLLBACK_STARTED`` (it then commits while the rollback waits
for it) or ``SAGA_ROLLED_BACK`` (it lands after the rollback gave up on it), with a generous
upper bound so that a wrong ordering fails the test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agent_saga import FileWAL, compensator

__all__ = ["BOUND", "Bookings", "SignalWAL", "wait_until"]

#: The longest any test here waits for an event (seconds): only a broken ordering reaches it.
BOUND = 30.0


class SignalWAL(FileWAL):
    """A file log that sets an event for every record type (and type + step) appended to it."""

    def __init__(self, path: str | Path, **kwargs: Any) -> None:
        super().__init__(path, **kwargs)
        self._events: dict[str, threading.Event] = {}
        self._events_lock = threading.Lock()

    def event(self, rtype: str, step: int | None = None) -> threading.Event:
        key = rtype if step is None else f"{rtype}:{step}"
        with self._events_lock:
            found = self._events.get(key)
            if found is None:
                found = self._events[key] = threading.Event()
            return found

    def append(self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None) -> int:
        ticket = super().append(type, saga, body, step)
        self.event(str(type)).set()
        if step is not None:
            self.event(str(type), step).set()
        return ticket

    def wait_for(self, rtype: str, step: int | None = None) -> None:
        """Block until a record of ``rtype`` (for ``step``) was appended; AssertionError after BOUND."""
        if not self.event(rtype, step).wait(BOUND):
            raise AssertionError(f"no {rtype} record{'' if step is None else f' for step {step}'} in {BOUND:g}s")

    def types(self) -> list[tuple[str, int | None]]:
        self.barrier()
        return [(r["type"], r.get("step")) for r in self.records()]


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    """Wait (bounded by BOUND) for a condition another thread makes true."""
    deadline = time.monotonic() + BOUND
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {BOUND:g}s")
        time.sleep(0.005)


class Bookings:
    """The outside world: bookings made and cancelled, each counted (thread-safe).

    ``started(n)`` waits until ``n`` forward calls have begun, so that a test can make the
    failing sibling fail only once the others are in flight.
    """

    HANDLER = "parallel.cancel"

    def __init__(self) -> None:
        self.standing: set[str] = set()
        self.made: Counter[str] = Counter()
        self.cancelled: Counter[str] = Counter()
        self._lock = threading.Condition()
        self._calls = 0
        compensator(self.HANDLER)(self.cancel)

    def book(self, ref: str) -> dict[str, str]:
        with self._lock:
            self.standing.add(ref)
            self.made[ref] += 1
        return {"ref": ref}

    def cancel(self, ref: str, idempotency_key: str | None = None) -> None:
        with self._lock:
            self.standing.discard(ref)
            self.cancelled[ref] += 1
            self._lock.notify_all()

    def begin(self) -> None:
        """A forward call began."""
        with self._lock:
            self._calls += 1
            self._lock.notify_all()

    def started(self, n: int) -> None:
        with self._lock:
            if not self._lock.wait_for(lambda: self._calls >= n, BOUND):
                raise AssertionError(f"only {self._calls} of {n} forward calls began within {BOUND:g}s")
