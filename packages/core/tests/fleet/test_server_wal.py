"""PostgresWAL and RedisWAL against the real servers: the WAL contract FileWAL keeps, on a server.

Each test runs on both backends (the ``backend`` fixture) unless its name says otherwise.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from open_saga import leave_open
from servers import ThrowawayRedis, edit_stored_line

from agent_saga import (
    ActionSemantics,
    Compensation,
    FileWAL,
    SagaAborted,
    WALError,
    WALFull,
    WALStalled,
    saga_scope,
)
from agent_saga.audit import verify_log, verify_records
from agent_saga.log import HEADER_FIELDS, read_records
from agent_saga.log.crypto import AESGCMEncryptor, EncryptionKeyMissing, generate_key
from agent_saga.log.maintenance import LogMaintenanceError
from agent_saga.log.postgres import PostgresWAL
from agent_saga.log.redis import RedisWAL
from agent_saga.log.resolve import is_url, local_copy, open_log
from agent_saga.log.server import LogNotFound

C, IRR = ActionSemantics.COMPENSABLE, ActionSemantics.IRREVERSIBLE


def undo(result: Any) -> Compensation:
    return Compensation(fn=lambda: None, description="undo")


def seqs(wal: Any) -> list[int]:
    return [r["seq"] for r in wal.records()]


def test_records_come_back_oldest_first_with_the_file_logs_header_and_chain(url: str, tmp_path: Path) -> None:
    with open_log(url) as wal, FileWAL(tmp_path / "same.wal") as file_wal:
        for log in (wal, file_wal):
            log.append("SAGA_STARTED", "s1", {"name": "order"})
            log.append("STEP_INTENT", "s1", {"tool": "charge", "amount": 4200}, 1)
            log.append("STEP_COMMITTED", "s1", {"op": "x"}, 1)
            log.barrier()
        served, filed = list(wal.records()), list(file_wal.records())
    assert [r["seq"] for r in served] == [1, 2, 3]
    assert [(r["type"], r["saga"], r.get("step"), r["body"]) for r in served] == [
        (r["type"], r["saga"], r.get("step"), r["body"]) for r in filed
    ]
    # The same record model: the same header fields and chain fields, key for key.
    assert [sorted(r) for r in served] == [sorted(r) for r in filed]
    assert set(HEADER_FIELDS) <= set(served[1])
    assert served[0]["prev"] == "0" * 64 and served[1]["prev"] == served[0]["hash"]
    assert verify_records(served).status == "intact"


def test_one_chain_across_writers_in_threads_and_instances(new_url: Callable[[], str]) -> None:
    url = new_url()
    a, b = open_log(url), open_log(url)  # two writers, as two processes would be

    def write(wal: Any, who: str) -> None:
        for i in range(60):
            wal.barrier(wal.append("STEP_COMMITTED", who, {"i": i}, i))

    threads = [threading.Thread(target=write, args=(w, f"{n}-{k}")) for n, w in (("a", a), ("b", b)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.close()
    b.close()
    with open_log(url) as reader:
        records = list(reader.records())
    assert [r["seq"] for r in records] == list(range(1, 361))  # no gap, no duplicate
    assert verify_records(records).status == "intact"
    for who in ("a-0", "a-1", "a-2", "b-0", "b-1", "b-2"):
        assert [r["body"]["i"] for r in records if r["saga"] == who] == list(range(60))


def test_group_commit_one_round_covers_records_from_many_threads(server_wal: Any) -> None:
    barrier = threading.Barrier(16)

    def write(k: int) -> None:
        barrier.wait()
        for i in range(20):
            server_wal.barrier(server_wal.append("STEP_INTENT", f"saga-{k}", {"i": i}, i))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(list(server_wal.records())) == 320
    # Each of the 320 barriers waited for its own record, yet far fewer rounds committed them all.
    assert server_wal.commits < 320 * 0.9, server_wal.commits


async def test_async_barriers_wait_for_their_commit(server_wal: Any) -> None:
    async def step(k: int) -> int:
        ticket = server_wal.append("STEP_INTENT", f"s{k}", {"k": k}, 1)
        await server_wal.barrier_async(ticket)
        return ticket

    tickets = await asyncio.gather(*(step(k) for k in range(64)))
    assert sorted(tickets) == list(range(1, 65))
    assert sorted(r["body"]["k"] for r in server_wal.records()) == list(range(64))


def test_a_real_saga_on_a_server_log_verifies_and_certifies(url: str) -> None:
    from agent_saga.audit import certify

    with open_log(url) as wal:
        with saga_scope(wal, name="order") as s:
            s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 1}, compensate=undo)
        with pytest.raises(SagaAborted), saga_scope(wal, name="undone") as s:
            s.execute(tool="db.insert", semantics=C, forward=lambda: {"id": 2}, compensate=undo)
            raise RuntimeError("model gave up")
        records = list(wal.records())
    assert verify_records(records).ok
    cert = certify(records)
    assert cert.certified and cert.effects == 2 and cert.accounted == 2


def test_compaction_and_redaction_keep_the_chain_verifiable(url: str, operator_key: Path) -> None:
    with open_log(url) as wal:
        with saga_scope(wal, name="done") as s:
            done = s.saga_id
            s.execute(tool="crm.add", semantics=C, forward=lambda: {"email": "ann@example.com"}, compensate=undo)

        running = leave_open(wal, undo)
        wal.barrier()
        before = list(wal.records())
        target = next(r["seq"] for r in before if r["saga"] == running and r["type"] == "STEP_INTENT")
        redacted = wal.redact_record(target, by="dpo@example.com", reason="erasure request 12", signer=operator_key)
        assert redacted.seqs == (target,)
        compacted = wal.compact(by="ops", reason="settled", signer=operator_key)
        assert compacted.removed == sum(1 for r in before if r["saga"] == done)
        wal.append("STEP_COMMITTED", running, {"after": True}, 1)  # writers continue the chain
        wal.barrier()
        after = list(wal.records())
    report = verify_records(after)
    assert report.status == "intact", report.reason
    assert not any(r["saga"] == done for r in after)
    erased = next(r for r in after if r["seq"] == target)
    assert "body" not in erased and erased["redacted"]["by"] == "dpo@example.com"
    assert [r["type"] for r in after[-3:]] == ["REDACTION", "COMPACTION", "STEP_COMMITTED"]
    assert after[-1]["seq"] == before[-1]["seq"] + 3  # the sequence never restarts


def test_maintenance_refuses_a_log_whose_chain_was_edited(url: str, backend: str, operator_key: Path) -> None:
    with open_log(url) as wal:
        wal.append("STEP_COMMITTED", "s", {"amount": 1}, 1)
        wal.append("STEP_COMMITTED", "s", {"amount": 2}, 2)
        wal.barrier()
        forged = edit_stored_line(wal, backend, 1, '"amount":1', '"amount":9')
        with pytest.raises(LogMaintenanceError, match="refusing to compact"):
            wal.compact(keep=lambda r: False, signer=operator_key)
        assert next(line for _, line in wal.lines_after(0)) == forged  # nothing was changed


def test_encrypted_bodies_are_stored_sealed_and_read_with_the_key(url: str) -> None:
    key = AESGCMEncryptor.from_base64(generate_key())
    with open_log(url, encryptor=key) as wal:
        wal.append("STEP_INTENT", "s", {"card": "4242", "amount": 4200}, 1)
        wal.barrier()
        stored = [line for _, line in wal.lines_after(0)]
        # the field names, not "4242": digits alone turn up in timestamps and hashes (a CI run saw it)
        assert '"card"' not in stored[0] and '"amount"' not in stored[0] and '"enc":' in stored[0]
        assert next(iter(wal.records()))["body"] == {"card": "4242", "amount": 4200}
    with open_log(url) as keyless, pytest.raises(EncryptionKeyMissing):
        list(keyless.records())


def test_a_lost_reply_does_not_write_a_batch_twice(url: str, backend: str) -> None:
    """The commit landed, then the connection died before the answer: the retry must not re-add it."""
    cls: type[Any] = PostgresWAL if backend == "postgres" else RedisWAL
    lost = _lose_first_reply(cls, backend)
    wal = lost(url)
    try:
        for i in range(5):
            wal.append("STEP_COMMITTED", "s", {"i": i}, i)
        wal.barrier()
        assert wal.retries >= 1
        records = list(wal.records())
    finally:
        wal.close()
    assert [r["body"]["i"] for r in records] == [0, 1, 2, 3, 4]
    assert verify_records(records).status == "intact"


def _lose_first_reply(cls: type[Any], backend: str) -> type[Any]:
    if backend == "postgres":
        import psycopg

        lost_error: BaseException = psycopg.OperationalError("server closed the connection unexpectedly")
    else:
        import redis

        lost_error = redis.ConnectionError("Connection closed by server.")

    class LosesFirstReply(cls):  # type: ignore[misc, valid-type]
        lost = False

        def _commit(self, batch: Any) -> None:
            super()._commit(batch)
            if not self.lost:
                self.lost = True
                self._uncertain = True  # as a connection that died mid-commit leaves it
                raise lost_error

    return LosesFirstReply


def test_barrier_is_bounded_and_records_wait_while_redis_is_down(tmp_path: Path) -> None:
    server = ThrowawayRedis(tmp_path)
    server.start()
    try:
        wal = RedisWAL(server.url, max_pending=2, socket_timeout=0.5)
        wal.barrier(wal.append("STEP_INTENT", "s", {"i": 0}, 0))
        server.kill()
        ticket = wal.append("STEP_INTENT", "s", {"i": 1}, 1)
        with pytest.raises(WALStalled, match="still queued"):
            wal.barrier(ticket, timeout=0.5)
        wal.append("STEP_INTENT", "s", {"i": 2}, 2)
        wal.append("STEP_INTENT", "s", {"i": 3}, 3)
        with pytest.raises(WALFull, match="refusing rather than dropping"):
            wal.append("STEP_INTENT", "s", {"i": 4}, 4)
        server.start()  # the append-only file brings the log back
        wal.barrier(timeout=20)
        assert [r["body"]["i"] for r in wal.records()] == [0, 1, 2, 3]
        wal.close()
    finally:
        server.stop()


def test_redis_that_lost_its_data_breaks_the_log_instead_of_restarting_the_sequence(url: str, backend: str) -> None:
    if backend != "redis":
        return  # Postgres cannot lose committed rows this way; the Redis case is the one to pin
    with open_log(url) as wal:
        wal.append("STEP_INTENT", "s", {}, 1)
        wal.barrier()
        wal.client.delete(*wal.keys.values())  # what a restart without persistence does
        wal.append("STEP_INTENT", "s", {}, 2)
        with pytest.raises(WALError, match="went back from 1 to 0"):
            wal.barrier(timeout=10)
        with pytest.raises(WALError):
            wal.append("STEP_INTENT", "s", {}, 3)


def test_open_log_resolves_urls_and_paths_and_refuses_unknown_schemes(url: str, tmp_path: Path) -> None:
    assert is_url(url) and not is_url(tmp_path / "a.wal")
    with open_log(tmp_path / "a.wal") as file_wal:
        assert isinstance(file_wal, FileWAL)
    with pytest.raises(ValueError, match="unknown log URL scheme"):
        open_log("mysql://127.0.0.1/db")
    missing = url.replace("log=", "log=missing-")
    with pytest.raises(LogNotFound, match="nothing was created"):
        open_log(missing, create=False)
    with open_log(url) as wal:
        assert "password" not in wal.location and "log=" in wal.location
        with open_log(wal.location) as again:  # the location opens the same log
            wal.barrier(wal.append("SAGA_STARTED", "s", {}))
            assert seqs(again) == [1]


def test_local_copy_is_the_stored_log_byte_for_byte(url: str) -> None:
    with open_log(url) as wal:
        for i in range(3):
            wal.append("STEP_COMMITTED", "s", {"i": i, "text": "naïve\u2028"}, i)
        wal.barrier()
        stored = [line for _, line in wal.lines_after(0)]
    with local_copy(url) as path:
        assert path.read_text(encoding="utf-8") == "".join(f"{line}\n" for line in stored)
        assert verify_log(path).status == "intact"
        assert [r["seq"] for r in read_records(path)] == [1, 2, 3]
        snapshot = path
    assert not snapshot.exists()


def test_postgres_says_what_its_durability_rests_on(pg: str) -> None:
    with PostgresWAL(f"{pg}?log=t-{uuid.uuid4().hex[:8]}") as wal:
        assert wal.synchronous_commit == "on"
    with pytest.raises(Exception, match="plain lower-case SQL name"):
        PostgresWAL(f"{pg}?table=Robert');DROP")


def test_redis_says_what_its_durability_rests_on(rd: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with RedisWAL(f"{rd}?log=t-{uuid.uuid4().hex[:8]}") as wal:
        assert wal.persistence.startswith("none")  # the shared test server persists nothing
    server = ThrowawayRedis(tmp_path / "a")
    server.start()
    try:
        with RedisWAL(server.url) as wal:
            assert wal.persistence == "aof appendfsync=always"
    finally:
        server.stop()
    # Redis's default loads a torn append-only file, which a later restart replays (docs/FLEET.md).
    server = ThrowawayRedis(tmp_path / "b", load_truncated=True)
    server.start()
    try:
        with RedisWAL(server.url) as wal:
            assert wal.persistence == "aof appendfsync=always, aof-load-truncated=yes"
        assert "Set aof-load-truncated no" in caplog.text
    finally:
        server.stop()


def test_records_queued_at_exit_are_committed(url: str) -> None:
    import subprocess
    import sys

    code = (
        "import sys; from agent_saga import open_log\n"
        "wal = open_log(sys.argv[1], linger=5.0)\n"  # nobody waits: the flusher would sit on it
        "wal.append('SAGA_STARTED', 's', {'last': True})\n"
    )
    done = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with open_log(url) as wal:
        assert [r["body"] for r in wal.records()] == [{"last": True}]


# The tables as PostgresWAL made them before its commits let go of the head before the flush
# (main at d4b49e5), written out so that a change of the code's own statements cannot change them.
_TODAYS_TABLES = (
    "CREATE TABLE {t} (log text NOT NULL, seq bigint NOT NULL, saga text NOT NULL, type text NOT NULL, "
    "line text NOT NULL, PRIMARY KEY (log, seq))",
    "CREATE TABLE {t}_head (log text PRIMARY KEY, seq bigint NOT NULL, hash text NOT NULL, "
    "rewrites bigint NOT NULL DEFAULT 0)",
    "CREATE TABLE {t}_writers (log text NOT NULL, writer text NOT NULL, ticket bigint NOT NULL, "
    "PRIMARY KEY (log, writer))",
)


def _drop_tables(conn: Any, table: str) -> None:
    for suffix in ("", "_head", "_writers"):
        conn.execute(f"DROP TABLE IF EXISTS {table}{suffix}")


def test_postgres_continues_a_log_in_tables_of_the_earlier_layout(pg: str, tmp_path: Path) -> None:
    import psycopg

    path = tmp_path / "earlier.wal"
    with FileWAL(path) as wal, saga_scope(wal, name="earlier") as s:
        s.execute(tool="crm.add", semantics=C, forward=lambda: {"id": 1}, compensate=undo)
    earlier = list(read_records(path))
    table = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        try:
            for statement in _TODAYS_TABLES:
                conn.execute(statement.format(t=table))
            for record, line in zip(earlier, path.read_text().splitlines(), strict=True):
                conn.execute(f"INSERT INTO {table} VALUES ('l', %s, %s, %s, %s)",
                             (record["seq"], record["saga"], record["type"], line))
            conn.execute(f"INSERT INTO {table}_head VALUES ('l', %s, %s, 0)", (earlier[-1]["seq"], earlier[-1]["hash"]))
            conn.execute(f"INSERT INTO {table}_writers VALUES ('l', 'gone', 7)")
            with PostgresWAL(f"{pg}?log=l&table={table}") as wal, saga_scope(wal, name="later") as s:
                s.execute(tool="crm.add", semantics=C, forward=lambda: {"id": 2}, compensate=undo)
            with PostgresWAL(f"{pg}?log=l&table={table}", create=False) as wal:
                records = list(wal.records())
        finally:
            _drop_tables(conn, table)
    assert records[: len(earlier)] == earlier and len(records) > len(earlier)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert verify_records(records).status == "intact"  # the new records chain onto the earlier ones


@pytest.mark.parametrize("create", [True, False], ids=["create", "open-only"])
def test_postgres_refuses_tables_of_another_layout_in_one_line(pg: str, create: bool) -> None:
    import psycopg

    table = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg, autocommit=True) as conn:
        try:
            for statement in _TODAYS_TABLES:
                conn.execute(statement.format(t=table))
            conn.execute(f"INSERT INTO {table}_head VALUES ('l', 0, 'x', 0)")
            conn.execute(f"ALTER TABLE {table}_writers ALTER COLUMN ticket TYPE text")  # not a log's table
            with pytest.raises(WALError) as refused:
                PostgresWAL(f"{pg}?log=l&table={table}", create=create)
        finally:
            _drop_tables(conn, table)
    message = str(refused.value)
    assert "\n" not in message
    assert f"table {table}_writers has (log text, writer text, ticket text)" in message
    assert "(log text, writer text, ticket bigint)" in message and "?table=" in message
