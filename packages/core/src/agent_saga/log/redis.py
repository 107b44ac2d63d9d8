"""RedisWAL: one log shared by every process that reaches one Redis server.

Records are the file log's records, the line stored as sealed, in a sorted set
scored by sequence number. One hash chain runs across all writers. A commit is
one Lua script, so it is atomic on the server: it checks that the log's head
(sequence and hash) is still the one the batch was sealed against, takes the
batch's sequence numbers with one ``INCRBY`` (the log's global sequence), adds
the lines and moves the head. If another writer got in first, the script
answers with the new head and the batch is sealed again against it.

Durability class, plainly: weaker than an fsync'd file or Postgres by default.
A reached barrier means the Redis *server* has the records; whether they survive
the server's own crash depends on its persistence: ``appendonly yes`` with
``appendfsync always`` fsyncs before replying; ``everysec`` (Redis's default when
AOF is on) can lose up to a second of acknowledged records; with no persistence a
restart loses the log. Even with ``always``, a crash in the middle of writing a
commit leaves a torn transaction at the end of the append-only file, and Redis
7.0 loading it anyway (``aof-load-truncated yes``, its default) replays the torn
part at the restart after next: run it with ``aof-load-truncated no`` (it then
refuses to start until ``redis-check-aof --fix``; docs/FLEET.md says what was
seen). ``wait=N`` makes every barrier also wait until N replicas acknowledged the
commit (``WAIT``), which survives the loss of the primary once one of them is
promoted. :attr:`RedisWAL.persistence` says what the server runs with.

What the log refuses rather than guess: a sequence gone backwards (a server that
lost data), a sequence counter that disagrees with the highest stored record (the
script refuses), and the writer's own last head found under another sequence
(the counter moved alone). Each breaks the log: callers get :class:`WALError`,
never a second history or a gap under the same name.

A commit whose connection broke may or may not have landed; the script also
records the writer's last committed ticket and reads it first, in the same atomic
call, so a retry whose earlier attempt landed (even one the server read only after
the client gave up) writes nothing. Needs ``pip install 'agent-saga[redis]>=3.0.0'``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Unpack

from agent_saga.errors import ConfigurationError, WALError
from agent_saga.log.codec import seal
from agent_saga.log.group import Entry, GroupCommitWAL, LogKeywords, LogOptions
from agent_saga.log.records import GENESIS, Record
from agent_saga.log.rewrite import Change, Rewritable, Stored
from agent_saga.log.server import LogNotFound, decode_stored, split_url

__all__ = ["RedisWAL", "import_redis", "redis_client"]

log = logging.getLogger("agent_saga.wal")

DEFAULT_LOG = "default"
_PAGE = 5000
_REWRITE_TRIES = 50
_DAMAGED = "agent-saga: refusing to write past damage in the log"
_FIX = (
    "the server lost or replayed part of a commit (a torn append-only file loaded with "
    "aof-load-truncated yes?); run 'agent-saga verify' on the log and see docs/FLEET.md on Redis durability"
)

# KEYS: seq, head, records, writers. ARGV: expected seq, expected head, new head, writer,
# last ticket, the lines. Returns {1, last seq, head}; {0, seq, head} if the head moved (another
# writer got in: seal again); {2, seq, head} if this writer's marker says the batch already landed
# (an earlier attempt whose reply was lost, or which the server read only after the client gave
# up). The marker is read here, in the script, because a separate read could run before that
# earlier attempt lands and the batch would be written twice. Exactly one record stands at the
# counter and none above it (none at all at 0): anything else (a gap, a record above it, one seq
# twice) is damage, never another writer: refuse. ZCOUNTs, not ZREVRANGE: they copy no line.
_COMMIT = f"""
local seq = tonumber(redis.call('GET', KEYS[1]) or '0')
local head = redis.call('GET', KEYS[2]) or '{GENESIS}'
local marked = redis.call('HGET', KEYS[4], ARGV[4])
if marked and tonumber(marked) >= tonumber(ARGV[5]) then return {{2, seq, head}} end
local above = redis.call('ZCOUNT', KEYS[3], string.format('(%d', seq), '+inf')
if above ~= 0 or redis.call('ZCOUNT', KEYS[3], seq, seq) ~= math.min(seq, 1) then
  local top = tonumber(redis.call('ZREVRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2] or '0')
  local why = top ~= seq and ('its highest record is ' .. top) or 'more than one record holds that number'
  return redis.error_reply('{_DAMAGED}: its sequence counter is ' .. seq .. ' but ' .. why)
end
if seq ~= tonumber(ARGV[1]) or head ~= ARGV[2] then return {{0, seq, head}} end
local n = #ARGV - 5
if redis.call('INCRBY', KEYS[1], n) ~= seq + n then return redis.error_reply('agent-saga: sequence moved') end
for i = 1, n do redis.call('ZADD', KEYS[3], seq + i, ARGV[5 + i]) end
redis.call('SET', KEYS[2], ARGV[3])
redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
return {{1, seq + n, ARGV[3]}}
"""

def import_redis() -> Any:
    """The redis module, or a one-line error naming the extra to install."""
    try:
        import redis
    except ImportError:
        raise ConfigurationError("the Redis backend needs redis-py: pip install 'agent-saga[redis]>=3.0.0'") from None
    return redis


def redis_client(url: str, timeout: float) -> Any:
    """A redis-py client for ``url`` (bytes replies off: we store text)."""
    return import_redis().Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout, decode_responses=True
    )


class RedisWAL(GroupCommitWAL, Rewritable):
    """A shared log in Redis (see the module docstring for its durability class).

    ``url`` is a redis-py URL (``redis://host:port/db``); the query parameter
    ``log`` (default ``default``) names the log, so several share one server.
    Keys are ``agent-saga:wal:{<log>}:*`` (one hash slot per log). ``wait`` (0)
    replicas must acknowledge each commit within ``wait_timeout`` seconds.
    ``create=False`` raises LogNotFound for a log that has no record yet.
    """

    backend = "redis"
    max_batch = 1000  # lines per script call

    def __init__(
        self,
        url: str,
        *,
        options: LogOptions | None = None,
        wait: int = 0,
        wait_timeout: float = 1.0,
        socket_timeout: float = 5.0,
        create: bool = True,
        **keywords: Unpack[LogKeywords],
    ) -> None:
        self._redis = import_redis()
        driver_url, ours, location = split_url(url, log=DEFAULT_LOG)
        if not ours["log"] or any(c in ours["log"] for c in "{}"):
            raise ConfigurationError(f"log={ours['log']!r} must be a non-empty name without braces, e.g. ?log=orders")
        if isinstance(wait, bool) or not isinstance(wait, int) or wait < 0:
            raise ConfigurationError(f"wait= is a number of replicas (an int >= 0), got {wait!r}")
        super().__init__(location, options, **keywords)
        self.log_name = ours["log"]
        self.wait = wait
        self.wait_timeout = wait_timeout
        prefix = f"agent-saga:wal:{{{self.log_name}}}"
        self.keys = {name: f"{prefix}:{name}" for name in ("seq", "head", "records", "writers", "rewrites")}
        self.driver_url = driver_url  # with credentials: for the recovery state beside the log
        self.client = redis_client(driver_url, socket_timeout)
        self._script = self.client.register_script(_COMMIT)
        try:
            seq, head = self.client.mget(self.keys["seq"], self.keys["head"])
            self.persistence = self._persistence()
        except self._redis.RedisError as err:
            raise WALError(f"cannot open the log {self.location}: {err}") from err
        if seq is None and not create:
            raise LogNotFound(f"no log named {self.log_name!r} at {self.location} (nothing was created)")
        self._seq = int(seq or 0)
        self._head = head or GENESIS
        if self.persistence.startswith("none"):
            log.warning(
                "%s: the Redis server persists nothing (%s): a server restart loses the log. "
                "Turn on appendonly with appendfsync always and aof-load-truncated no",
                self.location, self.persistence,
            )
        elif self.persistence.endswith("aof-load-truncated=yes"):
            log.warning(
                "%s: the Redis server loads a torn append-only file anyway (%s): after a crash mid-write "
                "a later restart can replay the torn commit or drop acknowledged ones. Set aof-load-truncated "
                "no (docs/FLEET.md)", self.location, self.persistence,
            )
        self._start()

    def _persistence(self) -> str:
        """The server's persistence settings, as one phrase ("unknown" if CONFIG is not allowed)."""
        try:
            config = self.client.config_get("appendonly") | self.client.config_get("appendfsync")
            config |= self.client.config_get("save") | self.client.config_get("aof-load-truncated")
        except self._redis.ResponseError:
            return "unknown (CONFIG GET is not allowed on this server)"
        if config.get("appendonly") == "yes":
            # Redis's default, yes, is the one that lets a torn commit come back (docs/FLEET.md).
            torn = ", aof-load-truncated=yes" if config.get("aof-load-truncated") == "yes" else ""
            return f"aof appendfsync={config.get('appendfsync')}{torn}"
        if config.get("save"):
            return f"none between snapshots (save {config.get('save')})"
        return "none (appendonly no, no snapshots)"

    # -- writing -----------------------------------------------------------------------

    def _transient(self, err: BaseException) -> bool:
        return isinstance(err, (self._redis.ConnectionError, self._redis.TimeoutError, OSError))

    def _commit(self, batch: list[Entry]) -> None:
        # Always sent with the writer's marker: the script itself answers whether an earlier
        # attempt of this batch landed, so a retry needs no separate (racing) read first.
        last_ticket = self._batch_end
        keys = [self.keys["seq"], self.keys["head"], self.keys["records"], self.keys["writers"]]
        seq, head = self._seq, self._head
        while True:
            data, new_head, count = seal(
                ((seq + 1 + i, *entry) for i, entry in enumerate(batch)), head, self.chain, self.encryptor
            )
            lines = data.decode().split("\n")[:count]
            try:
                done, now_seq, now_head = self._script(
                    keys=keys, args=[seq, head, new_head, self.writer, last_ticket, *lines]
                )
            except self._redis.ResponseError as err:
                if str(err).startswith(_DAMAGED):
                    raise WALError(f"{self.location}: {str(err).removeprefix('agent-saga: ')}; {_FIX}") from err
                raise
            now_seq, now_head = int(now_seq), str(now_head)
            if now_seq < self._seq:
                raise WALError(
                    f"{self.location}: the server's sequence went back from {self._seq} to {now_seq}: "
                    "it lost committed records (a restart without persistence?). Refusing to start a "
                    "second history under the same name; see docs/FLEET.md on Redis durability"
                )
            if done:
                break  # 1: committed now; 2: an earlier attempt had landed
            if self.chain and now_head == self._head and now_seq != self._seq:
                # Each chained head hashes its own seq: the same head under another seq is not
                # another writer (it would have moved the head) but a counter that moved alone.
                raise WALError(
                    f"{self.location}: {_DAMAGED.removeprefix('agent-saga: ')}: the head is still this "
                    f"writer's last one ({now_head[:12]}...) but the sequence counter moved from "
                    f"{self._seq} to {now_seq}; {_FIX}"
                )
            seq, head = now_seq, now_head
        self._seq, self._head = now_seq, now_head
        self._replicate()

    def _replicate(self) -> None:
        if self.wait:
            acked = self.client.wait(self.wait, int(self.wait_timeout * 1000))
            if acked < self.wait:
                # Retried (as a lost connection is): the barrier holds until replicas catch up.
                raise self._redis.ConnectionError(
                    f"only {acked} of {self.wait} replicas acknowledged within {self.wait_timeout:g}s"
                )

    def _release(self, clean: bool) -> None:
        if clean:
            try:  # a cleanly closed writer has no commit in doubt: its marker can go
                self.client.hdel(self.keys["writers"], self.writer)
            except self._redis.RedisError:
                pass
        self.client.close()

    # -- reading -----------------------------------------------------------------------

    def lines_after(self, seq: int = 0) -> Iterator[tuple[int, str]]:
        """(seq, stored line) of every committed record after ``seq``, oldest first, one snapshot.

        Read in pages; if a compaction or redaction ran meanwhile, read again.
        """
        while True:
            rewrites = self.client.get(self.keys["rewrites"])
            lines: list[tuple[int, str]] = []
            start = seq
            while True:
                page = self.client.zrangebyscore(
                    self.keys["records"], f"({start}", "+inf", start=0, num=_PAGE, withscores=True
                )
                lines.extend((int(score), line) for line, score in page)
                if len(page) < _PAGE:
                    break
                start = lines[-1][0]
            if self.client.get(self.keys["rewrites"]) == rewrites:
                return iter(lines)

    def head(self) -> tuple[int, str, int]:
        """The last committed (seq, hash) and how many rewrites (compactions, redactions) the log had."""
        seq, head, rewrites = self.client.mget(self.keys["seq"], self.keys["head"], self.keys["rewrites"])
        return int(seq or 0), head or GENESIS, int(rewrites or 0)

    def records(self) -> Iterator[Record]:
        """Every committed record, oldest first (call ``barrier()`` first to include queued ones)."""
        for _, line in self.lines_after(0):
            yield decode_stored(line, self.encryptor, self.location)

    # -- maintenance -------------------------------------------------------------------

    def _rewrite(self, plan: Callable[[Stored], Change | None], action: str = "rewrite") -> None:
        k = self.keys
        for _ in range(_REWRITE_TRIES):
            with self.client.pipeline() as pipe:
                try:
                    pipe.watch(k["seq"], k["head"])
                    seq, head = pipe.mget(k["seq"], k["head"])
                    lines = [(int(s), line) for line, s in pipe.zrange(k["records"], 0, -1, withscores=True)]
                    change = plan(Stored(lines, int(seq or 0), head or GENESIS))
                    if change is None:
                        return
                    by_seq = dict(lines)
                    pipe.multi()
                    for s, line in change.replaced.items():
                        pipe.zrem(k["records"], by_seq[s])
                        pipe.zadd(k["records"], {line: s})
                    if change.removed:
                        pipe.zrem(k["records"], *(by_seq[s] for s in change.removed))
                    if change.appended is not None:
                        new_seq, line, new_head = change.appended
                        pipe.zadd(k["records"], {line: new_seq})
                        pipe.set(k["seq"], new_seq)
                        pipe.set(k["head"], new_head)
                    pipe.incr(k["rewrites"])
                    pipe.execute()
                    return
                except self._redis.WatchError:
                    continue  # a writer committed meanwhile: plan again on what is there now
        raise WALError(
            f"{self.location}: the log kept changing during {_REWRITE_TRIES} attempts to rewrite it; "
            "run the compaction or redaction at a quieter time"
        )
