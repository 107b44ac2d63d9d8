"""Leases: how a live saga tells the recovery daemon "still mine".

A lease is a small file per saga in ``<log>.recovery/leases/`` (0600); its
content (owner, ttl) is written once and renewal only moves its mtime. One background
thread per process renews every open saga's lease each ``ttl / 3`` seconds, so
the cost is one ``utime`` per open saga per interval and nothing per step.

Why a file and not ``LEASE_RENEWED`` records in the log: a saga idles while the
model thinks, for minutes; a record per saga per interval would grow the
evidence log with heartbeats that prove nothing about the transaction, and
compaction would have to special-case them. The log still carries the
lease length (``lease_ttl`` in ``SAGA_STARTED``) so that a saga whose lease
file never got written (the process died within the first interval) is judged
by its last record plus that length.

A PID is never consulted: PIDs are reused, an expired lease is the evidence.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_saga._once import FirstUse
from agent_saga.engine.report import RollbackReport, StepOutcome
from agent_saga.errors import WALError
from agent_saga.log.fs import FILE_MODE, private_dir
from agent_saga.recovery.escalations import escalate, escalate_late, escalate_rollback
from agent_saga.recovery.fold import DEFAULT_LEASE_TTL, SagaView
from agent_saga.recovery.paths import file_log_path, recovery_dir

__all__ = [
    "Lease",
    "LeaseKeeper",
    "LeaseLifecycle",
    "configure_leases",
    "install_leases",
    "keeper_thread",
    "lease_keeper",
    "lease_path",
    "owner_expiry",
    "read_lease",
    "recovery_dir",
    "remove_lease",
]

log = logging.getLogger("agent_saga.recovery")

_ENV_TTL = "AGENT_SAGA_LEASE_TTL"
_DEFAULT_TTL = 30.0


def lease_path(wal_path: str | os.PathLike[str], saga_id: str) -> Path:
    return recovery_dir(wal_path) / "leases" / saga_id


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as found on disk: when it was last renewed and for how long it holds."""

    saga_id: str
    owner: str
    ttl: float
    renewed_at: float  # seconds since the epoch (the file's mtime)

    @property
    def expires_at(self) -> float:
        return self.renewed_at + self.ttl


def read_lease(wal_path: str | os.PathLike[str], saga_id: str) -> Lease | None:
    """The lease file of ``saga_id``, or None if there is none (or it is unreadable)."""
    path = lease_path(wal_path, saga_id)
    try:
        with open(path, "rb") as fh:
            renewed = os.fstat(fh.fileno()).st_mtime
            data: Any = json.loads(fh.read() or b"{}")
    except (FileNotFoundError, ValueError):
        return None
    ttl = data.get("ttl") if isinstance(data, dict) else None
    if not isinstance(ttl, (int, float)) or ttl <= 0:
        return None
    return Lease(saga_id, str(data.get("owner", "")), float(ttl), renewed)


def remove_lease(wal_path: str | os.PathLike[str], saga_id: str) -> None:
    """Delete a lease file (the daemon does this for a saga it has finished)."""
    try:
        lease_path(wal_path, saga_id).unlink()
    except FileNotFoundError:
        pass


def owner_expiry(view: SagaView, lease: Lease | None) -> float:
    """When the owner's hold on ``view`` runs out (seconds since the epoch, before any grace).

    The later of: the lease's renewal + its ttl, the owner's last record + the ttl the
    saga started with (or the lease's, or the default, if the log does not say).
    """
    ttl = view.lease_ttl or (lease.ttl if lease is not None else DEFAULT_LEASE_TTL)
    expires = view.owner_ts / 1e6 + ttl
    if lease is not None:
        expires = max(expires, lease.expires_at)
    return expires


def keeper_thread(thread: threading.Thread | None, run: Callable[[], None], name: str) -> threading.Thread:
    """``thread`` if it is alive, else a new daemon thread ``name`` started on ``run``: a keeper's
    renewing thread, made on its first lease and again once it is gone (a forked child has none)."""
    if thread is not None and thread.is_alive():
        return thread
    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread


def _ttl_from_env() -> float:
    raw = os.environ.get(_ENV_TTL)
    if not raw:
        return _DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        raise ValueError(f"{_ENV_TTL}={raw!r} is not a number of seconds; unset it or give e.g. 30") from None
    if ttl <= 0:
        raise ValueError(f"{_ENV_TTL}={raw!r} must be a positive number of seconds")
    return ttl


class LeaseKeeper:
    """Holds and renews the leases of this process's open sagas on one thread.

    ``clock`` (seconds since the epoch) is the time written into a lease when it
    is renewed; with ``background=False`` no thread is started and renewal happens
    only when :meth:`tick` is called. Together they let a test move time by hand
    (the daemon takes the same kind of clock) instead of sleeping.
    """

    def __init__(
        self, ttl: float | None = None, *, clock: Callable[[], float] = time.time, background: bool = True
    ) -> None:
        self.ttl = _ttl_from_env() if ttl is None else float(ttl)
        if self.ttl <= 0:
            raise ValueError(f"a lease ttl must be a positive number of seconds, got {ttl!r}")
        self.clock = clock
        self.background = background
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._held: dict[tuple[Path, str], bool] = {}  # -> lease file written yet
        self._thread: threading.Thread | None = None
        self.renewals = 0  # lease files touched, for tests and benchmarks

    def set_ttl(self, ttl: float) -> None:
        """Lease length for sagas held from now on; renewal speeds up or slows down at once."""
        with self._lock:
            self.ttl = ttl
            self._wake.notify()

    @property
    def interval(self) -> float:
        return self.ttl / 3

    def hold(self, wal_path: Path, saga_id: str) -> float:
        """Start holding a lease. No I/O: the keeper writes it at its next tick.

        Until then the saga's own start record stands in for it (the daemon counts
        a lease from the saga's last record too), and a saga shorter than one
        interval never costs a file at all.
        """
        with self._lock:
            self._held[(wal_path, saga_id)] = False
            if self.background:
                self._thread = keeper_thread(self._thread, self._run, "agent-saga-leases")
        return self.ttl

    def release(self, wal_path: Path, saga_id: str) -> None:
        """Stop renewing, and delete the lease file if one was written.

        Deleted now rather than at the keeper's next tick: a process that ends
        before that tick would otherwise leave lease files of finished sagas behind.
        """
        with self._lock:
            written = self._held.pop((wal_path, saga_id), None)
            if written:
                remove_lease(wal_path, saga_id)

    def abandon(self, wal_path: Path, saga_id: str) -> None:
        """Stop renewing this saga's lease at once, and keep its file.

        For a saga this process can no longer finish (its rollback was cut short):
        the lease then runs out on its own and a recovery daemon takes the saga
        over, instead of reading it as live for as long as this process lives.
        No renewal happens after this returns (renewals hold the same lock).
        """
        with self._lock:
            self._held.pop((wal_path, saga_id), None)

    def held(self) -> list[tuple[Path, str]]:
        with self._lock:
            return list(self._held)

    def tick(self) -> None:
        """One round of renewal: write each held lease not yet on disk, renew the others."""
        with self._lock:
            keys = list(self._held)
        for key in keys:
            # One key at a time under the lock, so release() and abandon() take effect at once.
            with self._lock:
                written = self._held.get(key)
                if written is None:
                    continue  # released or abandoned meanwhile
                if not (written and self._touch(*key)):
                    self._held[key] = self._write(*key)

    def _forget_after_fork(self) -> None:
        # A forked child owns none of its parent's sagas; renewing them would keep
        # them looking alive after the parent died.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._held = {}
        self._thread = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}"

    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.wait(self.interval)
            self.tick()

    def _write(self, wal_path: Path, saga_id: str) -> bool:
        """Write a lease file (0600, atomically); whether it is now on disk."""
        path = lease_path(wal_path, saga_id)
        tmp = path.with_name(f".{saga_id}.{os.getpid()}.tmp")
        data = json.dumps({"saga": saga_id, "owner": self.owner, "ttl": self.ttl}).encode()
        try:
            private_dir(path.parent)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
            try:
                os.write(fd, data)
                now = self.clock()
                os.utime(fd, (now, now))
            finally:
                os.close(fd)
            os.replace(tmp, path)  # a reader never sees a half-written lease
        except OSError:
            # The log's start record still carries lease_ttl, so the daemon judges the
            # saga by its last record; a missing lease file never makes it look dead sooner.
            return False
        self.renewals += 1
        return True

    def _touch(self, wal_path: Path, saga_id: str) -> bool:
        """Renew a written lease; False if its file is gone (then it is written again)."""
        now = self.clock()
        try:
            os.utime(lease_path(wal_path, saga_id), (now, now))
        except FileNotFoundError:
            return False
        except OSError:
            return True  # unrenewable for now; the log's last record still speaks for it
        self.renewals += 1
        return True


_keeper = FirstUse(LeaseKeeper)


def _reset_after_fork() -> None:
    keeper = _keeper.made
    if keeper is not None:
        keeper._forget_after_fork()


os.register_at_fork(after_in_child=_reset_after_fork)


def lease_keeper() -> LeaseKeeper:
    """This process's lease keeper (created on first use)."""
    return _keeper.get()


def configure_leases(ttl: float) -> LeaseKeeper:
    """Set the lease length for sagas started from now on (default 30 s or $AGENT_SAGA_LEASE_TTL).

    A longer lease delays recovery after a crash; a shorter one risks the daemon
    unwinding a saga whose process was merely paused longer than ``ttl``.
    """
    if not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ValueError(f"a lease ttl must be a positive number of seconds, got {ttl!r}")
    keeper = lease_keeper()
    keeper.set_ttl(float(ttl))
    return keeper


class LeaseLifecycle:
    """Recovery's side of the engine's lifecycle port: leases and in-process escalations.

    * ``started``: every saga on a file log holds a lease while it runs; the ttl is
      added to its start record.
    * ``ended``: the end record is durable. A rollback that ended NOT clean is
      filed in the escalation queue (once, see ``escalate_rollback``); the lease
      is released, unless the rollback left steps in flight: then it is held until
      the last of them lands (``late``), whose ``in-flight`` escalation is answered.
    * ``abandoned``: a rollback could not finish (a broken log, a cancellation).
      Renewal stops at once and the lease file is kept, so a daemon takes the saga
      over once it runs out; an escalation says so if the log still takes records.
    * ``late`` / ``stray``: a step the rollback left in flight landed (its ``in-flight``
      escalation is answered, the lease released with the last one); a call that outlived
      its step returned after the rollback had settled it (escalated, ``late-commit``).
    * ``frozen``: a quarantine stopped the saga. Renewal stops the same way, with no
      escalation (a person froze it and knows): once the lease runs out, the saga can
      be repaired while this process lives on; the daemon leaves it alone while quarantined.

    All three run on the caller's thread and never raise: a failure to escalate is
    logged, and the daemon escalates whatever the log shows when it takes over.
    ``keeper`` defaults to this process's keeper.
    """

    def __init__(self, keeper: LeaseKeeper | None = None) -> None:
        self._keeper = keeper

    @property
    def keeper(self) -> LeaseKeeper:
        return self._keeper or lease_keeper()

    def started(self, saga_id: str, wal: object) -> Mapping[str, Any] | None:
        path = file_log_path(wal)
        if path is None:
            return None
        return {"lease_ttl": self.keeper.hold(path, saga_id)}

    def ended(self, saga_id: str, wal: object, report: RollbackReport | None = None) -> None:
        path = file_log_path(wal)
        if path is None:
            return
        if report is not None and not report.clean:
            self._escalate(wal, saga_id, report, abandoned=False)
        if report is None or not report.in_flight:
            self.keeper.release(path, saga_id)

    def late(self, saga_id: str, wal: object, step: int, outcome: StepOutcome | None, remaining: int) -> None:
        path = file_log_path(wal)
        if path is None:
            return
        try:
            escalate_late(wal, saga_id, step, outcome)  # type: ignore[arg-type]  # a file log: a WAL
        except (OSError, WALError) as err:
            log.error("saga %s: could not answer step %d's in-flight escalation (%s)", saga_id, step, err)
        if remaining == 0:
            self.keeper.release(path, saga_id)

    def stray(self, saga_id: str, wal: object, step: int, detail: str) -> None:
        if file_log_path(wal) is None:
            return
        try:
            escalate(wal, saga_id, step, "late-commit", detail)  # type: ignore[arg-type]  # a file log: a WAL
        except (OSError, WALError) as err:
            log.error("saga %s: could not escalate step %d's late commit (%s)", saga_id, step, err)

    def abandoned(self, saga_id: str, wal: object, report: RollbackReport | None = None) -> None:
        path = file_log_path(wal)
        if path is None:
            return
        self.keeper.abandon(path, saga_id)
        if getattr(wal, "broken", None) is None and not getattr(wal, "closed", False):
            self._escalate(wal, saga_id, report, abandoned=True)

    def frozen(self, saga_id: str, wal: object) -> None:
        path = file_log_path(wal)
        if path is not None:
            self.keeper.abandon(path, saga_id)

    @staticmethod
    def _escalate(wal: Any, saga_id: str, report: RollbackReport | None, *, abandoned: bool) -> None:
        try:
            escalate_rollback(wal, saga_id, report, abandoned=abandoned)
        except (OSError, WALError) as err:
            log.error("saga %s: could not file its escalation (%s); the log still shows what is left", saga_id, err)


def install_leases() -> None:
    """Make every saga hold a lease (done by ``import agent_saga``)."""
    from agent_saga.engine.ports import add_lifecycle

    add_lifecycle(_LIFECYCLE)


_LIFECYCLE = LeaseLifecycle()
