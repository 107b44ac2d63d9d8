"""The recovery daemon on a background thread of the service's own process.

It sweeps the log every ``interval`` seconds and remembers how the last sweep went,
which readiness reports: a daemon that has not swept yet, whose last sweep failed or
whose thread died is a safety signal that cannot be read as fine. A failed sweep is
logged and retried at the next interval (a chain that does not verify stays failed
until someone looks, and readiness says so all that time).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from agent_saga.recovery.daemon import RecoveryDaemon, SweepReport

__all__ = ["Sweeper"]

log = logging.getLogger("agent_saga.service")


class Sweeper:
    """Runs ``daemon.sweep()`` on a thread until stopped."""

    def __init__(self, daemon: RecoveryDaemon, interval: float) -> None:
        self.daemon = daemon
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="agent-saga-recovery", daemon=True)
        self._sweeps = 0
        self._error: str | None = None
        self._last: SweepReport | None = None

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
        while not self._stop.is_set():
            try:
                report = self.daemon.sweep()
            except Exception as err:  # noqa: BLE001 - reported by readiness and retried, never fatal
                with self._lock:
                    self._error = f"{type(err).__name__}: {err}"
                log.error("recovery sweep of %s failed: %s", self.daemon.wal_path, self._error)
            else:
                with self._lock:
                    self._sweeps += 1
                    self._error = None
                    self._last = report
                for action in report.actions:
                    log.info("recovery: %s", action.line())
                for escalation in report.new_escalations:
                    log.warning("recovery escalated: %s", escalation.line())
            self._stop.wait(self.interval)

    def signal(self) -> dict[str, Any]:
        """The daemon as a readiness signal."""
        with self._lock:
            sweeps, error, last = self._sweeps, self._error, self._last
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
