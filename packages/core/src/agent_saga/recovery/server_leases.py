"""Leases for sagas on a server log (Postgres, Redis): "still mine", told to daemons on any host.

The file keeper (``recovery.lease``) renews a file per saga; a server log keeps
its leases beside the log instead (``recovery.postgres`` / ``recovery.redis``),
renewed on the server's clock so that hosts whose clocks disagree still agree on
who is alive. The rules are the file keeper's: holding a lease costs no I/O on
the caller's thread (one background thread writes and renews, every ``ttl / 3``,
all of a store's leases in one call); the saga's start record carries
``lease_ttl``, so a saga that died before its first renewal is judged by its
last record; an ended saga's lease is deleted; an abandoned saga's is kept to
run out, so a daemon takes the saga over. A server the keeper cannot reach is
retried at the next tick: a lease only ever errs towards "alive" for one ttl.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from agent_saga.recovery.lease import keeper_thread, lease_keeper
from agent_saga.recovery.stores import server_store

__all__ = ["ServerLeases", "install_server_leases", "server_leases"]

log = logging.getLogger("agent_saga.recovery")


class ServerLeases:
    """The engine lifecycle hook that holds leases for sagas on server logs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._wals: dict[int, Any] = {}  # id(wal) -> the log (kept, so the id stays its own)
        self._stores: dict[int, Any] = {}  # id(wal) -> its recovery store (made and used on the keeper thread)
        self._held: dict[tuple[int, str], float] = {}  # (id(wal), saga) -> ttl
        self._released: list[tuple[int, str]] = []
        self._thread: threading.Thread | None = None
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.renewals = 0

    # -- the Lifecycle interface -------------------------------------------------------

    def started(self, saga_id: str, wal: Any) -> Mapping[str, Any] | None:
        if getattr(wal, "backend", None) not in ("postgres", "redis"):
            return None
        ttl = lease_keeper().ttl
        with self._lock:
            self._wals.setdefault(id(wal), wal)
            self._held[(id(wal), saga_id)] = ttl
            self._thread = keeper_thread(self._thread, self._run, "agent-saga-server-leases")
        return {"lease_ttl": ttl}

    def ended(self, saga_id: str, wal: Any, report: object = None) -> None:
        if getattr(report, "in_flight", None):
            return  # held until the steps left in flight land (``late``)
        self._release(saga_id, wal)

    def late(self, saga_id: str, wal: Any, step: int, outcome: object, remaining: int) -> None:
        if remaining == 0:
            self._release(saga_id, wal)

    def stray(self, saga_id: str, wal: Any, step: int, detail: str) -> None:
        return  # the log holds the late commit; a server log's escalations are the daemon's

    def _release(self, saga_id: str, wal: Any) -> None:
        with self._lock:
            if self._held.pop((id(wal), saga_id), None) is not None:
                self._released.append((id(wal), saga_id))
                self._wake.notify()

    def abandoned(self, saga_id: str, wal: Any, report: object = None) -> None:
        with self._lock:
            self._held.pop((id(wal), saga_id), None)  # stop renewing; the lease runs out

    def frozen(self, saga_id: str, wal: Any) -> None:
        self.abandoned(saga_id, wal)  # quarantined: no more steps here, so no more renewals

    def held(self) -> list[str]:
        with self._lock:
            return [saga for _, saga in self._held]

    # -- the keeper thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._released:
                    self._wake.wait(lease_keeper().interval)
                released, self._released = self._released, []
                by_wal: dict[int, list[str]] = {}
                ttls: dict[int, float] = {}
                for (wal_id, saga), ttl in self._held.items():
                    by_wal.setdefault(wal_id, []).append(saga)
                    ttls[wal_id] = ttl
                wals = dict(self._wals)
            for wal_id, saga in released:
                self._call(wals[wal_id], "remove_lease", saga)
            for wal_id, sagas in by_wal.items():
                if self._call(wals[wal_id], "renew_leases", sagas, self.owner, ttls[wal_id]):
                    self.renewals += len(sagas)

    def _call(self, wal: Any, method: str, *args: Any) -> bool:
        try:
            store = self._stores.get(id(wal))
            if store is None:
                store = self._stores[id(wal)] = server_store(wal)
            getattr(store, method)(*args)
        except Exception as err:  # noqa: BLE001 - the server is away: the log's records still speak
            log.warning("%s: could not %s (%s); retrying at the next tick", wal, method.replace("_", " "), err)
            return False
        return True

    def _forget_after_fork(self) -> None:
        # A forked child owns none of its parent's sagas.
        self.__init__()  # type: ignore[misc]


_leases = ServerLeases()
os.register_at_fork(after_in_child=_leases._forget_after_fork)


def server_leases() -> ServerLeases:
    """This process's keeper of server-log leases."""
    return _leases


def install_server_leases() -> None:
    """Make every saga on a server log hold a lease (done by ``import agent_saga``)."""
    from agent_saga.engine.ports import add_lifecycle

    add_lifecycle(_leases)
