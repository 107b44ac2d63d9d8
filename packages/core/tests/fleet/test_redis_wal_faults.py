"""RedisWAL when a reply is lost or a request arrives late, made deterministic: a proxy
(``resp_proxy.RespProxy``) in front of a real throwaway redis-server loses the reply of one
chosen commit, or holds one back until the retry has started.

- A torn append-only file (issue 25, item 5). A SIGKILL during the AOF write leaves the last
  transaction cut mid-command; redis-server 7.0 with ``aof-load-truncated yes`` (its default) cuts
  the file *inside* that MULTI on the next start, and at the start after that replays the torn
  commands together with the next transaction appended behind them. The test cuts the file as
  the SIGKILL would, at a chosen byte, instead of hoping a kill lands mid-write.
- A commit the server reads after the client gave up (item 6): the retry must not write the
  batch again once the late one lands.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from resp_proxy import RespProxy
from servers import ThrowawayRedis

from agent_saga import WALError
from agent_saga.audit import verify_records
from agent_saga.log.redis import RedisWAL

MULTI = b"*1\r\n$5\r\nMULTI\r\n"


@pytest.fixture
def torn_server(tmp_path: Path) -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis(tmp_path, load_truncated=True)  # Redis's own default
    server.start()
    yield server
    server.stop()


def tear_last_transaction(server: ThrowawayRedis) -> None:
    """Cut the append-only file inside its last MULTI, halfway into its second record's ZADD.

    What a SIGKILL in the middle of writing that transaction leaves: its INCRBY and first ZADD
    whole, the rest gone.
    """
    path = server.incr_file()
    data = path.read_bytes()
    start = data.rindex(MULTI)
    second_zadd = data.index(b"ZADD", data.index(b"ZADD", start) + 4)
    path.write_bytes(data[: second_zadd + 60])


def test_a_torn_commit_replayed_at_the_second_restart_breaks_the_log(torn_server: ThrowawayRedis) -> None:
    server = torn_server
    proxy = RespProxy(server.port)
    wal = RedisWAL(proxy.url, socket_timeout=2.0)
    try:
        wal.append("STEP_INTENT", "s", {"i": 1}, 1)
        wal.append("STEP_INTENT", "s", {"i": 2}, 2)
        wal.barrier(timeout=20)
        # The commit of records 3 and 4 runs; its reply is lost; the proxy turns the writer away.
        proxy.drop_next_reply()
        ticket = wal.append("STEP_INTENT", "s", {"i": 3}, 3)
        wal.append("STEP_INTENT", "s", {"i": 4}, 4)
        assert proxy.dropped.wait(20)
        server.kill()
        tear_last_transaction(server)
        server.start()  # restart 1: the torn transaction is not applied, its head stays in the file
        proxy.admit()
        wal.barrier(timeout=30)  # the retry finds no marker and commits records 3 and 4
        assert wal.retries >= 1 and ticket <= 4
        server.kill()
        server.start()  # restart 2: the torn INCRBY and ZADD are replayed with the retry's commit
        raw = RedisWAL(server.url)
        seq, _, _ = raw.head()
        stored = [s for s, _ in raw.lines_after(0)]
        raw.close()
        assert (seq, stored) == (6, [1, 2, 3, 3, 4]), "this redis-server no longer replays a torn commit"

        # The writer must not seal record 5 after the inflated counter (7) and call it committed.
        wal.append("STEP_INTENT", "s", {"i": 5}, 5)
        with pytest.raises(WALError, match="counter is 6 but its highest record is 4"):
            wal.barrier(timeout=30)
        with pytest.raises(WALError, match="refusing to write past damage"):
            wal.append("STEP_INTENT", "s", {"i": 6}, 6)
    finally:
        wal.close(timeout=5)
        proxy.stop()


def test_the_projects_redis_refuses_a_torn_file_and_the_repair_loses_nothing_acknowledged(tmp_path: Path) -> None:
    server = ThrowawayRedis(tmp_path)  # aof-load-truncated no, as scripts/services runs it
    server.start()
    proxy = RespProxy(server.port)
    wal = RedisWAL(proxy.url, socket_timeout=2.0)
    try:
        assert wal.persistence == "aof appendfsync=always"
        for i in (1, 2):
            wal.append("STEP_INTENT", "s", {"i": i}, i)
        wal.barrier(timeout=20)
        proxy.drop_next_reply()
        wal.append("STEP_INTENT", "s", {"i": 3}, 3)
        wal.append("STEP_INTENT", "s", {"i": 4}, 4)
        assert proxy.dropped.wait(20)
        server.kill()
        tear_last_transaction(server)
        with pytest.raises(AssertionError, match="end of file reading the append only file"):
            server.start()  # loud: Redis will not load a torn file
        server.start(repair=True)  # redis-check-aof --fix cuts it before the torn MULTI
        assert server.repairs == 1
        proxy.admit()
        wal.barrier(timeout=30)
        server.kill()
        server.start()
        wal.append("STEP_INTENT", "s", {"i": 5}, 5)
        wal.barrier(timeout=30)
        records = list(wal.records())
    finally:
        wal.close(timeout=5)
        proxy.stop()
        server.stop()
    assert [(r["seq"], r["body"]["i"]) for r in records] == [(i, i) for i in range(1, 6)]
    assert verify_records(records).status == "intact"


def test_a_commit_the_server_reads_after_the_client_gave_up_is_not_written_twice(tmp_path: Path) -> None:
    server = ThrowawayRedis(tmp_path)
    server.start()
    proxy = RespProxy(server.port)
    wal = RedisWAL(proxy.url, socket_timeout=0.5, linger=5.0)
    try:
        wal.barrier(wal.append("SAGA_STARTED", "s", {}))
        # One large batch: the server "is still reading" it (held) when the client times out.
        proxy.hold_next_script()
        for i in range(300):
            wal.append("STEP_COMMITTED", "s", {"i": i, "pad": "x" * 400}, i)
        wal.barrier(timeout=30)
        assert proxy.held.is_set() and proxy.released.wait(20)
        assert wal.retries >= 1
        wal.barrier(wal.append("SAGA_COMPLETED", "s", {}), timeout=30)  # and the log goes on
        records = list(wal.records())
    finally:
        wal.close(timeout=5)
        proxy.stop()
        server.stop()
    assert [r["body"].get("i") for r in records[1:-1]] == list(range(300))  # once each, in order
    assert [r["seq"] for r in records] == list(range(1, 303))
    assert verify_records(records).status == "intact"


def _log(rd: str) -> RedisWAL:
    return RedisWAL(f"{rd}?log=t-{uuid.uuid4().hex[:12]}")


def test_a_record_above_the_sequence_counter_is_refused_not_joined(rd: str) -> None:
    wal = _log(rd)
    try:
        wal.append("STEP_INTENT", "s", {"i": 1}, 1)
        wal.barrier()
        wal.client.zadd(wal.keys["records"], {"a replayed line": 2})  # the counter still says 1
        wal.append("STEP_INTENT", "s", {"i": 2}, 2)
        with pytest.raises(WALError, match="counter is 1 but its highest record is 2"):
            wal.barrier(timeout=10)
        assert wal.client.zcount(wal.keys["records"], 2, 2) == 1  # nothing sealed beside it
    finally:
        wal.close(timeout=5)


def test_a_counter_that_moved_without_the_head_breaks_the_writer(rd: str) -> None:
    """The same head under another seq is damage: a chained head hashes its seq."""
    wal = _log(rd)
    try:
        wal.append("STEP_INTENT", "s", {"i": 1}, 1)
        wal.barrier()
        wal.client.incrby(wal.keys["seq"], 2)  # counter and top record moved, the head did not
        wal.client.zadd(wal.keys["records"], {"a replayed line": 3})
        wal.append("STEP_INTENT", "s", {"i": 2}, 2)
        with pytest.raises(WALError, match="head is still this writer's last one"):
            wal.barrier(timeout=10)
        with pytest.raises(WALError):
            wal.append("STEP_INTENT", "s", {"i": 3}, 3)
        assert wal.client.get(wal.keys["seq"]) == "3"
    finally:
        wal.close(timeout=5)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shift=st.integers(-2, 2),
    added=st.sets(st.integers(1, 6), max_size=3),
    removed=st.sets(st.integers(1, 3), max_size=2),
)
def test_whatever_moved_the_counter_or_records_the_writer_never_seals_past_a_gap_or_beside_a_record(
    rd: str, shift: int, added: set[int], removed: set[int]
) -> None:
    """Tamper with a 3-record log's counter and records (not its head): the next commit either
    refuses, or lands right after the highest record, alone at its number."""
    wal = _log(rd)
    try:
        for i in (1, 2, 3):
            wal.append("STEP_INTENT", "s", {"i": i}, i)
        wal.barrier()
        k = wal.keys
        wal.client.incrby(k["seq"], shift)
        for n in added:
            wal.client.zadd(k["records"], {f"tampered {n}": n})
        for n in removed:
            wal.client.zremrangebyscore(k["records"], n, n)
        wal.append("STEP_INTENT", "s", {"i": "new"}, 4)
        try:
            wal.barrier(timeout=10)
        except WALError:
            assert shift or added or removed  # an untouched log is never refused
            return
        stored = [(n, line) for n, line in wal.lines_after(0)]
    finally:
        wal.close(timeout=5)
    mine = [n for n, line in stored if '"new"' in line]
    others = [n for n, line in stored if '"new"' not in line]
    assert len(mine) == 1 and mine[0] == max(others) + 1

