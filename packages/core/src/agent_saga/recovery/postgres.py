"""The recovery state of a PostgresWAL, in the same database as the log.

* claims: a session advisory lock per saga (``pg_try_advisory_lock``), held on
  the daemon's connection; Postgres drops it when that connection ends, so a
  daemon that died never strands a saga;
* the ledger: ``<table>_ledger``, attempts, failures and successes per
  compensation key, each row committed before the handler runs (attempt) or
  right after it returned (done);
* leases: ``<table>_leases``, renewed by the writing process's keeper
  (``recovery.server_leases``) and read against the database's own clock;
* escalations: ``<table>_escalations``, one row per (saga, step, kind).
"""

from __future__ import annotations

import time
from typing import Any

from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher
from agent_saga.recovery.escalations import KINDS, Escalation, escalation_id
from agent_saga.recovery.fold import ServerTail
from agent_saga.recovery.lease import Lease
from agent_saga.recovery.ledger import KeyState
from agent_saga.recovery.protocols import ClaimLike, EscalationsLike, TailLike

__all__ = ["PostgresClaim", "PostgresEscalations", "PostgresLedger", "PostgresRecovery"]


class PostgresRecovery:
    """Leases, claims, ledger and escalation queue of one PostgresWAL."""

    shared = True

    def __init__(self, wal: Any, *, owns_wal: bool = False) -> None:
        self.wal = wal
        self.location = str(wal.location)
        self.owns_wal = owns_wal
        self._psycopg = wal._psycopg
        self.sql = _Statements(self._psycopg, wal.table)
        self._conn: Any = None
        conn = self.connection()
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agent-saga-schema:{wal.table}",))
            for statement in self.sql.schema:
                conn.execute(statement)

    def connection(self) -> Any:
        """The store's connection (autocommit), reconnected if it broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self.wal.connect()
        return self._conn

    def run(self, statement: Any, params: tuple[Any, ...]) -> Any:
        return self.connection().execute(statement, params)

    # -- the RecoveryStore interface --------------------------------------------------

    def exists(self) -> bool:
        return True  # opened with create=False, or created by the caller

    def open_wal(self) -> WAL:
        return self.wal  # type: ignore[no-any-return]

    def tail(self, encryptor: BodyCipher | None) -> TailLike:
        return ServerTail(self.wal, encryptor)

    def ledger(self) -> PostgresLedger:
        return PostgresLedger(self)

    def escalations(self) -> EscalationsLike:
        return PostgresEscalations(self)

    def read_lease(self, saga_id: str) -> Lease | None:
        row = self.run(self.sql.read_lease, (self.wal.log_name, saga_id)).fetchone()
        if row is None:
            return None
        owner, ttl, renewed, server_now = row
        # The database's clock wrote it; read it on ours: renewed + (our now - its now).
        return Lease(saga_id, str(owner), float(ttl), float(renewed) + time.time() - float(server_now))

    def remove_lease(self, saga_id: str) -> None:
        self.run(self.sql.delete_lease, (self.wal.log_name, saga_id))

    def renew_leases(self, saga_ids: list[str], owner: str, ttl: float) -> None:
        """Write or renew the leases of ``saga_ids`` (the writing process's keeper calls this)."""
        self.run(self.sql.renew_leases, (self.wal.log_name, saga_ids, owner, ttl))

    def try_claim(self, saga_id: str) -> ClaimLike | None:
        key = f"agent-saga-claim:{self.wal.table}:{self.wal.log_name}:{saga_id}"
        conn = self.connection()
        if not conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (key,)).fetchone()[0]:
            return None
        return PostgresClaim(conn, key)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()  # drops any advisory lock still held
            self._conn = None
        if self.owns_wal:
            self.wal.close()


class PostgresClaim:
    """A held advisory lock on one saga."""

    def __init__(self, conn: Any, key: str) -> None:
        self._conn = conn
        self.key = key
        self.held = True

    def release(self, *, remove: bool = False) -> None:
        if not self.held:
            return
        self.held = False
        if not self._conn.closed:
            self._conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (self.key,))


class PostgresLedger:
    """The recovery ledger in a table: every daemon of the log, on any host, sees every entry."""

    def __init__(self, store: PostgresRecovery) -> None:
        self.store = store
        self.shared = True

    def refresh(self) -> None:
        return None  # every state() reads the table

    def state(self, key: str) -> KeyState:
        row = self.store.run(self.store.sql.key_state, (self.store.wal.log_name, key)).fetchone()
        attempts, failures, done, last_error, last_failed_at = row
        return KeyState(int(attempts), int(failures), bool(done), str(last_error or ""), float(last_failed_at or 0.0))

    def _write(self, event: str, key: str, saga: str, step: int, by: str, error: str = "") -> None:
        self.store.run(self.store.sql.add_entry, (self.store.wal.log_name, key, event, saga, step, by, error))

    def attempt(self, key: str, saga: str, step: int, by: str) -> None:
        self._write("attempt", key, saga, step, by)

    def done(self, key: str, saga: str, step: int, by: str) -> None:
        self._write("done", key, saga, step, by)

    def failed(self, key: str, saga: str, step: int, by: str, error: str) -> None:
        self._write("failed", key, saga, step, by, error)


class PostgresEscalations:
    """The escalation queue in a table."""

    def __init__(self, store: PostgresRecovery) -> None:
        self.store = store

    def add(self, saga: str, step: int | None, kind: str, detail: str) -> tuple[Escalation, bool]:
        if kind not in KINDS:
            raise ValueError(f"unknown escalation kind {kind!r}; expected one of {sorted(KINDS)}")
        eid = escalation_id(saga, step, kind)
        log = self.store.wal.log_name
        created = self.store.run(self.store.sql.open_escalation, (log, eid, saga, step, kind, detail)).fetchone()
        row = self.store.run(self.store.sql.read_escalation, (log, eid)).fetchone()
        return _escalation(row), created is not None

    def resolve(self, eid: str, note: str = "") -> Escalation:
        log = self.store.wal.log_name
        self.store.run(self.store.sql.resolve_escalation, (note, log, eid))
        row = self.store.run(self.store.sql.read_escalation, (log, eid)).fetchone()
        if row is None:
            ids = ", ".join(e.id for e in self.all()) or "none"
            raise KeyError(f"no escalation {eid!r} in {self.store.location} (known: {ids})")
        return _escalation(row)

    def all(self) -> list[Escalation]:
        rows = self.store.run(self.store.sql.all_escalations, (self.store.wal.log_name,)).fetchall()
        return [_escalation(row) for row in rows]

    def pending(self) -> list[Escalation]:
        return [e for e in self.all() if not e.resolved]


def _escalation(row: Any) -> Escalation:
    eid, saga, step, kind, detail, opened_at, resolved, note = row
    return Escalation(eid, saga, step, kind, detail, float(opened_at), bool(resolved), note or "")


class _Statements:
    def __init__(self, psycopg: Any, table: str) -> None:
        sql = psycopg.sql
        names = {
            "ledger": sql.Identifier(f"{table}_ledger"),
            "leases": sql.Identifier(f"{table}_leases"),
            "esc": sql.Identifier(f"{table}_escalations"),
            "ledger_key": sql.Identifier(f"{table}_ledger_key"),
        }

        def q(text: str) -> Any:
            return sql.SQL(text).format(**names)

        self.schema = [
            q("CREATE TABLE IF NOT EXISTS {ledger} (id bigserial PRIMARY KEY, log text NOT NULL, key text NOT NULL, "
              "event text NOT NULL, saga text NOT NULL, step int, by_name text NOT NULL, error text NOT NULL, "
              "at double precision NOT NULL DEFAULT extract(epoch FROM clock_timestamp()))"),
            q("CREATE INDEX IF NOT EXISTS {ledger_key} ON {ledger} (log, key)"),
            q("CREATE TABLE IF NOT EXISTS {leases} (log text NOT NULL, saga text NOT NULL, owner text NOT NULL, "
              "ttl double precision NOT NULL, renewed_at double precision NOT NULL, PRIMARY KEY (log, saga))"),
            q("CREATE TABLE IF NOT EXISTS {esc} (log text NOT NULL, id text NOT NULL, saga text NOT NULL, step int, "
              "kind text NOT NULL, detail text NOT NULL, opened_at double precision NOT NULL DEFAULT "
              "extract(epoch FROM clock_timestamp()), resolved boolean NOT NULL DEFAULT false, note text, "
              "PRIMARY KEY (log, id))"),
        ]
        self.add_entry = q(
            "INSERT INTO {ledger} (log, key, event, saga, step, by_name, error) VALUES (%s, %s, %s, %s, %s, %s, %s)"
        )
        self.key_state = q(
            "SELECT count(*) FILTER (WHERE event = 'attempt'), count(*) FILTER (WHERE event = 'failed'), "
            "coalesce(bool_or(event = 'done'), false), "
            "(array_agg(error ORDER BY id DESC) FILTER (WHERE event = 'failed'))[1], "
            "max(at) FILTER (WHERE event = 'failed') FROM {ledger} WHERE log = %s AND key = %s"
        )
        self.read_lease = q(
            "SELECT owner, ttl, renewed_at, extract(epoch FROM clock_timestamp()) FROM {leases} "
            "WHERE log = %s AND saga = %s"
        )
        self.delete_lease = q("DELETE FROM {leases} WHERE log = %s AND saga = %s")
        self.renew_leases = q(
            "INSERT INTO {leases} (log, saga, owner, ttl, renewed_at) "
            "SELECT %s, unnest(%s::text[]), %s, %s, extract(epoch FROM clock_timestamp()) "
            "ON CONFLICT (log, saga) DO UPDATE SET renewed_at = EXCLUDED.renewed_at, ttl = EXCLUDED.ttl"
        )
        self.open_escalation = q(
            "INSERT INTO {esc} (log, id, saga, step, kind, detail) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT DO NOTHING RETURNING id"
        )
        self.read_escalation = q(
            "SELECT id, saga, step, kind, detail, opened_at, resolved, note FROM {esc} WHERE log = %s AND id = %s"
        )
        self.resolve_escalation = q(
            "UPDATE {esc} SET resolved = true, note = %s WHERE log = %s AND id = %s AND NOT resolved"
        )
        self.all_escalations = q(
            "SELECT id, saga, step, kind, detail, opened_at, resolved, note FROM {esc} WHERE log = %s "
            "ORDER BY opened_at"
        )
