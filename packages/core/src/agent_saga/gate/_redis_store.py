"""Redis-backed gate stores, for anything running more than one process.

* :class:`RedisLimitStore` -- spend and rate windows shared by a fleet and kept
  across restarts. Checking and debiting every limit a call touches is one Lua
  script, so it is atomic on the server: no two callers can both read $49k and
  both decide that $1k still fits. Window time is the server's clock.
* :class:`RedisBreakerStore` -- breaker state shared by a fleet.
* :class:`RedisSwitchStore` -- the kill switch for a fleet.

``redis`` (the ``agent-saga[redis]`` extra) is imported when a store is created,
never by ``import agent_saga``. Every Redis or socket error becomes
``StoreUnavailable``; what that means is each consumer's choice (limits refuse,
the breaker falls back to per-process state, the switch honours its grace window).
Keys are plain (no cluster hash tags): use one Redis node (or a primary/replica pair).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from agent_saga.errors import ConfigurationError
from agent_saga.gate._breaker import BreakerPolicy, Change, Verdict
from agent_saga.gate._stores import Charge, DebitResult, Receipt, StoreUnavailable
from agent_saga.gate._switch_state import SwitchState

__all__ = ["RedisBreakerStore", "RedisLimitStore", "RedisSwitchStore", "connect"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def connect(url: str | None = None, client: Any = None, timeout: float = 1.0) -> Any:
    """A redis-py client for ``url`` (default ``$REDIS_URL``), or ``client`` as given."""
    if client is not None:
        return client
    try:
        import redis
    except ImportError:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "the Redis gate stores need redis-py: pip install 'agent-saga[redis]>=3.0.0'"
        ) from None
    target = url or os.environ.get("REDIS_URL") or DEFAULT_URL
    # Short timeouts: a gate blocked on a dead socket stalls every agent step.
    return redis.Redis.from_url(
        target, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
    )


def _describe(client: Any) -> str:
    try:
        kw = client.connection_pool.connection_kwargs
        return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    except AttributeError:
        return repr(client)


def _errors() -> tuple[type[BaseException], ...]:
    import redis

    return (redis.RedisError, OSError)


class _Base:
    def __init__(self, url: str | None, client: Any, prefix: str, timeout: float) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"prefix= must be a non-empty string, got {prefix!r}")
        self.client = connect(url, client, timeout)
        self.prefix = prefix
        self.location = _describe(self.client)
        self._errors = _errors()

    def _run(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self._errors as err:
            raise StoreUnavailable(f"{type(self).__name__} at {self.location} could not {what}: {err}") from err

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r}, prefix={self.prefix!r})"


# KEYS: per charge i, KEYS[2i-1] = window log (zset: score time, member "id:amount"),
# KEYS[2i] = running total. ARGV: now ('' = server TIME), entry id, n, then per
# charge: max_total, window, amount, mode.
_DEBIT = """
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
local id = ARGV[2]
local n = tonumber(ARGV[3])
local deferred = {}
local skip = {}
for i = 1, n do
  local zlog, ztot = KEYS[2 * i - 1], KEYS[2 * i]
  local b = 3 + (i - 1) * 4
  local maxv, window, amount, mode = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), ARGV[b + 4]
  local old = redis.call('ZRANGEBYSCORE', zlog, '-inf', now - window)
  if #old > 0 then
    local gone = 0
    for _, m in ipairs(old) do gone = gone + tonumber(string.match(m, ':([^:]+)$')) end
    redis.call('ZREMRANGEBYSCORE', zlog, '-inf', now - window)
    if redis.call('ZCARD', zlog) == 0 then
      redis.call('DEL', ztot)
    else
      redis.call('INCRBYFLOAT', ztot, -gone)
    end
  end
  if mode ~= 'force' then
    local total = tonumber(redis.call('GET', ztot) or '0')
    if total + amount > maxv + 1e-9 * math.max(1, math.abs(maxv)) then
      if mode == 'escalate' then
        table.insert(deferred, i)
        skip[i] = true
      else
        return {i, tostring(total)}
      end
    end
  end
end
local ttl = 0
for i = 1, n do
  if not skip[i] then
    local b = 3 + (i - 1) * 4
    local window = tonumber(ARGV[b + 2])
    local member = id .. ':' .. i .. ':' .. ARGV[b + 3]
    redis.call('ZADD', KEYS[2 * i - 1], now, member)
    redis.call('INCRBYFLOAT', KEYS[2 * i], ARGV[b + 3])
    local ms = math.ceil(window * 1000) + 1000
    redis.call('PEXPIRE', KEYS[2 * i - 1], ms)
    redis.call('PEXPIRE', KEYS[2 * i], ms)
  end
end
local out = {0, '0'}
for _, i in ipairs(deferred) do table.insert(out, i) end
return out
"""

# KEYS: per entry, log then total. ARGV: per entry, member then amount.
_REFUND = """
for i = 1, #ARGV / 2 do
  if redis.call('ZREM', KEYS[2 * i - 1], ARGV[2 * i - 1]) == 1 then
    if redis.call('ZCARD', KEYS[2 * i - 1]) == 0 then
      redis.call('DEL', KEYS[2 * i])
    else
      redis.call('INCRBYFLOAT', KEYS[2 * i], -tonumber(ARGV[2 * i]))
    end
  end
end
return 0
"""


class RedisLimitStore(_Base):
    """Spend and rate windows in Redis: one atomic script per call, shared by every process.

    ``clock`` (seconds) replaces the server clock, for tests; leave it None in production.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any = None,
        prefix: str = "agent-saga:limit:",
        timeout: float = 1.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(url, client, prefix, timeout)
        self._clock = clock
        self._debit = self.client.register_script(_DEBIT)
        self._refund = self.client.register_script(_REFUND)

    def _keys(self, key: str) -> list[str]:
        return [f"{self.prefix}{key}:log", f"{self.prefix}{key}:sum"]

    def debit(self, charges: Sequence[Charge]) -> DebitResult:
        if not charges:
            return DebitResult(None)
        token = uuid.uuid4().hex
        keys: list[str] = []
        args: list[Any] = ["" if self._clock is None else repr(float(self._clock())), token, len(charges)]
        for c in charges:
            keys += self._keys(c.key)
            args += [repr(float(c.max_total)), repr(float(c.window)), repr(float(c.amount)), c.mode]
        out = self._run("check and debit", lambda: self._debit(keys=keys, args=args))
        first = int(out[0])
        if first:
            return DebitResult(first - 1, float(out[1]))
        deferred = tuple(int(i) - 1 for i in out[2:])
        entries = tuple(
            (c.key, f"{token}:{i + 1}:{float(c.amount)!r}", float(c.amount))
            for i, c in enumerate(charges) if i not in deferred
        )
        return DebitResult(None, 0.0, deferred, Receipt(entries))

    def refund(self, receipt: Receipt) -> None:
        if not receipt.entries:
            return
        keys: list[str] = []
        args: list[Any] = []
        for key, member, amount in receipt.entries:
            keys += self._keys(key)
            args += [member, repr(float(amount))]
        self._run("hand back a refused debit", lambda: self._refund(keys=keys, args=args))


_BREAKER = """
local h, z, zf = KEYS[1], KEYS[2], KEYS[3]
local action, now, op = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local threshold, rate, minv = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local window, cool = tonumber(ARGV[8]), tonumber(ARGV[9])
local ttl = math.ceil((window + cool) * 10000) + 60000
local state = redis.call('HGET', h, 'state') or 'closed'
local function keep()
  redis.call('PEXPIRE', h, ttl)
  redis.call('PEXPIRE', z, ttl)
  redis.call('PEXPIRE', zf, ttl)
end
if action == 'before' then
  if state == 'closed' then return {'allow', '0'} end
  if state == 'open' then
    local opened = tonumber(redis.call('HGET', h, 'opened_at'))
    if now < opened + cool then return {'refuse', tostring(opened + cool - now)} end
    redis.call('HSET', h, 'state', 'half', 'probe_op', op, 'probe_at', tostring(now))
    keep()
    return {'probe', '0'}
  end
  local at = tonumber(redis.call('HGET', h, 'probe_at'))
  if now >= at + cool then
    redis.call('HSET', h, 'probe_op', op, 'probe_at', tostring(now))
    keep()
    return {'probe', '0'}
  end
  return {'refuse', tostring(at + cool - now)}
end
if action == 'release' then
  if state == 'half' and redis.call('HGET', h, 'probe_op') == op then
    redis.call('HSET', h, 'state', 'open', 'opened_at', tostring(now - cool), 'probe_op', '')
  end
  return {'none', 0, 0, 0}
end
local ok = ARGV[4] == '1'
if state == 'half' then
  if redis.call('HGET', h, 'probe_op') ~= op then return {'none', 0, 0, 0} end
  if ok then
    redis.call('DEL', h, z, zf)
    return {'recovered', 0, 0, 0}
  end
  redis.call('HSET', h, 'state', 'open', 'opened_at', tostring(now), 'probe_op', '')
  keep()
  return {'tripped', 1, 1, 1}
end
if state == 'open' then return {'none', 0, 0, 0} end
redis.call('ZREMRANGEBYSCORE', z, '-inf', now - window)
redis.call('ZREMRANGEBYSCORE', zf, '-inf', now - window)
local member = op .. ':' .. ARGV[10]
redis.call('ZADD', z, now, member)
if ok then
  redis.call('HSET', h, 'consecutive', '0')
  keep()
  return {'none', 0, 0, 0}
end
redis.call('ZADD', zf, now, member)
local consec = redis.call('HINCRBY', h, 'consecutive', 1)
local vol, fails = redis.call('ZCARD', z), redis.call('ZCARD', zf)
keep()
if (threshold > 0 and consec >= threshold) or (rate > 0 and vol >= minv and fails / vol >= rate) then
  redis.call('DEL', z, zf)
  redis.call('HSET', h, 'state', 'open', 'opened_at', tostring(now), 'consecutive', '0')
  return {'tripped', consec, vol, fails}
end
return {'none', consec, vol, fails}
"""


class RedisBreakerStore(_Base):
    """Breaker state shared by every process; each transition is one atomic script."""

    def __init__(
        self, url: str | None = None, *, client: Any = None, prefix: str = "agent-saga:breaker:",
        timeout: float = 0.5,
    ) -> None:
        super().__init__(url, client, prefix, timeout)
        self._script = self.client.register_script(_BREAKER)

    def _eval(self, action: str, key: str, op: str, ok: bool, now: float, policy: BreakerPolicy) -> Any:
        keys = [f"{self.prefix}{key}", f"{self.prefix}{key}:calls", f"{self.prefix}{key}:fails"]
        args = [
            action, repr(float(now)), op, "1" if ok else "0",
            policy.failure_threshold or 0, repr(float(policy.failure_rate or 0.0)), policy.min_volume,
            repr(float(policy.window)), repr(float(policy.cool_down)), uuid.uuid4().hex,
        ]
        return self._run(f"{action} breaker {key!r}", lambda: self._script(keys=keys, args=args))

    def before(self, key: str, op: str, now: float, policy: BreakerPolicy) -> Verdict:
        out = self._eval("before", key, op, True, now, policy)
        return Verdict(str(out[0]), float(out[1]))  # type: ignore[arg-type]

    def record(self, key: str, op: str, ok: bool, now: float, policy: BreakerPolicy) -> Change:
        out = self._eval("record", key, op, ok, now, policy)
        return Change(str(out[0]), int(out[1]), int(out[2]), int(out[3]))  # type: ignore[arg-type]

    def release(self, key: str, op: str, now: float, policy: BreakerPolicy) -> None:
        self._eval("release", key, op, True, now, policy)


class RedisSwitchStore(_Base):
    """The kill switch for a fleet: one JSON value, changed under WATCH/MULTI.

    Run Redis with persistence (AOF) if a restart must not forget a halt.
    """

    def __init__(
        self, url: str | None = None, *, client: Any = None, prefix: str = "agent-saga:switch",
        timeout: float = 0.5,
    ) -> None:
        super().__init__(url, client, prefix, timeout)

    def load(self) -> SwitchState:
        raw = self._run("read the switch", lambda: self.client.get(self.prefix))
        return self._parse(raw)

    def _parse(self, raw: Any) -> SwitchState:
        if raw is None:
            return SwitchState()
        try:
            return SwitchState.from_json(json.loads(raw))
        except (ValueError, TypeError) as err:
            raise StoreUnavailable(f"switch state at {self.location} key {self.prefix!r} is unreadable: {err}") from err

    def update(self, change: Callable[[SwitchState], SwitchState]) -> SwitchState:
        import redis

        def attempt() -> SwitchState:
            with self.client.pipeline() as pipe:
                while True:
                    try:
                        pipe.watch(self.prefix)
                        state = change(self._parse(pipe.get(self.prefix)))
                        pipe.multi()
                        pipe.set(self.prefix, json.dumps(state.to_json(), sort_keys=True))
                        pipe.execute()
                        return state
                    except redis.WatchError:
                        continue  # another operator changed it in between: re-read and re-apply

        result: SwitchState = self._run("change the switch", attempt)
        return result

    def is_quarantined(self, saga_id: str) -> bool:
        return any(q.saga_id == saga_id for q in self.load().quarantined)
