"""Approval requests in Redis, for agents and approvers spread over several hosts.

redis-py (the ``agent-saga[redis]`` extra) is imported when the store is
created, never by ``import agent_saga``. Each request is one JSON string under
``<prefix>:req:<id>``, and ``<prefix>:ids`` indexes them. Creation is one Lua
script (set-if-absent plus index); an update is an optimistic WATCH/MULTI
transaction, retried when another writer got there first. Every Redis or
socket error becomes ``StoreUnavailable``, which denies.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agent_saga.approvals._entry import ApprovalEntry, Change
from agent_saga.approvals._errors import ApprovalNotFound
from agent_saga.errors import ConfigurationError
from agent_saga.gate import StoreUnavailable
from agent_saga.gate._redis_store import _describe, _errors, connect

__all__ = ["DEFAULT_RETENTION", "RedisApprovalStore"]

#: How long a request is kept after its deadline: what a retried step finds.
DEFAULT_RETENTION = 30 * 86_400.0

_CREATE = """
local created = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
if created then return false end
return redis.call('GET', KEYS[1])
"""


class RedisApprovalStore:
    """Approval requests shared by a fleet through one Redis node."""

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any = None,
        prefix: str = "agent-saga:approvals",
        timeout: float = 1.0,
        retention: float = DEFAULT_RETENTION,
    ) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"prefix= must be a non-empty string, got {prefix!r}")
        if isinstance(retention, bool) or not isinstance(retention, (int, float)) or not (
            math.isfinite(retention) and retention > 0
        ):
            raise ConfigurationError(f"retention= must be a positive number of seconds, got {retention!r}")
        self.client = connect(url, client, timeout)
        self.prefix = prefix
        self.retention = float(retention)
        self.location = _describe(self.client)
        self._errors = _errors()
        self._create = self.client.register_script(_CREATE)

    def _key(self, request_id: str) -> str:
        return f"{self.prefix}:req:{request_id}"

    def _ttl_ms(self, entry: ApprovalEntry) -> int:
        # Relative to the entry's own clock: kept `retention` past its deadline.
        return max(1, int((entry.deadline - entry.created_at + self.retention) * 1000))

    def _parse(self, text: Any) -> ApprovalEntry:
        try:
            return ApprovalEntry.from_json(json.loads(text))
        except ValueError as err:
            raise StoreUnavailable(f"approval request in {self.location} is unreadable ({err})") from err

    def create(self, entry: ApprovalEntry) -> tuple[ApprovalEntry, bool]:
        text = json.dumps(entry.to_json(), sort_keys=True)
        try:
            existing = self._create(
                keys=[self._key(entry.id), f"{self.prefix}:ids"], args=[text, self._ttl_ms(entry), entry.id]
            )
        except self._errors as err:
            raise StoreUnavailable(f"RedisApprovalStore at {self.location} could not create a request: {err}") from err
        if existing is None:
            return entry, True
        return self._parse(existing), False

    def get(self, request_id: str) -> ApprovalEntry | None:
        try:
            text = self.client.get(self._key(request_id))
        except self._errors as err:
            raise StoreUnavailable(f"RedisApprovalStore at {self.location} could not read a request: {err}") from err
        return None if text is None else self._parse(text)

    def update(self, request_id: str, change: Change) -> ApprovalEntry:
        key = self._key(request_id)
        result: list[ApprovalEntry] = []

        def attempt(pipe: Any) -> None:
            result.clear()
            text = pipe.get(key)
            if text is None:
                raise ApprovalNotFound(f"no approval request {request_id} in {self.location}")
            current = self._parse(text)
            new = change(current)
            result.append(new)
            if new is not current:
                pipe.multi()
                pipe.set(key, json.dumps(new.to_json(), sort_keys=True), keepttl=True)

        try:
            self.client.transaction(attempt, key)
        except self._errors as err:
            raise StoreUnavailable(f"RedisApprovalStore at {self.location} could not update a request: {err}") from err
        return result[0]

    def entries(self) -> list[ApprovalEntry]:
        try:
            ids = sorted(self.client.smembers(f"{self.prefix}:ids"))
            texts = self.client.mget([self._key(i) for i in ids]) if ids else []
            gone = [i for i, t in zip(ids, texts, strict=True) if t is None]
            if gone:  # expired past their retention: drop them from the index
                self.client.srem(f"{self.prefix}:ids", *gone)
        except self._errors as err:
            raise StoreUnavailable(f"RedisApprovalStore at {self.location} could not list requests: {err}") from err
        return [self._parse(t) for t in texts if t is not None]

    def __repr__(self) -> str:
        return f"RedisApprovalStore({self.location!r}, prefix={self.prefix!r})"
