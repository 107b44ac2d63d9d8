"""The recovery daemon on a background thread of the service's own process.

It sweeps the log every ``interval`` seconds and remembers how the last sweep went,
which readiness reports: a daemon that has not swept yet, whose last sweep failed or
whose thread died is a safety signal that cannot be read as fine. A failed sweep is
logged and retried at the next interval (a chain that does not verify stays failed
until someone looks, and readiness says so all that time). A sweep that fails
because the log's server cannot be reached (it is restarting) is an outage
(``recovery.watch``): one warning when it begins, retries with backoff, one line when
the server answers again; readiness reports the outage while it lasts.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agent_saga.recovery.daemon import RecoveryDaemon, SweepReport
from agent_saga.recovery.watch import Watch

__all__ = ["Sweeper"]

log = logging.getLogger("agent_saga.service")


class Sweeper:
    """Runs ``daemon.sweep()`` on a thread until stopped, through its log server's outages."""

    def __init__(self, daemon: RecoveryDaemon, interval: float) -> None:
        self.daemon = daemon
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="agent-saga-recovery", daemon=True)
        self._sweeps = 0
        self._error: str | None = None
        self._last: SweepReport | None = None
        # An outage (the server restarting) is one warning when it begins and one when it ends,
        # retried with backoff meanwhile; any other failure is logged and retried at the interval.
        self._watch = Watch(lambda: daemon, interval=interval, say=self._say, on_report=self._report,
                            on_error=self._failed, close=False, location=daemon.location)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop sweeping; True when the thread ended within ``timeout`` (and the daemon was closed)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the recovery sweep did not end within %gs (a compensation still running?); "
                        "leaving it to end with the process", timeout)
            return False
        self.daemon.close()
        return True

    def _run(self) -> None:
        self._watch.run(self._stop)

    @staticmethod
    def _say(line: str) -> None:
        log.warning("recovery: %s", line)

    def _failed(self, daemon: RecoveryDaemon | None, err: Exception) -> None:
        with self._lock:
            self._error = f"{type(err).__name__}: {err}"
        log.error("recovery sweep of %s failed: %s", self.daemon.location, self._error)

    def _report(self, report: SweepReport) -> None:
        with self._lock:
            self._sweeps += 1
            self._error = None
            self._last = report
        for action in report.actions:
            log.info("recovery: %s", action.line())
        for escalation in report.new_escalations:
            log.warning("recovery escalated: %s", escalation.line())

    def signal(self) -> dict[str, Any]:
        """The daemon as a readiness signal."""
        with self._lock:
            sweeps, error, last = self._sweeps, self._error, self._last
        outage = self._watch.outage
        if outage is not None:
            error = f"{self.daemon.location} is unreachable: {outage}"
        alive = self._thread.is_alive()
        signal: dict[str, Any] = {"ok": alive and error is None and sweeps > 0, "sweeps": sweeps}
        if not alive:
            signal["detail"] = "the recovery daemon is not running"
        elif error is not None:
            signal["detail"] = f"the last sweep failed: {error}"
        elif last is None:
            signal["detail"] = "no sweep has finished yet"
        else:
            signal["detail"] = last.summary()
            signal["pending_escalations"] = last.pending_escalations
        return signal
