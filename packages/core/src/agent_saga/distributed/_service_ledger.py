"""The service's ledger: what it did for each idempotency key, so it does it once, and undoes it once.

One SQLite file (the standard library's; every transition one ``UPDATE ... WHERE state = ?``
in its own transaction, so two requests, two workers, or a restart after ``kill -9`` agree):

* ``running`` — a request with this key is being served; another one gets 409;
* ``done`` — served: the response (status, content type, body) and the token are kept, and
  a retry with the same key gets them back without running the route again;
* ``failed`` — the route raised; its part was rolled back in the service's log; a retry
  gets the same answer;
* ``fenced`` — the key was asked about before any request with it arrived: it never ran,
  and now never will (a late request is refused), so "it did not happen" stays true;
* ``compensating`` -> ``compensated`` — the undo is running / ran (once).

A ``running`` entry left by a process that died stays ``running`` (the caller's question
gets "cannot tell"); see docs/DISTRIBUTED.md.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from agent_saga.distributed._header import SagaContext

__all__ = ["Entry", "Ledger"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS steps (
    key TEXT PRIMARY KEY,
    saga TEXT NOT NULL,
    step INTEGER NOT NULL,
    state TEXT NOT NULL,
    status INTEGER,
    content_type TEXT,
    body BLOB,
    token TEXT
)
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """One key's row."""

    key: str
    saga: str
    step: int
    state: str
    status: int | None = None
    content_type: str | None = None
    body: bytes | None = None
    token: str | None = None


class Ledger:
    """The exactly-once ledger of one service, in the SQLite file ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._local = threading.local()
        with self._tx() as db:
            db.execute(_SCHEMA)

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            # One connection per thread; autocommit off, each transition its own IMMEDIATE transaction.
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=True)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            self._local.db = db
        return db

    def _tx(self) -> _Transaction:
        return _Transaction(self._db())

    def get(self, key: str) -> Entry | None:
        row = self._db().execute(
            "SELECT key, saga, step, state, status, content_type, body, token FROM steps WHERE key = ?", (key,)
        ).fetchone()
        return Entry(*row) if row is not None else None

    def claim(self, context: SagaContext) -> Entry | None:
        """Start serving ``context.key``: None if this request claimed it, else the entry that stands."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO steps (key, saga, step, state) VALUES (?, ?, ?, 'running')",
                (context.key, context.saga, context.step),
            )
            if cursor.rowcount == 1:
                return None
        return self.get(context.key)

    def finish(self, key: str, state: str, status: int, content_type: str | None, body: bytes,
               token: str | None) -> None:
        """The claimed key was served (``done``) or its route raised (``failed``)."""
        with self._tx() as db:
            db.execute(
                "UPDATE steps SET state = ?, status = ?, content_type = ?, body = ?, token = ? "
                "WHERE key = ? AND state = 'running'",
                (state, status, content_type, body, token, key),
            )

    def fence(self, key: str) -> Entry:
        """The entry for ``key``; one that never ran is fenced first, so it never will."""
        with self._tx() as db:
            db.execute("INSERT OR IGNORE INTO steps (key, saga, step, state) VALUES (?, '', 0, 'fenced')", (key,))
        entry = self.get(key)
        assert entry is not None
        return entry

    def begin_undo(self, key: str) -> bool:
        """Move ``key`` from ``done`` to ``compensating``; True if this call did (it runs the undo)."""
        with self._tx() as db:
            return db.execute(
                "UPDATE steps SET state = 'compensating' WHERE key = ? AND state = 'done'", (key,)
            ).rowcount == 1

    def end_undo(self, key: str, undone: bool) -> None:
        """The undo ran (``compensated``) or failed (back to ``done``, so it can be asked again)."""
        with self._tx() as db:
            db.execute(
                "UPDATE steps SET state = ? WHERE key = ? AND state = 'compensating'",
                ("compensated" if undone else "done", key),
            )

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind: object, error: object, tb: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
