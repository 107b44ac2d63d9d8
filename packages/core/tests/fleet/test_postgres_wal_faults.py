"""PostgresWAL when the client gives up on a commit the server is still finishing, made
deterministic against the real PostgreSQL (a follow-up of issue 25, item 6), and writers that
wait for their flush while others commit (issue 43, item 4).

A batch is one transaction: lock the head row, copy the rows in, move the head, mark the
writer. Once the server has received COMMIT, that transaction lands whatever became of the
client: a connection cut while the server is still committing (waiting on a synchronous
replica, running a deferred check) leaves the writer in doubt, and it retries on a new
connection. Here the old COMMIT is held server-side by a deferred constraint trigger that
waits for an advisory lock the test holds, the client's connection is cut through a TCP proxy
(``tcp_proxy.TcpProxy``), and the lock is let go only once the retry waits on the head row:
the order in which a marker read before the transaction finds nothing, and the batch would be
sealed a second time after the late commit, with an intact chain.

A batch is written in a transaction that does not wait for the server's flush, and the flush
is waited for by a second commit (the writer's marker written again) once the head row is let
go. The same trigger, told to hold only those flushes, holds a writer between the two: its
batch is in the log, its barrier not yet reached.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import psycopg
import pytest
from servers import _wait
from tcp_proxy import TcpProxy
from test_server_verdict import dead_saga, later, refunds

from agent_saga import WALStalled
from agent_saga.audit import verify_records
from agent_saga.log.postgres import PostgresWAL
from agent_saga.recovery import RecoveryDaemon


@dataclass
class Log:
    """A fresh log in tables of its own, its writer connected through a proxy the test can cut."""

    wal: PostgresWAL
    proxy: TcpProxy
    admin: Any  # a direct autocommit connection for the test's own statements
    table: str
    direct: str  # the server's own URL, not through the proxy

    def blocked_by(self, pid: int) -> int:
        """The backend that waits on a lock ``pid`` holds (waits until there is one)."""
        found: list[int] = []

        def check() -> bool:
            found[:] = [r[0] for r in self.admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (pid,)
            )]
            return bool(found)

        _wait(check, f"a backend blocked by {pid}")
        assert len(found) == 1, found
        return found[0]

    def query_of(self, pid: int) -> str:
        return str(self.admin.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()[0])


@pytest.fixture
def new_log(pg: str) -> Iterator[Callable[..., Log]]:
    made: list[Log] = []

    def make(isolation: str = "") -> Log:
        """``isolation``: the writer's session default (libpq ``options``), e.g. a role's."""
        parts = urlsplit(pg)
        assert parts.port is not None
        proxy = TcpProxy(parts.port)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{proxy.port}" if user else f"127.0.0.1:{proxy.port}"
        table = f"t_{uuid.uuid4().hex[:12]}"
        ours = {"log": "l", "table": table}
        if isolation:
            ours["options"] = f"-cdefault_transaction_isolation={isolation}"  # libpq reads no '+' as a space
        query = f"{parts.query}&" if parts.query else ""
        url = urlunsplit(parts._replace(netloc=netloc, query=query + urlencode(ours)))
        admin = psycopg.connect(pg, autocommit=True)
        # The old backend must not notice the cut on its own (Postgres's default, 0).
        assert admin.execute("SHOW client_connection_check_interval").fetchone() == ("0",)
        log = Log(PostgresWAL(url, linger=0), proxy, admin, table, pg)
        made.append(log)
        return log

    yield make
    for log in made:
        log.wal.close(timeout=5)
        log.proxy.stop()
        for suffix in ("", "_head", "_writers"):
            log.admin.execute(f"DROP TABLE IF EXISTS {log.table}{suffix}")
        log.admin.execute(f"DROP FUNCTION IF EXISTS {log.table}_hold()")
        log.admin.close()


def hold_commits_on(log: Log, key: int, *, flushes_only: bool = False, but: str = "") -> None:
    """Make the log's commits wait, at COMMIT, for advisory lock ``key`` (a deferred trigger).

    ``flushes_only``: only the commits that wait for the server's flush (not the batch's own,
    which runs with ``synchronous_commit`` off); ``but``: never the commits of this writer.
    """
    t = log.table
    only = " AND current_setting('synchronous_commit') <> 'off'" if flushes_only else ""
    log.admin.execute(
        f"CREATE FUNCTION {t}_hold() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN IF NEW.writer <> '{but}'{only} THEN PERFORM pg_advisory_xact_lock({key}); END IF; "
        f"RETURN NULL; END $$"
    )
    log.admin.execute(
        f"CREATE CONSTRAINT TRIGGER hold AFTER INSERT OR UPDATE ON {t}_writers "
        f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {t}_hold()"
    )


@contextmanager
def three_records_held(log: Log, **hold: Any) -> Iterator[tuple[Callable[[], None], int, int]]:
    """Record 0 committed, then records 1-3 appended while the log's commits (those ``hold`` names
    to :func:`hold_commits_on`) wait for a lock held here: yields what lets them go, the last
    record's ticket and the backend that waits."""
    wal = log.wal
    wal.barrier(wal.append("STEP_COMMITTED", "s", {"i": 0}, 0))
    key = random.getrandbits(62)
    hold_commits_on(log, key, **hold)
    holder = psycopg.connect(log.direct, autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        for i in (1, 2, 3):
            ticket = wal.append("STEP_COMMITTED", "s", {"i": i}, i)

        def release() -> None:
            holder.execute("SELECT pg_advisory_unlock(%s)", (key,))

        yield release, ticket, log.blocked_by(holder.info.backend_pid)
    finally:
        holder.close()


def bodies(log: Log) -> list[Any]:
    records = list(log.wal.records())
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert verify_records(records).status == "intact"
    return [r["body"]["i"] for r in records]


@pytest.mark.parametrize("isolation", ["", "serializable"], ids=["server-default", "role-serializable"])
def test_a_commit_the_server_finishes_after_the_client_gave_up_is_not_written_twice(
    new_log: Callable[..., Log], isolation: str
) -> None:
    log = new_log(isolation)
    wal = log.wal
    if isolation:  # the session's default is the role's; the writer's commits run READ COMMITTED
        assert wal._conn.execute("SHOW default_transaction_isolation").fetchone()[0] == isolation
    with three_records_held(log) as (release, ticket, old):
        # The writer's backend got COMMIT and is finishing it (in the deferred trigger).
        assert log.query_of(old) == "COMMIT"
        assert log.proxy.cut() == 1  # the client gives up; the server-side backend carries on
        # The retry, on a new connection, now waits for the head row the old commit holds.
        retry = log.blocked_by(old)
        assert retry != old
        release()  # the old commit lands first
        wal.barrier(ticket, timeout=30)
        # One retry, the cut's: the head lock did not fail on the late commit and start over.
        assert wal.retries == 1
    wal.barrier(wal.append("STEP_COMMITTED", "s", {"i": 4}, 4), timeout=30)  # and the log goes on
    assert bodies(log) == [0, 1, 2, 3, 4]  # once each: the retry found the batch landed


def test_a_commit_cut_before_its_commit_reached_the_server_is_written_once(
    new_log: Callable[..., Log],
) -> None:
    """The other side of the doubt: the old transaction never got COMMIT (it waited for the head
    row when the client gave up), so it rolls back, and the retry must write the batch."""
    log = new_log()
    wal = log.wal
    wal.barrier(wal.append("STEP_COMMITTED", "s", {"i": 0}, 0))
    locker = psycopg.connect(log.direct)
    try:
        locker.execute(f"SELECT seq FROM {log.table}_head FOR UPDATE")
        for i in (1, 2, 3):
            ticket = wal.append("STEP_COMMITTED", "s", {"i": i}, i)
        old = log.blocked_by(locker.info.backend_pid)
        assert "FOR UPDATE" in log.query_of(old)
        assert log.proxy.cut() == 1
        retry = log.blocked_by(old)
        assert retry != old
        locker.rollback()  # the old backend gets the row, finds its client gone, rolls back
        wal.barrier(ticket, timeout=30)
        assert wal.retries >= 1
    finally:
        locker.close()
    assert bodies(log) == [0, 1, 2, 3]


def test_a_flush_cut_after_its_batch_landed_writes_the_batch_once_and_flushes_again(
    new_log: Callable[..., Log],
) -> None:
    """The batch committed, its flush was cut: the retry finds the marker, writes nothing, and
    still waits for a flush of its own before the barrier is reached."""
    log = new_log()
    wal = log.wal
    with three_records_held(log, flushes_only=True) as (release, ticket, flush):
        assert f"{log.table}_writers" in log.query_of(flush)
        # The batch is in the log already, the head let go: only its flush waits.
        assert log.admin.execute(f"SELECT seq FROM {log.table}_head").fetchone() == (4,)
        assert log.proxy.cut() == 1
        # The retry's batch transaction found the marker and wrote nothing; its own flush (the
        # marker written again) now waits for the row the cut flush still holds.
        retry = log.blocked_by(flush)
        assert f"{log.table}_writers" in log.query_of(retry)
        with pytest.raises(WALStalled):  # not reached before a flush
            wal.barrier(ticket, timeout=0)
        release()
        wal.barrier(ticket, timeout=30)
        assert wal.retries == 1
    assert bodies(log) == [0, 1, 2, 3]


_WRITER = """
import sys
sys.path[:0] = sys.argv[2:]  # fleet/ and the tests above it (test_server_verdict imports refund_world)
from agent_saga.log.postgres import PostgresWAL
from test_server_verdict import dead_saga
dead_saga(PostgresWAL(sys.argv[1], linger=0), "a", "A")  # its barrier waits for the flush: killed there
"""


def test_a_writer_commits_while_another_waits_for_its_flush_and_the_chain_and_recovery_hold(
    new_log: Callable[..., Log],
) -> None:
    """Writer A's batch is in the log and its flush held (A then SIGKILLed, its barrier never
    reached); writer B takes the head, chains onto A's records and reaches its barrier. The
    log is one intact chain, A's records first, and recovery undoes each saga's charge once."""
    refunds.clear()
    log = new_log()
    b = log.wal
    key = random.getrandbits(62)
    hold_commits_on(log, key, flushes_only=True, but=b.writer)
    holder = psycopg.connect(log.direct, autocommit=True)
    url = f"{log.direct}{'&' if '?' in log.direct else '?'}log=l&table={log.table}"
    a: subprocess.Popen[bytes] | None = None
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))  # taken before A exists: its flush waits
        a = subprocess.Popen([sys.executable, "-c", _WRITER, url, str(Path(__file__).parent), str(Path(__file__).parents[1])])
        flush = log.blocked_by(holder.info.backend_pid)  # A's batch landed, its flush waits
        assert f"{log.table}_writers" in log.query_of(flush)
        a.send_signal(signal.SIGKILL)
        assert a.wait(timeout=60) == -signal.SIGKILL
        dead_saga(b, "b", "B")  # the head is free: B commits and flushes while A's flush still waits
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
    finally:
        if a is not None:
            a.kill()
            a.wait()
        holder.close()
    records = list(b.records())
    assert [(r["seq"], r["saga"]) for r in records] == [(1, "a"), (2, "a"), (3, "a"), (4, "b"), (5, "b"), (6, "b")]
    assert verify_records(records).status == "intact"
    for _ in range(2):  # the second sweep finds nothing left to do
        with RecoveryDaemon(url, clock=later, lease_grace=0) as daemon:
            daemon.sweep()
    assert sorted(refunds) == ["A", "B"]
    refunds.clear()


# A writer alone on the log commits a small batch in one statement chained onto where it left the
# head (PostgresWAL._commit_alone); a second writer that moved the head sends it back to the lock.

def _second_writer(log: Log) -> PostgresWAL:
    return PostgresWAL(f"{log.direct}{'&' if '?' in log.direct else '?'}log=l&table={log.table}", linger=0)


def _commit(wal: PostgresWAL, i: int) -> None:
    wal.barrier(wal.append("STEP_COMMITTED", "s", {"i": i}, i), timeout=30)


def test_a_writer_alone_commits_in_one_statement_until_another_writer_moves_the_head(
    new_log: Callable[..., Log],
) -> None:
    log = new_log()
    a = log.wal
    _commit(a, 0)  # the head's place is not known yet: the lock
    _commit(a, 1)  # the lock, which finds the head where A left it
    assert a.solo_commits == 0
    _commit(a, 2)
    assert a.solo_commits == 1  # one statement
    b = _second_writer(log)
    try:
        _commit(b, 3)
    finally:
        b.close()
    _commit(a, 4)  # the statement finds the head moved, writes nothing, and the lock commits the batch
    _commit(a, 5)  # the lock again, which finds the head where A left it
    assert a.solo_commits == 1
    _commit(a, 6)
    assert a.solo_commits == 2
    assert bodies(log) == [0, 1, 2, 3, 4, 5, 6]  # once each, one chain, seq without a gap


@pytest.mark.parametrize("isolation", ["", "serializable"], ids=["server-default", "role-serializable"])
def test_a_statement_that_waited_while_another_writer_moved_the_head_writes_nothing_and_the_lock_commits(
    new_log: Callable[..., Log], isolation: str
) -> None:
    """Forced: B holds the head row in its COMMIT while A's one statement waits for it. B lands; A's
    statement, re-checking the head (or failing to serialise, for a role whose default isolation is
    SERIALIZABLE), writes nothing, and A commits the batch the locked way, chained after B's."""
    log = new_log(isolation)
    a = log.wal
    _commit(a, 0)
    _commit(a, 1)  # A now has the log to itself
    key = random.getrandbits(62)
    hold_commits_on(log, key, but=a.writer)  # B's commits wait at COMMIT, holding the head row
    holder = psycopg.connect(log.direct, autocommit=True)
    b = _second_writer(log)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        b_ticket = b.append("STEP_COMMITTED", "s", {"i": 2}, 2)
        b_backend = log.blocked_by(holder.info.backend_pid)
        assert log.query_of(b_backend) == "COMMIT"
        a_ticket = a.append("STEP_COMMITTED", "s", {"i": 3}, 3)
        assert log.query_of(log.blocked_by(b_backend)).startswith("WITH moved AS")  # A's one statement waits
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))
        b.barrier(b_ticket, timeout=30)
        a.barrier(a_ticket, timeout=30)
    finally:
        b.close()
        holder.close()
    assert a.solo_commits == 0  # the statement wrote nothing
    assert a.retries == 0  # and its refusal was not taken for a lost connection
    assert bodies(log) == [0, 1, 2, 3]


def test_a_one_statement_commit_the_server_finishes_after_the_client_gave_up_is_not_written_twice(
    new_log: Callable[..., Log],
) -> None:
    """As the first test of this file, for the one statement: it is held in its commit, the client's
    connection is cut, and the retry (the locked way) waits for the head row the statement holds."""
    log = new_log()
    wal = log.wal
    _commit(wal, 0)
    _commit(wal, 1)
    key = random.getrandbits(62)
    hold_commits_on(log, key)
    holder = psycopg.connect(log.direct, autocommit=True)
    try:
        holder.execute("SELECT pg_advisory_lock(%s)", (key,))
        ticket = wal.append("STEP_COMMITTED", "s", {"i": 2}, 2)
        old = log.blocked_by(holder.info.backend_pid)
        assert log.query_of(old).startswith("WITH moved AS")  # the one statement, in its commit
        assert log.proxy.cut() == 1
        retry = log.blocked_by(old)  # the retry takes the lock: it waits for the head row
        assert retry != old
        holder.execute("SELECT pg_advisory_unlock(%s)", (key,))  # the old statement lands first
        wal.barrier(ticket, timeout=30)
        assert wal.retries == 1
    finally:
        holder.close()
    _commit(wal, 3)
    assert bodies(log) == [0, 1, 2, 3]  # once each: the retry found the marker the statement wrote
