"""Where a log's recovery state lives: leases, claims, the ledger and the escalation queue.

The daemon reads and writes that state through one ``RecoveryStore`` (see
``recovery.protocols``),
chosen by the log: a file log keeps it in files beside the log
(``<log>.recovery/``, visible to the daemons of one host); a Postgres or Redis
log keeps it in the same server as the log, so daemons on different hosts see
each other's claims and successes and never run an undo twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher
from agent_saga.log.file import FileWAL
from agent_saga.log.resolve import is_url, open_log
from agent_saga.recovery.claims import try_claim
from agent_saga.recovery.escalations import queue_of
from agent_saga.recovery.fold import LogTail
from agent_saga.recovery.lease import Lease, read_lease, remove_lease
from agent_saga.recovery.ledger import FileLedger, Ledger
from agent_saga.recovery.paths import recovery_dir
from agent_saga.recovery.protocols import ClaimLike, EscalationsLike, RecoveryStore, TailLike

__all__ = ["FileStore", "recovery_store", "server_store", "verified_tail"]


class FileStore:
    """The recovery state of a file log, in ``<log>.recovery/`` beside it."""

    shared = False

    def __init__(self, path: str | os.PathLike[str], encryptor: BodyCipher | None = None) -> None:
        self.path = Path(path).absolute()
        self.location = str(self.path)
        self.encryptor = encryptor
        self._base = recovery_dir(self.path)
        self._wal: FileWAL | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def open_wal(self) -> WAL:
        if self._wal is not None and self._wal.broken is not None:
            self.close()  # broken by an earlier sweep (a full disk): start afresh
        if self._wal is None:
            # Opening the log sets aside a torn final line under its lock.
            self._wal = FileWAL(self.path, encryptor=self.encryptor)
        return self._wal

    def tail(self, encryptor: BodyCipher | None) -> TailLike:
        return LogTail(self.path, encryptor=encryptor)

    def ledger(self) -> Ledger:
        return FileLedger(self._base / "ledger.jsonl")

    def escalations(self) -> EscalationsLike:
        return queue_of(self.path)

    def read_lease(self, saga_id: str) -> Lease | None:
        return read_lease(self.path, saga_id)

    def remove_lease(self, saga_id: str) -> None:
        remove_lease(self.path, saga_id)

    def try_claim(self, saga_id: str) -> ClaimLike | None:
        return try_claim(self._base / "claims", saga_id)

    def close(self) -> None:
        wal, self._wal = self._wal, None
        if wal is not None:
            wal.close()


def server_store(wal: WAL, *, owns_wal: bool = False) -> Any:
    """The recovery store of a server log (Postgres, Redis), or None for any other log.

    ``owns_wal``: the store closes the log when it is closed.
    """
    backend = getattr(wal, "backend", None)
    if backend == "postgres":
        from agent_saga.recovery.postgres import PostgresRecovery

        return PostgresRecovery(wal, owns_wal=owns_wal)
    if backend == "redis":
        from agent_saga.recovery.redis import RedisRecovery

        return RedisRecovery(wal, owns_wal=owns_wal)
    return None


def recovery_store(target: str | os.PathLike[str] | WAL, encryptor: BodyCipher | None = None) -> RecoveryStore:
    """The store for ``target``: a log path, a log URL, or a log object."""
    if isinstance(target, WAL):
        store: RecoveryStore | None = server_store(target)
        if store is not None:
            return store
        path: Any = getattr(target, "path", None)
        if isinstance(path, Path):
            return FileStore(path, encryptor)
        raise ValueError(
            f"{target!r} keeps no recovery state (a memory log dies with its process); recover a "
            "FileWAL, PostgresWAL or RedisWAL, or give its path or URL"
        )
    if is_url(target):
        wal = open_log(target, encryptor=encryptor, create=False)
        shared: RecoveryStore = server_store(wal, owns_wal=True)
        return shared
    return FileStore(target, encryptor)


def verified_tail(
    store: RecoveryStore, encryptor: BodyCipher | None, act: str, refuse: Callable[[str], Exception]
) -> TailLike:
    """The store's log, read and chain-checked; ``refuse(line)`` is raised when it is missing or does not verify.

    ``act`` names what acts on it in that line ("a repair", "a resume").
    """
    if not store.exists():
        raise refuse(f"no log at {store.location}")
    tail = store.tail(encryptor)
    tail.refresh()
    if not tail.verdict.ok:
        raise refuse(
            f"the log {store.location} does not verify ({tail.verdict.label}); {act} acts only on a log "
            f"that does: run 'agent-saga verify --wal-path {store.location}'"
        )
    return tail
