"""PostgresSnapshotStore: durable snapshots in the Postgres database a fleet's log already uses.

One row per (store, saga, SHA-256) in ``agent_saga_snapshots`` (created on first use).
``put`` returns once its transaction committed: durable as the server's
``synchronous_commit`` makes any commit.
"""

from __future__ import annotations

import threading
from typing import Any

from agent_saga.engine.snapshot import check_digest, check_saga_id, digest_of
from agent_saga.errors import CompensationError, ConfigurationError
from agent_saga.log.postgres import import_psycopg

__all__ = ["PostgresSnapshotStore"]

_TABLE = """CREATE TABLE IF NOT EXISTS agent_saga_snapshots (
    store text NOT NULL, saga text NOT NULL, digest text NOT NULL, data bytea NOT NULL,
    PRIMARY KEY (store, saga, digest))"""


class PostgresSnapshotStore:
    """Snapshots in Postgres at ``url`` (a libpq URL); ``name`` is how the log refers to this store."""

    def __init__(self, url: str, *, name: str = "postgres") -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"PostgresSnapshotStore needs a non-empty name=, got {name!r}")
        self.name = name
        self._psycopg = import_psycopg()
        self._url = url
        self._lock = threading.Lock()
        self._conn: Any = None

    def __repr__(self) -> str:
        return f"PostgresSnapshotStore(name={self.name!r})"

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self._psycopg.connect(self._url, autocommit=True)
            with self._conn.transaction():
                # Two first users at once: the advisory lock serialises the CREATE.
                self._conn.execute("SELECT pg_advisory_xact_lock(hashtext('agent_saga_snapshots'))")
                self._conn.execute(_TABLE)
        return self._conn

    def put(self, saga_id: str, data: bytes) -> str:
        digest = digest_of(data)
        with self._lock:
            self._connection().execute(
                "INSERT INTO agent_saga_snapshots (store, saga, digest, data) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT DO NOTHING", (self.name, check_saga_id(saga_id), digest, data),
            )
        return digest

    def get(self, saga_id: str, digest: str) -> bytes:
        with self._lock:
            row = self._connection().execute(
                "SELECT data FROM agent_saga_snapshots WHERE store = %s AND saga = %s AND digest = %s",
                (self.name, check_saga_id(saga_id), check_digest(digest)),
            ).fetchone()
        if row is None:
            raise KeyError(f"snapshot {digest} of saga {saga_id} is not in {self!r}")
        data = bytes(row[0])
        if digest_of(data) != digest:
            raise CompensationError(f"snapshot {digest} of saga {saga_id} in {self!r} does not match its hash")
        return data

    def sagas(self) -> list[str]:
        with self._lock:
            rows = self._connection().execute(
                "SELECT DISTINCT saga FROM agent_saga_snapshots WHERE store = %s ORDER BY saga", (self.name,),
            ).fetchall()
        return [str(row[0]) for row in rows]

    def delete_saga(self, saga_id: str) -> int:
        with self._lock:
            cursor = self._connection().execute(
                "DELETE FROM agent_saga_snapshots WHERE store = %s AND saga = %s", (self.name, check_saga_id(saga_id)),
            )
        return int(cursor.rowcount)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


