"""The recovery state of a RedisWAL, on the same server as the log (keys ``agent-saga:wal:{<log>}:*``).

* claims: ``SET claim:<saga> <token> NX PX <ttl>``, renewed in the background
  while held and released by a Lua compare-and-delete, so a daemon can never
  free another's claim, and a SIGKILLed daemon's claim expires on its own;
* the ledger: ``ledger:attempts`` / ``ledger:failures`` (HASH, counters per
  compensation key), ``ledger:done`` (SET), ``ledger:errors`` / ``ledger:failed_at``
  (HASH): "already compensated?" is one ``SISMEMBER``, not a scan of history;
* leases: ``leases`` (HASH saga -> owner, ttl, renewal time on the server's clock);
* escalations: ``escalations`` (HASH id -> the escalation), added with ``HSETNX``.

They are as durable as the server's persistence (see ``log.redis``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from typing import Any

from agent_saga.log.base import WAL
from agent_saga.log.codec import BodyCipher
from agent_saga.log.redis import redis_client
from agent_saga.recovery.escalations import KINDS, Escalation, escalation_id
from agent_saga.recovery.fold import ServerTail
from agent_saga.recovery.lease import Lease
from agent_saga.recovery.ledger import KeyState
from agent_saga.recovery.protocols import ClaimLike, EscalationsLike, TailLike

__all__ = ["RedisClaim", "RedisEscalations", "RedisLedger", "RedisRecovery"]

log = logging.getLogger("agent_saga.recovery")

#: How long a claim lives without renewal (a SIGKILLed daemon's claim is free after this).
CLAIM_TTL = 30.0

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# KEYS: leases. ARGV: owner, ttl, saga ids. The renewal time is the server's.
_HOLD_LEASES = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i = 3, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], cjson.encode({owner = ARGV[1], ttl = tonumber(ARGV[2]), renewed = now}))
end
return #ARGV - 2
"""


class RedisRecovery:
    """Leases, claims, ledger and escalation queue of one RedisWAL."""

    shared = True

    def __init__(self, wal: Any, *, owns_wal: bool = False, claim_ttl: float = CLAIM_TTL) -> None:
        self.wal = wal
        self.location = str(wal.location)
        self.owns_wal = owns_wal
        self.claim_ttl = claim_ttl
        # A client of its own: the log's closes with the log, and leases outlive a closed log object.
        self.client = redis_client(wal.driver_url, 5.0)
        base = wal.keys["seq"].rpartition(":")[0]
        self.key = {name: f"{base}:{name}" for name in (
            "leases", "escalations", "ledger:attempts", "ledger:failures", "ledger:done",
            "ledger:errors", "ledger:failed_at",
        )}
        self.claim_prefix = f"{base}:claim:"
        self.release_script = self.client.register_script(_RELEASE)
        self.renew_script = self.client.register_script(_RENEW)
        self.hold_script = self.client.register_script(_HOLD_LEASES)

    def exists(self) -> bool:
        return True

    def open_wal(self) -> WAL:
        return self.wal  # type: ignore[no-any-return]

    def tail(self, encryptor: BodyCipher | None) -> TailLike:
        return ServerTail(self.wal, encryptor)

    def ledger(self) -> RedisLedger:
        return RedisLedger(self)

    def escalations(self) -> EscalationsLike:
        return RedisEscalations(self)

    def read_lease(self, saga_id: str) -> Lease | None:
        with self.client.pipeline(transaction=False) as pipe:
            raw, (seconds, micros) = pipe.hget(self.key["leases"], saga_id).time().execute()
        if raw is None:
            return None
        data = json.loads(raw)
        server_now = seconds + micros / 1e6
        # The server's clock wrote it; read it on ours: renewed + (our now - its now).
        return Lease(saga_id, str(data["owner"]), float(data["ttl"]), float(data["renewed"]) + time.time() - server_now)

    def remove_lease(self, saga_id: str) -> None:
        self.client.hdel(self.key["leases"], saga_id)

    def renew_leases(self, saga_ids: list[str], owner: str, ttl: float) -> None:
        """Write or renew the leases of ``saga_ids`` (the writing process's keeper calls this)."""
        self.hold_script(keys=[self.key["leases"]], args=[owner, ttl, *saga_ids])

    def try_claim(self, saga_id: str) -> ClaimLike | None:
        key = self.claim_prefix + saga_id
        token = uuid.uuid4().hex
        if not self.client.set(key, token, nx=True, px=int(self.claim_ttl * 1000)):
            return None
        return RedisClaim(self, key, token)

    def close(self) -> None:
        self.client.close()
        if self.owns_wal:
            self.wal.close()


class RedisClaim:
    """A held claim, renewed every third of its ttl until released."""

    def __init__(self, store: RedisRecovery, key: str, token: str) -> None:
        self.store = store
        self.key = key
        self.token = token
        self.lost = False  # renewal found the claim gone (expired while the daemon was stuck)
        self._stop = threading.Event()
        self._renewer = threading.Thread(target=self._renew, name="agent-saga-claim", daemon=True)
        self._renewer.start()

    @property
    def held(self) -> bool:
        return not self._stop.is_set() and not self.lost

    def _renew(self) -> None:
        ttl_ms = int(self.store.claim_ttl * 1000)
        while not self._stop.wait(self.store.claim_ttl / 3):
            try:
                renewed = self.store.renew_script(keys=[self.key], args=[self.token, ttl_ms])
            except Exception as err:  # noqa: BLE001 - a blip: try again at the next tick
                log.warning("renewing claim %s failed: %s", self.key, err)
                continue
            if not renewed:
                self.lost = True
                log.error("claim %s expired while held; another daemon may take the saga", self.key)
                return

    def release(self, *, remove: bool = False) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._renewer.join()
        self.store.release_script(keys=[self.key], args=[self.token])


class RedisLedger:
    """The recovery ledger in HASH/SET keys: every daemon of the log, on any host, sees every entry."""

    def __init__(self, store: RedisRecovery) -> None:
        self.store = store
        self.shared = True

    def refresh(self) -> None:
        return None  # every state() reads the server

    def state(self, key: str) -> KeyState:
        k = self.store.key
        with self.store.client.pipeline(transaction=False) as pipe:
            pipe.hget(k["ledger:attempts"], key).hget(k["ledger:failures"], key)
            pipe.sismember(k["ledger:done"], key).hget(k["ledger:errors"], key).hget(k["ledger:failed_at"], key)
            attempts, failures, done, error, failed_at = pipe.execute()
        return KeyState(int(attempts or 0), int(failures or 0), bool(done), error or "", float(failed_at or 0.0))

    def attempt(self, key: str, saga: str, step: int, by: str) -> None:
        self.store.client.hincrby(self.store.key["ledger:attempts"], key, 1)

    def done(self, key: str, saga: str, step: int, by: str) -> None:
        self.store.client.sadd(self.store.key["ledger:done"], key)

    def failed(self, key: str, saga: str, step: int, by: str, error: str) -> None:
        k = self.store.key
        with self.store.client.pipeline(transaction=True) as pipe:
            pipe.hincrby(k["ledger:failures"], key, 1).hset(k["ledger:errors"], key, error)
            pipe.hset(k["ledger:failed_at"], key, time.time()).execute()


class RedisEscalations:
    """The escalation queue in one HASH."""

    def __init__(self, store: RedisRecovery) -> None:
        self.store = store
        self.key = store.key["escalations"]

    def add(self, saga: str, step: int | None, kind: str, detail: str) -> tuple[Escalation, bool]:
        if kind not in KINDS:
            raise ValueError(f"unknown escalation kind {kind!r}; expected one of {sorted(KINDS)}")
        eid = escalation_id(saga, step, kind)
        entry = {"id": eid, "saga": saga, "step": step, "kind": kind, "detail": detail,
                 "opened_at": time.time(), "resolved": False, "note": ""}
        created = bool(self.store.client.hsetnx(self.key, eid, json.dumps(entry)))
        return self._get(eid) or Escalation(**entry), created  # type: ignore[arg-type]

    def _get(self, eid: str) -> Escalation | None:
        raw = self.store.client.hget(self.key, eid)
        return Escalation(**json.loads(raw)) if raw else None

    def resolve(self, eid: str, note: str = "") -> Escalation:
        found = self._get(eid)
        if found is None:
            ids = ", ".join(e.id for e in self.all()) or "none"
            raise KeyError(f"no escalation {eid!r} in {self.store.location} (known: {ids})")
        if not found.resolved:
            found.resolved, found.note = True, note
            entry = {name: getattr(found, name) for name in
                     ("id", "saga", "step", "kind", "detail", "opened_at", "resolved", "note")}
            self.store.client.hset(self.key, eid, json.dumps(entry))
        return found

    def all(self) -> list[Escalation]:
        found = [Escalation(**json.loads(raw)) for raw in self.store.client.hvals(self.key)]
        return sorted(found, key=lambda e: e.opened_at)

    def pending(self) -> list[Escalation]:
        return [e for e in self.all() if not e.resolved]
