"""What a recovery store provides: the daemon's view of a log's recovery state.

``recovery.stores`` picks the store for a log (files beside a file log, tables or
keys beside a server log); each store, and what it hands out, has these shapes.
"""

from __future__ import annotations

from typing import Protocol

from agent_saga.log.base import WAL
from agent_saga.log.chain import VerifyReport
from agent_saga.log.codec import BodyCipher
from agent_saga.recovery.escalations import Escalation
from agent_saga.recovery.fold import SagaView
from agent_saga.recovery.lease import Lease
from agent_saga.recovery.ledger import Ledger

__all__ = ["ClaimLike", "EscalationsLike", "RecoveryStore", "TailLike"]


class ClaimLike(Protocol):
    """A held claim on one saga (see ``recovery.claims``)."""

    def release(self, *, remove: bool = False) -> None: ...


class TailLike(Protocol):
    """An incremental, chain-checked fold of a log (see ``recovery.fold.LogTail``)."""

    @property
    def sagas(self) -> dict[str, SagaView]: ...

    @property
    def verdict(self) -> VerifyReport: ...

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
        """The log to append the daemon's records to (the store closes it in :meth:`close`).

        Called before each sweep that acts; a file log an earlier sweep broke (a
        full disk) is opened afresh.
        """
        ...

    def tail(self, encryptor: BodyCipher | None) -> TailLike: ...

    def ledger(self) -> Ledger: ...

    def escalations(self) -> EscalationsLike: ...

    def read_lease(self, saga_id: str) -> Lease | None: ...

    def remove_lease(self, saga_id: str) -> None: ...

    def try_claim(self, saga_id: str) -> ClaimLike | None: ...

    def close(self) -> None: ...
