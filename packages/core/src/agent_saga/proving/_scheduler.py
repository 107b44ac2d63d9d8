"""A scheduler that forces one ordering of the parts of a saga that run at once.

Each part that can race another (the saga's own thread or task, which fails and rolls back, and
each sibling call) is an *actor*, named by a context variable its thread or task carries; a tool
call run on another thread gets a copy of the context, so it acts for the same actor. The code
under test calls :meth:`Scheduler.park` (or :meth:`Scheduler.park_async` on an event loop, which
must not block) at the points where an ordering can turn: a tool's entry, a log record appended,
a log barrier. An actor stops only at the points the controller asked it to (:meth:`hold`), once
each, and waits there until the controller lets it go (:meth:`resume`). So between two points
only the actor the controller resumed runs, and every ordering is chosen, never left to timing.

Every wait is bounded by ``bound`` seconds, reached only when the code under test does not get
where the ordering needs it (it hangs, or takes another path): the controller then raises
:class:`Unforced`, which the checker reports as a finding, and :meth:`release_all` lets every
actor run on so that its thread or task can end.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["BOUND", "Scheduler", "Unforced", "acting", "actor", "current", "park"]

#: The longest the scheduler waits for an actor (seconds): only a broken ordering reaches it.
BOUND = 30.0

#: The actor the running code acts for (None: not under the scheduler, never parked).
actor: contextvars.ContextVar[str | None] = contextvars.ContextVar("agent_saga_proving_actor", default=None)
#: The scheduler of the run the running code belongs to (for code that cannot be handed it, such
#: as an undo handler the registry resolves by name).
current: contextvars.ContextVar[Scheduler | None] = contextvars.ContextVar("agent_saga_proving_scheduler",
                                                                          default=None)


def park(point: str) -> None:
    """:meth:`Scheduler.park` on the current run's scheduler (nothing outside a run)."""
    scheduler = current.get()
    if scheduler is not None:
        scheduler.park(point)


@contextlib.contextmanager
def acting(name: str) -> Iterator[None]:
    """Run the block (and whatever it starts with a copy of the context) as actor ``name``."""
    token = actor.set(name)
    try:
        yield
    finally:
        actor.reset(token)


class Unforced(Exception):
    """The ordering asked for could not be forced: an actor did not reach its point in time."""


class Scheduler:
    """Holds actors at chosen points and lets them go one at a time (see the module docstring)."""

    def __init__(self, bound: float = BOUND) -> None:
        self.bound = bound
        self._cond = threading.Condition()
        self._holds: dict[str, set[str]] = {}
        self._at: dict[str, str] = {}  # actor -> the point it is parked at
        self._wake: dict[str, Callable[[], object]] = {}  # how to wake an actor parked on a loop
        self._done: set[str] = set()
        self._free = False  # release_all was called: nobody parks any more
        #: (actor, point) for every stop, in order: the ordering that was forced.
        self.trace: list[tuple[str, str]] = []

    # -- the actors' side ------------------------------------------------------------------

    def _stop(self, point: str) -> str | None:
        """Record that the current actor stops at ``point`` (lock held); its name, or None to run on."""
        name = actor.get()
        if name is None or self._free or point not in self._holds.get(name, ()):
            return None
        self._holds[name].discard(point)
        self._at[name] = point
        self.trace.append((name, point))
        self._cond.notify_all()
        return name

    def park(self, point: str) -> None:
        """Stop here if the current actor is held at ``point``, until it is resumed (blocking)."""
        with self._cond:
            name = self._stop(point)
            if name is not None:
                # Bounded: should the controller give up, release_all lets it go sooner.
                self._cond.wait_for(lambda: name not in self._at, self.bound)
                self._at.pop(name, None)

    async def park_async(self, point: str) -> None:
        """``park`` for code on an event loop: awaits instead of blocking the loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._cond:
            name = self._stop(point)
            if name is None:
                return
            self._wake[name] = functools.partial(loop.call_soon_threadsafe, _resolve, future)
        try:
            async with asyncio.timeout(self.bound):
                await future
        except TimeoutError:
            pass
        finally:
            with self._cond:
                self._at.pop(name, None)
                self._wake.pop(name, None)

    def done(self, name: str) -> None:
        """Actor ``name`` has finished (its thread or task ends now)."""
        with self._cond:
            self._done.add(name)
            self._cond.notify_all()

    # -- the controller's side -------------------------------------------------------------

    def hold(self, name: str, *points: str) -> None:
        """Make actor ``name`` stop at each of ``points`` (once each) when it gets there."""
        with self._cond:
            self._holds.setdefault(name, set()).update(points)

    def reached(self, name: str, point: str) -> None:
        """Wait until actor ``name`` is parked at ``point``; :class:`Unforced` if it stops elsewhere or ends."""
        with self._cond:
            self._cond.wait_for(lambda: name in self._at or name in self._done, self.bound)
            where = self._at.get(name)
            if where == point:
                return
        if where is not None:
            raise Unforced(f"{name} stopped at {where} before reaching {point}")
        if name in self._done:
            raise Unforced(f"{name} ended without reaching {point}")
        raise Unforced(f"{name} did not reach {point} within {self.bound:g}s ({self.whereabouts()})")

    def resume(self, name: str) -> None:
        """Let actor ``name`` run on from where it is parked."""
        with self._cond:
            self._at.pop(name, None)
            wake = self._wake.pop(name, None)
            self._cond.notify_all()
        if wake is not None:
            wake()

    def finished(self, name: str) -> None:
        """Wait until actor ``name`` has ended; :class:`Unforced` if it parks first or takes too long."""
        with self._cond:
            self._cond.wait_for(lambda: name in self._done or name in self._at, self.bound)
            where = self._at.get(name)
            if name in self._done:
                return
        if where is not None:
            raise Unforced(f"{name} stopped at {where} where it was expected to end")
        raise Unforced(f"{name} did not end within {self.bound:g}s ({self.whereabouts()})")

    def stopped(self, name: str) -> str | None:
        """Wait until actor ``name`` is parked (the point) or has ended (None); :class:`Unforced` after the bound."""
        with self._cond:
            if not self._cond.wait_for(lambda: name in self._at or name in self._done, self.bound):
                raise Unforced(f"{name} neither stopped nor ended within {self.bound:g}s ({self.whereabouts()})")
            return self._at.get(name)

    def until(self, predicate: Callable[[], bool], what: str) -> None:
        """Wait (bounded) for a condition the actors make true without parking (say, the rollback waits)."""
        deadline = time.monotonic() + self.bound
        while not predicate():
            if time.monotonic() > deadline:
                raise Unforced(f"{what} did not happen within {self.bound:g}s ({self.whereabouts()})")
            with self._cond:
                self._cond.wait(0.002)

    def whereabouts(self) -> str:
        """Where each actor is, in one line: for the message of an ordering or a log that stalled.

        An actor is parked at a point, ended, or on its way (then: the last point it stopped
        at); and, unless ended, the points it is held for and has not reached yet.
        """
        with self._cond:
            names = sorted({*self._holds, *self._at, *self._done, *(name for name, _ in self.trace)})
            parts = []
            for name in names:
                last = next((point for who, point in reversed(self.trace) if who == name), None)
                if name in self._at:
                    where = f"parked at {self._at[name]}"
                elif name in self._done:
                    where = "ended"
                else:
                    where = "on its way" + (f" from {last}" if last else ", not stopped yet")
                missing = sorted(self._holds.get(name, ())) if name not in self._done else []
                if missing:
                    where += f", expected at {', '.join(missing)}"
                parts.append(f"{name} {where}")
        return "; ".join(parts) or "no actor started"

    def release_all(self) -> None:
        """Give up forcing: every parked actor runs on, and no actor parks again."""
        with self._cond:
            self._free = True
            self._at.clear()
            wakes = list(self._wake.values())
            self._wake.clear()
            self._cond.notify_all()
        for wake in wakes:
            wake()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
