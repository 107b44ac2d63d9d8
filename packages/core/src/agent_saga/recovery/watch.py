"""Keep sweeping a log through its server's outages, and wait for a log that is not there yet.

A watching daemon (``agent-saga recover --watch``, ``saga-recoveryd``, the background
daemon of ``saga_lifespan``) outlives the servers it reads: when PostgreSQL or Redis
restarts, a sweep fails with a lost or refused connection. That is an *outage*, not a
fault: the watcher says so in one line when it begins, retries with a bounded, jittered
backoff (0.1 s doubling to 5 s) without a line per retry, and says in one more line when
the server answers again, then sweeps as before. The stores reconnect by themselves
(every read of a server log opens its connection, the recovery state's connection is
replaced when it broke), so the same daemon carries on.

A log that does not exist yet (a file not yet written, a server log with no record) is
waited for the same way, with one line; a log this watch swept before and cannot find now
was moved or deleted, and the line says so (records written to it since are not here). Everything else a sweep raises (a chain that
does not verify, a full disk, a bug) is the caller's to handle: ``on_error``.

The waits are on ``stop``, so setting it (a SIGTERM handler does) ends the watch at once.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from agent_saga.inert import clip
from agent_saga.log.server import LogNotFound

if TYPE_CHECKING:  # the daemon's own watch() uses this module
    from agent_saga.recovery.daemon import RecoveryDaemon, SweepReport

__all__ = ["Backoff", "Watch", "is_outage"]


def _driver_outage(err: BaseException) -> bool:
    # The drivers are optional extras: an error can only be theirs if they were imported.
    redis = sys.modules.get("redis.exceptions")
    if redis is not None and isinstance(err, (redis.ConnectionError, redis.TimeoutError)):
        return True  # refused, reset, timed out, or LOADING after a restart (BusyLoadingError)
    psycopg = sys.modules.get("psycopg")
    # OperationalError: the connection failed or broke, the server is starting or shutting down.
    return psycopg is not None and isinstance(err, psycopg.OperationalError)


def is_outage(err: BaseException | None) -> bool:
    """Whether ``err`` (or what it was raised from) is a lost, refused or timed-out connection."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, (ConnectionError, TimeoutError)) or _driver_outage(err):
            return True
        err = err.__cause__  # a log's WALError names the driver's error as its cause
    return False


class Backoff:
    """Delays that start at ``first`` seconds and double up to ``cap``, each jittered down by up to half.

    The jitter keeps the daemons of a fleet from all knocking on a restarted server at once.
    """

    def __init__(self, first: float = 0.1, cap: float = 5.0, rng: Callable[[], float] = random.random) -> None:
        if not 0 < first <= cap:
            raise ValueError(f"the backoff must start above 0 and at most at its cap, got {first!r} and {cap!r}")
        self.first, self.cap, self.rng = first, cap, rng
        self.tries = 0

    def next(self) -> float:
        delay = min(self.cap, self.first * 2 ** min(self.tries, 64))
        self.tries += 1
        return float(delay * (0.5 + self.rng() / 2))

    def reset(self) -> None:
        self.tries = 0


def _brief(err: BaseException) -> str:
    """The error in one line (a driver's message may span several)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return clip(text, 200)


class Watch:
    """Sweeps every ``interval`` seconds until ``stop`` is set, through outages and a missing log.

    ``open_daemon`` makes the daemon (called again until it succeeds: the server may be
    down, or the log not there yet, when the watch begins). ``say`` gets the one line per
    outage or wait; ``on_report`` each sweep's report; ``on_error`` every other failure (it
    may raise to end the watch). ``close``: close the daemon when the watch ends.
    """

    def __init__(
        self,
        open_daemon: Callable[[], RecoveryDaemon],
        *,
        interval: float,
        say: Callable[[str], None],
        on_report: Callable[[SweepReport], None] = lambda report: None,
        on_error: Callable[[RecoveryDaemon | None, Exception], None],
        sweep: Callable[[RecoveryDaemon], SweepReport] = lambda daemon: daemon.sweep(),
        backoff: Backoff | None = None,
        close: bool = True,
        location: str = "the log",
    ) -> None:
        self.open_daemon = open_daemon
        self.interval = interval
        self.say = say
        self.on_report = on_report
        self.on_error = on_error
        self.sweep = sweep
        self.backoff = backoff or Backoff()
        self.close = close
        self.location = location
        self.daemon: RecoveryDaemon | None = None
        self.outages = 0
        self.outage: str | None = None  # what the current outage is, while it lasts
        self._since = 0.0
        self._waiting = False
        self._swept = False  # a sweep found the log: missing later, it was moved or deleted

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                stop.wait(self._once())
        finally:
            if self.close and self.daemon is not None:
                self.daemon.close()

    def _once(self) -> float:
        """One sweep (or attempt); returns how long to wait before the next."""
        try:
            if self.daemon is None:
                self.daemon = self.open_daemon()
                self.location = self.daemon.location
            if not self.daemon.store.exists():
                raise LogNotFound(f"no log at {self.location}")
            report = self.sweep(self.daemon)
        except LogNotFound as err:
            if self._swept:
                self._swept, self._waiting = False, True
                self.say(f"the log this daemon swept at {self.location} was moved or deleted: records written "
                         "to it since are not there; find it and point the daemon at it (waiting for a log "
                         "to appear at that path)")
            elif not self._waiting and not self.outage:
                self._waiting = True
                self.say(f"{_brief(err)} yet: waiting for it to appear")
            return min(self.backoff.next(), self.interval)
        except Exception as err:  # noqa: BLE001 - an outage is retried here, the rest goes to on_error
            if not is_outage(err):
                self.on_error(self.daemon, err)
                return self.interval
            if self.outage is None:
                self.outages += 1
                self._since = time.monotonic()
                self.outage = _brief(err)
                self.say(f"{self.location} is unreachable ({self.outage}); retrying with backoff "
                         f"({self.backoff.first:g}s doubling to {self.backoff.cap:g}s) until it answers")
            return self.backoff.next()
        if self.outage is not None:
            self.say(f"{self.location} answers again after {time.monotonic() - self._since:.1f}s "
                     f"({self.backoff.tries} retries); sweeping")
            self.outage = None
        self._waiting = False
        self._swept = True
        self.backoff.reset()
        self.on_report(report)
        return self.interval

