"""RedisSnapshotStore: durable snapshots in the Redis server a fleet's log already uses.

One hash per saga (field: the blob's SHA-256, value: the blob) and one set naming the
sagas, under ``agent-saga:snapshots:<name>:``. ``put`` returns once Redis acknowledged
the write and, with ``wait=N``, once N replicas did (``WAIT``); how durable an
acknowledged write is beyond that is the server's persistence setting (``appendfsync``),
exactly as for RedisWAL.
"""

from __future__ import annotations

from typing import Any

from agent_saga.engine.snapshot import check_digest, check_saga_id, digest_of
from agent_saga.errors import CompensationError, ConfigurationError
from agent_saga.log.redis import import_redis

__all__ = ["RedisSnapshotStore"]


class RedisSnapshotStore:
    """Snapshots in Redis at ``url``; ``name`` is how the log refers to this store."""

    def __init__(self, url: str, *, name: str = "redis", wait: int = 0, wait_timeout: float = 1.0) -> None:
        if not isinstance(name, str) or not name.strip() or any(c in name for c in "{}:"):
            raise ConfigurationError(f"RedisSnapshotStore needs a non-empty name= without braces or ':', got {name!r}")
        if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
            raise ConfigurationError(f"wait= is a number of replicas (an int >= 0), got {wait!r}")
        self.name = name
        self.wait = wait
        self.wait_timeout = wait_timeout
        self._client: Any = import_redis().Redis.from_url(url)
        self._prefix = f"agent-saga:snapshots:{name}:"

    def __repr__(self) -> str:
        return f"RedisSnapshotStore(name={self.name!r})"

    def _key(self, saga_id: str) -> str:
        return f"{self._prefix}saga:{check_saga_id(saga_id)}"

    def put(self, saga_id: str, data: bytes) -> str:
        digest = digest_of(data)
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(self._key(saga_id), digest, data)
        pipe.sadd(f"{self._prefix}sagas", saga_id)
        pipe.execute()
        if self.wait:
            acked = self._client.wait(self.wait, int(self.wait_timeout * 1000))
            if acked < self.wait:
                raise ConfigurationError(
                    f"snapshot of saga {saga_id} reached {acked} of the {self.wait} replicas asked for"
                )
        return digest

    def get(self, saga_id: str, digest: str) -> bytes:
        data = self._client.hget(self._key(saga_id), check_digest(digest))
        if data is None:
            raise KeyError(f"snapshot {digest} of saga {saga_id} is not in {self!r}")
        if digest_of(bytes(data)) != digest:
            raise CompensationError(f"snapshot {digest} of saga {saga_id} in {self!r} does not match its hash")
        return bytes(data)

    def sagas(self) -> list[str]:
        found = []
        for raw in self._client.smembers(f"{self._prefix}sagas"):
            saga = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                found.append(check_saga_id(saga))
            except ValueError:
                continue
        return sorted(found)

    def delete_saga(self, saga_id: str) -> int:
        key = self._key(saga_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.hlen(key)
        pipe.delete(key)
        pipe.srem(f"{self._prefix}sagas", saga_id)
        count, _, _ = pipe.execute()
        return int(count)

    def close(self) -> None:
        self._client.close()
