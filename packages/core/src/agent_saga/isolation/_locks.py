"""Semantic locks: a saga claims a business resource so no concurrent saga reads its half-done state.

A saga's steps are committed one by one, so between its first step and its end
another saga could read (and act on) a state that a rollback is about to undo.
``acquire("account:42")`` inside a saga claims the id for that saga; a second
saga asking for it is refused (``LockHeld``) or waits up to ``wait`` seconds.

Released on every exit path: the manager is an engine interceptor, so when the
saga ends (committed, rolled back, or abandoned to the recovery daemon) its
locks go. A process that dies holding a lock cannot release it: every lock is a
lease of ``ttl`` seconds, renewed in the background while its holder lives, so
a SIGKILLed holder's lock expires by itself.

``SemanticLockManager`` keeps locks in this process (one process, many sagas).
For several processes or hosts, ``RedisSemanticLocks`` (``SET NX PX``, renewal,
Lua compare-and-delete: one saga never frees another's lock) and
``PostgresSemanticLocks`` (a table whose expiry is the database's clock).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Generator
from typing import Any

from agent_saga.context import current_saga
from agent_saga.engine.observe import Interceptor, SagaEnd, SagaEvent, add_interceptor, remove_interceptor
from agent_saga.errors import ConfigurationError, SagaError

__all__ = ["LockHeld", "PostgresSemanticLocks", "RedisSemanticLocks", "SemanticLockManager"]

log = logging.getLogger("agent_saga.isolation")


# The process-local kind's locks, shared by every manager of this process: resource -> (token, expiry).
_local: dict[str, tuple[str, float]] = {}
_local_lock = threading.Lock()


class LockHeld(SagaError):
    """A resource is claimed by another saga (and did not come free within the wait)."""


class SemanticLockManager(Interceptor):
    """Semantic locks held in this process; subclasses keep them on a server.

    ``ttl`` is the lease of each lock (renewed every ``ttl / 3`` while held).
    Create the manager before the sagas that use it start: it learns that a
    saga ended through the engine's interceptor chain. ``close()`` releases
    every lock it holds and leaves the chain.
    """

    def __init__(self, ttl: float = 30.0, *, poll: float = 0.05) -> None:
        if not isinstance(ttl, (int, float)) or ttl <= 0:
            raise ConfigurationError(f"ttl must be a positive number of seconds, got {ttl!r}")
        self.ttl = float(ttl)
        self.poll = poll
        self._lock = threading.Lock()
        self._held: dict[str, tuple[str, str]] = {}  # resource -> (saga, token), held by this process
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        add_interceptor(self)

    # -- what a saga calls -------------------------------------------------------------

    def acquire(self, resource: str, *, saga: str | None = None, wait: float = 0.0) -> str:
        """Claim ``resource`` for ``saga`` (default: the current saga); returns the saga id.

        Re-acquiring a resource the saga already holds is a no-op. Raises
        ``LockHeld`` if another saga holds it after ``wait`` seconds.
        """
        if not isinstance(resource, str) or not resource:
            raise ConfigurationError(f"a resource id is a non-empty string, got {resource!r}")
        owner = saga or _current_saga_id()
        with self._lock:
            if self._held.get(resource, ("", ""))[0] == owner:
                return owner
        token = f"{owner}:{uuid.uuid4().hex}"
        deadline = time.monotonic() + wait
        while True:
            holder = self._try(resource, token)
            if holder is None:
                with self._lock:
                    self._held[resource] = (owner, token)
                    self._ensure_renewer()
                return owner
            if time.monotonic() >= deadline:
                raise LockHeld(f"{resource!r} is held by saga {holder}; retry later or acquire(..., wait=seconds)")
            time.sleep(self.poll)

    def release(self, resource: str, *, saga: str | None = None) -> bool:
        """Release ``resource`` if ``saga`` (default: the current one) holds it here."""
        owner = saga or _current_saga_id()
        with self._lock:
            held = self._held.get(resource)
            if held is None or held[0] != owner:
                return False
            del self._held[resource]
        self._free(resource, held[1])
        return True

    def release_saga(self, saga_id: str) -> int:
        """Release every lock ``saga_id`` holds here; how many."""
        with self._lock:
            mine = [(r, t) for r, (s, t) in self._held.items() if s == saga_id]
            for resource, _ in mine:
                del self._held[resource]
        for resource, token in mine:
            self._free(resource, token)
        return len(mine)

    def holder(self, resource: str) -> str | None:
        """The saga holding ``resource`` (from any process, for the shared kinds), or None."""
        token = self._holder(resource)
        return token.rpartition(":")[0] if token else None

    def close(self) -> None:
        """Release everything held here, stop renewing, leave the interceptor chain."""
        remove_interceptor(self)
        self._stop.set()
        with self._lock:
            held, self._held = dict(self._held), {}
        for resource, (_, token) in held.items():
            self._free(resource, token)

    # -- the interceptor: every exit path of a saga -------------------------------------

    def saga(self, event: SagaEvent) -> Generator[None, SagaEnd, None]:
        try:
            yield
        finally:
            self.release_saga(event.saga_id)

    # -- storage (this process; overridden by the shared kinds) --------------------------

    def _try(self, resource: str, token: str) -> str | None:
        """Take ``resource`` for ``token`` if free or expired; else the holder's saga id."""
        now = time.monotonic()
        with _local_lock:
            current = _local.get(resource)
            if current is not None and current[1] > now:
                return current[0].rpartition(":")[0]
            _local[resource] = (token, now + self.ttl)
        return None

    def _renew(self, held: dict[str, str]) -> None:
        now = time.monotonic()
        with _local_lock:
            for resource, token in held.items():
                if _local.get(resource, ("",))[0] == token:
                    _local[resource] = (token, now + self.ttl)

    def _free(self, resource: str, token: str) -> None:
        with _local_lock:
            if _local.get(resource, ("",))[0] == token:
                del _local[resource]

    def _holder(self, resource: str) -> str | None:
        with _local_lock:
            current = _local.get(resource)
            return current[0] if current is not None and current[1] > time.monotonic() else None

    # -- renewal -------------------------------------------------------------------------

    def _ensure_renewer(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(target=self._renew_loop, name="agent-saga-locks", daemon=True)
            self._renewer.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            with self._lock:
                held = {resource: token for resource, (_, token) in self._held.items()}
            if not held:
                continue
            try:
                self._renew(held)
            except Exception as err:  # noqa: BLE001 - a blip: the lease outlives a few missed renewals
                log.warning("renewing %d semantic lock(s) failed: %s", len(held), err)


def _current_saga_id() -> str:
    saga = current_saga()
    if saga is None:
        raise ConfigurationError("acquire() outside a saga needs saga=<the saga id that holds the lock>")
    return str(saga.saga_id)


_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return false end
return redis.call('GET', KEYS[1])
"""
_RENEW = """
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then redis.call('PEXPIRE', KEYS[i], ARGV[1]); n = n + 1 end
end
return n
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisSemanticLocks(SemanticLockManager):
    """Semantic locks shared by every process that reaches one Redis (``agent-saga[redis]``)."""

    def __init__(self, url: str | None = None, *, ttl: float = 30.0, prefix: str = "agent-saga:lock:",
                 poll: float = 0.05) -> None:
        from agent_saga.log.redis import redis_client

        self.client = redis_client(url or os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0", 5.0)
        self.prefix = prefix
        self._acquire = self.client.register_script(_ACQUIRE)
        self._renew_script = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        super().__init__(ttl, poll=poll)

    def _try(self, resource: str, token: str) -> str | None:
        holder = self._acquire(keys=[self.prefix + resource], args=[token, int(self.ttl * 1000)])
        return str(holder).rpartition(":")[0] if holder else None

    def _renew(self, held: dict[str, str]) -> None:
        self._renew_script(keys=[self.prefix + r for r in held], args=[int(self.ttl * 1000), *held.values()])

    def _free(self, resource: str, token: str) -> None:
        self._release(keys=[self.prefix + resource], args=[token])

    def _holder(self, resource: str) -> str | None:
        value = self.client.get(self.prefix + resource)
        return str(value) if value else None


class PostgresSemanticLocks(SemanticLockManager):
    """Semantic locks in a Postgres table (``agent-saga[postgres]``); expiry on the database's clock."""

    def __init__(self, url: str, *, ttl: float = 30.0, table: str = "agent_saga_locks", poll: float = 0.05) -> None:
        from agent_saga.log.postgres import import_psycopg

        psycopg = import_psycopg()
        if not table.isidentifier() or table.lower() != table:
            raise ConfigurationError(f"table={table!r} is not a plain lower-case SQL name")
        self._conn: Any = psycopg.connect(url, autocommit=True, application_name="agent-saga-locks")
        self._conn_lock = threading.Lock()
        t = psycopg.sql.Identifier(table)

        def q(text: str) -> Any:
            return psycopg.sql.SQL(text).format(t=t)

        with self._conn.transaction():
            # Two first users at once would race in CREATE TABLE (a unique violation in the
            # catalog): serialise on the lock the log's own schema takes.
            self._conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agent-saga-schema:{table}",))
            self._conn.execute(q("CREATE TABLE IF NOT EXISTS {t} (resource text PRIMARY KEY, token text NOT NULL, "
                                 "expires_at timestamptz NOT NULL)"))
        # Insert, or take over a lock whose lease ran out; RETURNING says whether we got it.
        self._sql_try = q(
            "INSERT INTO {t} AS l (resource, token, expires_at) VALUES (%s, %s, now() + %s * interval '1 second') "
            "ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, expires_at = EXCLUDED.expires_at "
            "WHERE l.expires_at < now() RETURNING token"
        )
        self._sql_holder = q("SELECT token FROM {t} WHERE resource = %s AND expires_at >= now()")
        self._sql_renew = q("UPDATE {t} SET expires_at = now() + %s * interval '1 second' "
                            "WHERE resource = %s AND token = %s")
        self._sql_free = q("DELETE FROM {t} WHERE resource = %s AND token = %s")
        super().__init__(ttl, poll=poll)

    def _run(self, statement: Any, params: tuple[Any, ...], fetch: bool = True) -> Any:
        with self._conn_lock:  # one connection, shared by the sagas' threads and the renewer
            cursor = self._conn.execute(statement, params)
            return cursor.fetchone() if fetch else None

    def _try(self, resource: str, token: str) -> str | None:
        if self._run(self._sql_try, (resource, token, self.ttl)) is not None:
            return None
        holder = self._run(self._sql_holder, (resource,))
        return str(holder[0]).rpartition(":")[0] if holder else "(a lease that just ran out)"

    def _renew(self, held: dict[str, str]) -> None:
        for resource, token in held.items():
            self._run(self._sql_renew, (self.ttl, resource, token), fetch=False)

    def _free(self, resource: str, token: str) -> None:
        self._run(self._sql_free, (resource, token), fetch=False)

    def _holder(self, resource: str) -> str | None:
        row = self._run(self._sql_holder, (resource,))
        return str(row[0]) if row else None

    def close(self) -> None:
        super().close()
        self._conn.close()
