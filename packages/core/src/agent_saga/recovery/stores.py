"""Where a log's recovery state lives: leases, claims, the ledger and the escalation queue.

The daemon reads and writes that state through one :class:`RecoveryStore`,
chosen by the log: a file log keeps it in files beside the log
(``<log>.recovery/``, visible to the daemons of one host); a Postgres or Redis
log keeps it in the same server as the log, so daemons on different hosts see
each other's claims and successes and never run an undo twice.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher
from agent_saga.log.records import Record
from agent_saga.log.resolve import ServerWAL, is_url, open_log
from agent_saga.log.server import open_stored
from agent_saga.recovery.claims import try_claim
from agent_saga.recovery.escalations import Escalation, EscalationQueue
from agent_saga.recovery.fold import LogTail, SagaView, _Folder
from agent_saga.recovery.lease import Lease, read_lease, recovery_dir, remove_lease
from agent_saga.recovery.ledger import FileLedger, Ledger

__all__ = [
    "ClaimLike",
    "EscalationsLike",
    "FileStore",
    "RecoveryStore",
    "ServerTail",
    "TailLike",
    "recovery_store",
    "server_store",
]


class ClaimLike(Protocol):
    """A held claim on one saga (see ``recovery.claims``)."""

    def release(self, *, remove: bool = False) -> None: ...


class TailLike(Protocol):
    """An incremental fold of a log (see ``recovery.fold.LogTail``)."""

    @property
    def sagas(self) -> dict[str, SagaView]: ...

    def refresh(self) -> int: ...


class EscalationsLike(Protocol):
    """The human queue (see ``recovery.escalations.EscalationQueue``)."""

    def add(self, saga: str, step: int | None, kind: str, detail: str) -> tuple[Escalation, bool]: ...

    def resolve(self, eid: str, note: str = "") -> Escalation: ...

    def all(self) -> list[Escalation]: ...

    def pending(self) -> list[Escalation]: ...


class RecoveryStore(Protocol):
    """Everything a recovery daemon keeps about one log, and the log itself."""

    location: str
    #: True when daemons on other hosts see the same claims, ledger and queue.
    shared: bool

    def exists(self) -> bool: ...

    def open_wal(self) -> WAL:
        """The log to append the daemon's records to (the store closes it in :meth:`close`)."""
        ...

    def tail(self, encryptor: BodyCipher | None) -> TailLike: ...

    def ledger(self) -> Ledger: ...

    def escalations(self) -> EscalationsLike: ...

    def read_lease(self, saga_id: str) -> Lease | None: ...

    def remove_lease(self, saga_id: str) -> None: ...

    def try_claim(self, saga_id: str) -> ClaimLike | None: ...

    def close(self) -> None: ...


class FileStore:
    """The recovery state of a file log, in ``<log>.recovery/`` beside it."""

    shared = False

    def __init__(self, path: str | os.PathLike[str], encryptor: BodyCipher | None = None) -> None:
        self.path = Path(path).absolute()
        self.location = str(self.path)
        self.encryptor = encryptor
        self._base = recovery_dir(self.path)
        self._wal: WAL | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def open_wal(self) -> WAL:
        from agent_saga.log.file import FileWAL

        if self._wal is None:
            # Opening the log first sets aside a torn final line under its lock.
            self._wal = FileWAL(self.path, encryptor=self.encryptor)
        return self._wal

    def tail(self, encryptor: BodyCipher | None) -> TailLike:
        return LogTail(self.path, encryptor=encryptor)

    def ledger(self) -> Ledger:
        return FileLedger(self._base / "ledger.jsonl")

    def escalations(self) -> EscalationsLike:
        return EscalationQueue(self._base / "escalations.jsonl")

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


class ServerTail:
    """An incremental fold of a server log: only records past the last seq seen are read.

    A compaction or redaction (the head's rewrite count moved) starts the fold over.
    An encrypted record this reader has no key for is folded without its body, so
    its saga is escalated as unreadable, never guessed at.
    """

    def __init__(self, wal: ServerWAL, encryptor: BodyCipher | None = None) -> None:
        self.wal = wal
        self.encryptor = encryptor
        self._folder = _Folder()
        self._seq = 0
        self._rewrites: int | None = None
        self.records = 0

    @property
    def sagas(self) -> dict[str, SagaView]:
        return self._folder.sagas

    def refresh(self) -> int:
        _, _, rewrites = self.wal.head()
        if rewrites != self._rewrites:
            self._folder, self._seq, self.records, self._rewrites = _Folder(), 0, 0, rewrites
        count = 0
        for seq, line in self.wal.lines_after(self._seq):
            self._folder.feed(self._open(open_stored(line, self.wal.location)))
            self._seq = seq
            count += 1
        self.records += count
        return count

    def _open(self, record: Record) -> Record:
        if "enc" not in record:
            return record
        from agent_saga.log.crypto import EncryptionKeyMissing, open_record

        try:
            return open_record(record, self.encryptor, self.wal.location)
        except EncryptionKeyMissing:
            return record


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
