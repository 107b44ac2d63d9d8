"""The small interface the engine writes through, and the in-memory log.

A log assigns each appended record a *ticket* (a number that only grows in this
process) and makes it durable some time later; ``barrier(ticket)`` waits for that.
Backends differ in how durable "durable" is (``WAL.durable``); the engine never
treats a non-durable log as a crash-safe one.
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from agent_saga.errors import WALClosed
from agent_saga.log.records import Record

__all__ = ["WAL", "BaseWAL", "MemoryWAL"]


class WAL(abc.ABC):
    """A write-ahead log as the engine sees it."""

    #: True when a reached barrier means the records survive a killed process.
    durable: bool = False
    #: Where the log lives, for messages and for the recovery daemon.
    location: str = ""
    #: True when :meth:`append` encodes the record on the caller's thread and refuses one the log
    #: cannot hold (``WALRefused``), queueing nothing: the engine then lets that encoding check
    #: what it would otherwise walk first. A subclass whose append bypasses that must say False.
    encodes_on_append: bool = False

    @abc.abstractmethod
    def append(
        self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None
    ) -> int:
        """Queue one record and return its ticket. Never waits on the disk."""

    @abc.abstractmethod
    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        """Block until the record with ``ticket`` (default: every record so far) is durable.

        Raises ``WALStalled`` after a bounded wait, or the WALError that broke the log.
        """

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        """The awaitable form of :meth:`barrier`; never blocks the event loop."""
        self.barrier(ticket, timeout)

    @abc.abstractmethod
    def records(self) -> Iterator[Record]:
        """Every record of the log, oldest first (reads what is durable or queued)."""

    def read_all(self) -> list[Record]:
        """Every record, oldest first, as a list (the 2.x name; :meth:`records` streams them).

        A server log (Postgres, Redis) reads its records in pages, so the peak of one
        read is a page, not the whole history, until the list is built here.
        """
        return list(self.records())

    def read_since(self, gseq: int) -> Iterator[Record]:
        """The records whose ``seq`` is greater than ``gseq``, oldest first: a cursor.

        Pass the ``seq`` of the last record you handled; ``read_since(0)`` is every
        record. It filters :meth:`records`, so a read still walks the log from its start.
        """
        if isinstance(gseq, bool) or not isinstance(gseq, int) or gseq < 0:
            raise ValueError(f"read_since(gseq) needs a record's seq (an int >= 0), got {gseq!r}")
        return (record for record in self.records() if record.get("seq", 0) > gseq)

    def close(self) -> None:  # noqa: B027 - most logs have nothing to release
        """Make everything durable and release resources. Idempotent."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


#: The 2.x (and the seed's) name of the log interface: the same class as :class:`WAL`.
BaseWAL = WAL


class MemoryWAL(WAL):
    """A log that lives in this process only: for tests and throwaway runs.

    It is never chosen by default, because a crash takes it with the process and
    with it every compensation it was holding.
    """

    durable = False

    def __init__(self, name: str = "memory") -> None:
        self.location = f"memory:{name}"
        self._records: list[Record] = []
        self._lock = threading.Lock()
        self._closed = False

    def append(
        self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None
    ) -> int:
        with self._lock:
            if self._closed:
                raise WALClosed(f"{self!r} is closed")
            seq = len(self._records) + 1
            record: Record = {"seq": seq, "ts": time.time(), "type": str(type), "saga": saga}
            if step is not None:
                record["step"] = step
            record["body"] = dict(body)
            self._records.append(record)
            return seq

    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        if self._closed:
            return

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        return

    def records(self) -> Iterator[Record]:
        with self._lock:
            snapshot = list(self._records)
        return iter(snapshot)

    def close(self) -> None:
        self._closed = True
