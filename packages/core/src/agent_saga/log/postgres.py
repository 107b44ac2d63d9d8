"""PostgresWAL: one log shared by every process and host that reaches one database.

Records are the file log's records (same header, body, salt and hash; see
``codec``), one row each, the line stored as sealed. One hash chain runs across
all writers: the log's *head row* holds the last sequence number and hash, and a
commit locks it (``SELECT ... FOR UPDATE``), continues the chain from it, copies
its rows in and moves the head, all in one transaction. The head row is the
log's sequence: a Postgres ``SEQUENCE`` hands out numbers outside transactions,
so a rolled-back commit would leave a hole that reads as a break in the chain;
the head row moves with the rows or not at all, so the numbers have no gaps.

Group commit: each process's flusher puts every record queued meanwhile (every
saga, every thread) into one transaction. That transaction commits with
``synchronous_commit`` off (for itself only), so the head row's lock is let go as
soon as its commit is in the server's WAL, without waiting for the disk; the
writer then waits for the flush with a second, one-statement commit at the
session's level (its marker written again), whose flush covers everything before
it in the WAL. Writers in other processes therefore queue on the head only for the
few round trips of a batch, and their flushes overlap, which the server's own
group commit takes together. (Holding the lock through the flush serialised the
processes' flushes: four processes wrote 1.0-1.3x one's steps. One chain per
writer would not wait either, but every reader, verify and the recovery fold read
one chain in order; this keeps the layout and the chain as they were.) A batch is
thus visible to readers before it is durable, as a file's written lines are
before their ``fdatasync``; a server crash can lose it only together with
everything after it in the WAL, so no writer's barrier was reached on a record
chained onto it.

A writer that has the log to itself commits a small batch in one statement
instead: its last commit found the head where the one before had left it, so it
chains the batch onto that head without reading it, and one statement moves the
head only from there, writing the rows and the marker only if it did. That
statement is its own transaction at the session's ``synchronous_commit``, so it
returns flushed: one round trip in place of a transaction of several and a second
commit (a lone step on a fast local server took about three quarters of the time,
docs/BENCHMARKS.md). It holds the head row
through its flush, which costs nobody anything while nobody else writes; once
another writer has moved the head the statement writes nothing and the batch
takes the locked way above, and so does every commit after it until one finds
the head where this writer had left it.

Durability is Postgres's own: a barrier returns once the flush's commit returned,
which with ``synchronous_commit = on`` (the server default) means the WAL was
flushed to disk up to it, and with synchronous replicas configured, also reached them.
With ``synchronous_commit = off`` a server crash can lose the last commits
(never corrupt them); :attr:`PostgresWAL.synchronous_commit` says what the
server runs with, and a warning is logged when it is off.

A commit whose connection broke may or may not have landed. The same transaction
records the writer's last committed ticket (``<table>_writers``); the retry reads
it back, inside its own transaction after taking the head row's lock, and skips a
batch that did land (then only waits for the flush again), so neither a restart of
the server nor a commit the server finished only after the client gave up writes a
record twice. Needs ``pip install 'agent-saga[postgres]>=3.0.0'`` (psycopg 3).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from typing import Any, Unpack

from agent_saga.errors import ConfigurationError, WALError
from agent_saga.log.codec import decode_line, seal
from agent_saga.log.group import Entry, GroupCommitWAL, LogKeywords, LogOptions
from agent_saga.log.records import AUDIT_SAGA, GENESIS, Record
from agent_saga.log.rewrite import Change, Rewritable, Stored
from agent_saga.log.server import LogNotFound, decode_stored, split_url

__all__ = ["PostgresWAL", "import_psycopg"]

log = logging.getLogger("agent_saga.wal")

DEFAULT_TABLE = "agent_saga_wal"
DEFAULT_LOG = "default"
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,40}\Z")
_PAGE = 2000
#: The largest batch committed in one statement (_commit_alone): a lone saga's batches are a record
#: or two; larger ones come with many sagas at once, whose round trips a batch shares anyway, and
#: each size is a statement of its own, prepared once per connection.
_ALONE_ROWS = 16


def import_psycopg() -> Any:
    """The psycopg module, or a one-line error naming the extra to install."""
    try:
        import psycopg
    except ImportError:
        raise ConfigurationError(
            "the Postgres backend needs psycopg 3: pip install 'agent-saga[postgres]>=3.0.0'"
        ) from None
    return psycopg


class PostgresWAL(GroupCommitWAL, Rewritable):
    """A shared, durable log in a Postgres database.

    ``url`` is a libpq URL (``postgresql://user@host:port/db``); two query
    parameters are ours: ``log`` (which log, default ``default``: many logs can
    share one table) and ``table`` (default ``agent_saga_wal``). The tables are
    created on first use. The other keywords are FileWAL's (group commit,
    bounded barriers, backpressure, encryption).
    """

    backend = "postgres"

    def __init__(
        self,
        url: str,
        *,
        options: LogOptions | None = None,
        connect_timeout: float = 5.0,
        create: bool = True,
        **keywords: Unpack[LogKeywords],
    ) -> None:
        self._psycopg = import_psycopg()
        self._conninfo, ours, location = split_url(url, log=DEFAULT_LOG, table=DEFAULT_TABLE)
        table = ours["table"]
        if not _IDENTIFIER.match(table):
            raise ConfigurationError(
                f"table={table!r} is not a plain lower-case SQL name (letters, digits, _; at most 41)"
            )
        if not ours["log"]:
            raise ConfigurationError("log= must name the log (a non-empty string), e.g. ?log=orders")
        super().__init__(location, options, **keywords)
        self.log_name = ours["log"]
        self.table = table
        self.connect_timeout = connect_timeout
        self._sql = _Statements(self._psycopg, table)
        self._conn: Any = None
        self._uncertain = False  # the last commit failed on a broken connection: did it land?
        # Where this writer's last commit left the head (seq, hash), and whether that commit found
        # the head where the one before had left it: nobody else wrote in between (_commit_alone).
        self._left: tuple[int, str] | None = None
        self._solo = False
        self.solo_commits = 0  # batches committed in one statement, for benchmarks and tests
        try:
            conn = self._connect_writer()
        except self._psycopg.Error as err:
            raise WALError(f"cannot open the log {self.location}: {err}".strip()) from err
        try:
            if create:
                with conn.transaction():
                    # Creating tables races with other processes doing the same: serialise on a lock.
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agent-saga-schema:{table}",))
                    for statement in self._sql.schema:
                        conn.execute(statement)
                    conn.execute(self._sql.init_head, (self.log_name, GENESIS))
            elif not self._exists(conn):
                raise LogNotFound(f"no log named {self.log_name!r} at {self.location} (nothing was created)")
            self._check_layout(conn)
            self.synchronous_commit = str(conn.execute("SHOW synchronous_commit").fetchone()[0])
        except BaseException:
            conn.close()
            raise
        if self.synchronous_commit == "off":
            log.warning(
                "%s: the server runs with synchronous_commit=off: a committed record can be lost if the "
                "server crashes. Set it to on for this role or database", self.location,
            )
        self._conn = conn
        self._start()

    def _exists(self, conn: Any) -> bool:
        found = conn.execute("SELECT to_regclass(%s)", (f"{self.table}_head",)).fetchone()[0]
        return found is not None and conn.execute(self._sql.read_head, (self.log_name,)).fetchone() is not None

    def _check_layout(self, conn: Any) -> None:
        """Refuse tables of this name whose columns are not the ones this code reads and writes.

        A table made by something else (or edited) would otherwise fail at the first commit, with
        the driver's error, after the caller had been told the log was open.
        """
        found: dict[str, list[tuple[str, str]]] = {}
        for table, column, kind in conn.execute(self._sql.columns, (list(_LAYOUT),)):
            found.setdefault(str(table).removeprefix(self.table), []).append((str(column), str(kind)))
        for suffix, expected in _LAYOUT.items():
            if found.get(suffix) != expected:
                have = ", ".join(f"{c} {k}" for c, k in found.get(suffix, [])) or "no columns"
                want = ", ".join(f"{c} {k}" for c, k in expected)
                raise WALError(
                    f"{self.location}: table {self.table + suffix} has ({have}), not the layout of a PostgresWAL "
                    f"table ({want}); name tables of its own with ?table=NAME"
                )

    # -- connections ------------------------------------------------------------------

    def connect(self) -> Any:
        """A new autocommit connection to the log's database (for the recovery state beside it)."""
        return self._connect()

    def _connect(self) -> Any:
        return self._psycopg.connect(
            self._conninfo, connect_timeout=max(1, round(self.connect_timeout)), autocommit=True,
            application_name="agent-saga",
        )

    def _connect_writer(self) -> Any:
        conn = self._connect()
        # READ COMMITTED whatever the role's default: each statement of a commit then sees what
        # committed before it, so the head lock and the marker read after it see the commit that
        # held the lock (another writer's, or an earlier attempt of ours). Under REPEATABLE READ
        # or SERIALIZABLE the lock fails on it instead, and the commit starts over on a new
        # connection, after a backoff, each time two writers meet on the head row.
        conn.isolation_level = self._psycopg.IsolationLevel.READ_COMMITTED
        return conn

    def _disconnect(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _transient(self, err: BaseException) -> bool:
        if isinstance(err, self._psycopg.OperationalError):
            self._disconnect()  # reconnect on the next attempt
            return True
        return False

    # -- writing -----------------------------------------------------------------------

    def _commit(self, batch: list[Entry]) -> None:
        if self._conn is None:
            self._conn = self._connect_writer()
        conn = self._conn
        last_ticket = self._batch_end
        retry, self._uncertain = self._uncertain, True
        alone = self._solo and not retry and len(batch) <= _ALONE_ROWS
        if not (alone and self._commit_alone(conn, batch, last_ticket)):
            self._append(conn, batch, last_ticket, retry)
            # In doubt until flushed: a retry after a connection lost here finds the marker (the
            # batch landed, nothing is written again) and flushes once more.
            self._flush(conn, last_ticket)
        self._uncertain = False

    def _commit_alone(self, conn: Any, batch: list[Entry], last_ticket: int) -> bool:
        """Commit ``batch`` in one statement, chained onto the head where this writer left it; False,
        with nothing written, if another writer has moved the head since.

        A connection lost during the statement leaves the batch in doubt like any commit: the
        retry takes the locked way, which reads the marker the statement wrote with the rows.
        """
        assert self._left is not None  # (_solo is set only together with it)
        seq, prev = self._left
        lines, head, count = self._sealed(batch, seq, prev)
        rows: list[Any] = []
        for i, entry in enumerate(batch):
            rows += (seq + 1 + i, entry[2], entry[1], lines[i])
        try:
            moved = conn.execute(self._sql.commit_alone(count), (
                seq + count, head, self.log_name, seq, prev, *rows, self.writer, last_ticket,
            )).fetchone()
        except self._psycopg.errors.SerializationFailure:
            # A role whose default isolation is REPEATABLE READ or SERIALIZABLE: another writer moved
            # the head while the statement waited for it, and the statement rolled back.
            moved = None
        if moved is None:
            self._solo = False
            return False
        self._left = (seq + count, head)
        self.solo_commits += 1
        return True

    def _append(self, conn: Any, batch: list[Entry], last_ticket: int, retry: bool) -> None:
        """Seal ``batch`` onto the chain and write it, committed without waiting for the flush."""
        with conn.transaction(), conn.cursor() as cur:
            seq, prev, _ = cur.execute(self._sql.lock_head_unflushed, (self.log_name,)).fetchone()
            # The marker is read only now, under the head row's lock: an earlier attempt whose
            # COMMIT the server got still holds that lock until it lands, so it is visible here
            # (read before the lock, it could land after the read and the batch be sealed twice).
            # One that never got to COMMIT rolls back. The head just read is the server's own.
            if retry:
                row = cur.execute(self._sql.writer_ticket, (self.log_name, self.writer)).fetchone()
                if row is not None and row[0] >= last_ticket:
                    self._left, self._solo = None, False  # where it left the head is not known here
                    return  # it landed before (or while) the connection died
            self._solo = (seq, prev) == self._left
            lines, head, count = self._sealed(batch, seq, prev)
            with cur.copy(self._sql.copy_in) as copy:
                for i, entry in enumerate(batch):
                    copy.write_row((self.log_name, seq + 1 + i, entry[2], str(entry[1]), lines[i]))
            cur.execute(self._sql.move_head_and_mark,
                        (seq + count, head, self.log_name, self.log_name, self.writer, last_ticket))
        self._left = (seq + count, head)

    def _sealed(self, batch: list[Entry], seq: int, prev: str) -> tuple[list[str], str, int]:
        """``batch`` sealed onto the chain after record ``seq`` of hash ``prev``: its lines, the last hash, its size."""
        data, head, count = seal(
            ((seq + 1 + i, *entry) for i, entry in enumerate(batch)), prev, self.chain, self.encryptor
        )
        return data.decode().split("\n")[:count], head, count

    def _flush(self, conn: Any, last_ticket: int) -> None:
        """Wait until everything this connection committed is durable (the server's WAL flushed).

        A commit at the session's ``synchronous_commit`` returns once the server's WAL is
        flushed up to its own commit record, which lies after the batch's: rewriting the
        writer's marker is such a commit, and the smallest one that always writes (an
        ``UPDATE`` that matched no row would write nothing and wait for nothing).
        """
        conn.execute(self._sql.mark_writer, (self.log_name, self.writer, last_ticket))

    def _release(self, clean: bool) -> None:
        if clean:
            try:  # a cleanly closed writer has no commit in doubt: its marker can go
                with self._connect() as conn:
                    conn.execute(self._sql.forget_writer, (self.log_name, self.writer))
            except self._psycopg.Error:
                pass

    # -- reading -----------------------------------------------------------------------

    def lines_after(self, seq: int = 0) -> Iterator[tuple[int, str]]:
        """(seq, stored line) of every committed record after ``seq``, oldest first, one snapshot."""
        with self._connect() as conn:
            conn.autocommit = False
            conn.isolation_level = self._psycopg.IsolationLevel.REPEATABLE_READ
            with conn.transaction(), conn.cursor(name="agent_saga_read") as cur:
                cur.itersize = _PAGE
                cur.execute(self._sql.read_after, (self.log_name, seq))
                yield from cur

    def head(self) -> tuple[int, str, int]:
        """The last committed (seq, hash) and how many rewrites (compactions, redactions) the log had."""
        with self._connect() as conn:
            row = conn.execute(self._sql.read_head, (self.log_name,)).fetchone()
        return (int(row[0]), str(row[1]), int(row[2])) if row else (0, GENESIS, 0)

    def records(self) -> Iterator[Record]:
        """Every committed record, oldest first (call ``barrier()`` first to include queued ones)."""
        for _, line in self.lines_after(0):
            yield decode_stored(line, self.encryptor, self.location)

    # -- maintenance -------------------------------------------------------------------

    def _rewrite(self, plan: Callable[[Stored], Change | None], action: str = "rewrite") -> None:
        with self._connect() as conn, conn.transaction(), conn.cursor() as cur:
            seq, head = cur.execute(self._sql.lock_head, (self.log_name,)).fetchone()
            lines = cur.execute(self._sql.read_after, (self.log_name, 0)).fetchall()
            change = plan(Stored([(int(s), str(line)) for s, line in lines], int(seq), str(head)))
            if change is None:
                return
            cur.executemany(self._sql.replace_line, [(line, self.log_name, s) for s, line in change.replaced.items()])
            if change.removed:
                cur.execute(self._sql.delete_seqs, (self.log_name, change.removed))
            if change.appended is not None:
                new_seq, line, new_head = change.appended
                cur.execute(self._sql.insert_row, (self.log_name, new_seq, AUDIT_SAGA, decode_line(line)["type"], line))
                cur.execute(self._sql.move_head_rewritten, (new_seq, new_head, self.log_name))


#: Each table's columns and types, in order, keyed by the suffix of its name: the only
#: layout this code writes (the same since the tables were first made: older logs read as is).
_LAYOUT = {
    "": [("log", "text"), ("seq", "bigint"), ("saga", "text"), ("type", "text"), ("line", "text")],
    "_head": [("log", "text"), ("seq", "bigint"), ("hash", "text"), ("rewrites", "bigint")],
    "_writers": [("log", "text"), ("writer", "text"), ("ticket", "bigint")],
}


class _Statements:
    """The SQL of one table family, built once with safely quoted names."""

    def __init__(self, psycopg: Any, table: str) -> None:
        sql = psycopg.sql
        t = sql.Identifier(table)
        head = sql.Identifier(f"{table}_head")
        writers = sql.Identifier(f"{table}_writers")

        def q(text: str) -> Any:
            return sql.SQL(text).format(t=t, head=head, writers=writers)

        self.schema = [
            q("CREATE TABLE IF NOT EXISTS {t} (log text NOT NULL, seq bigint NOT NULL, saga text NOT NULL, "
              "type text NOT NULL, line text NOT NULL, PRIMARY KEY (log, seq))"),
            q("CREATE TABLE IF NOT EXISTS {head} (log text PRIMARY KEY, seq bigint NOT NULL, "
              "hash text NOT NULL, rewrites bigint NOT NULL DEFAULT 0)"),
            q("CREATE TABLE IF NOT EXISTS {writers} (log text NOT NULL, writer text NOT NULL, "
              "ticket bigint NOT NULL, PRIMARY KEY (log, writer))"),
        ]
        # The columns of the tables of this family, each table's in order (the argument: the
        # names' suffixes); regclass reads the names as CREATE TABLE made them, on the search path.
        self.columns = sql.SQL(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod) FROM unnest(%s::text[]) AS s(suffix) "
            "JOIN pg_class c ON c.oid = to_regclass(quote_ident({name} || s.suffix)) "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY c.relname, a.attnum"
        ).format(name=sql.Literal(table))
        self.init_head = q("INSERT INTO {head} (log, seq, hash) VALUES (%s, 0, %s) ON CONFLICT DO NOTHING")
        # Lock the head for a commit that does not wait for the server's flush (set_config with
        # is_local: SET LOCAL for this transaction only): the lock is let go as soon as the commit
        # is in the server's WAL, and the flush is waited for after it (PostgresWAL._flush).
        self.lock_head_unflushed = q(
            "SELECT seq, hash, set_config('synchronous_commit', 'off', true) FROM {head} WHERE log = %s FOR UPDATE"
        )
        self.lock_head = q("SELECT seq, hash FROM {head} WHERE log = %s FOR UPDATE")
        self.read_head = q("SELECT seq, hash, rewrites FROM {head} WHERE log = %s")
        self.move_head_rewritten = q("UPDATE {head} SET seq = %s, hash = %s, rewrites = rewrites + 1 WHERE log = %s")
        self.copy_in = q("COPY {t} (log, seq, saga, type, line) FROM STDIN")
        # The head moved past a batch and the writer's marker, in one round trip: the head
        # stays locked until the commit, so every round trip in it holds the other writers off.
        self.move_head_and_mark = q(
            "WITH moved AS (UPDATE {head} SET seq = %s, hash = %s WHERE log = %s) "
            "INSERT INTO {writers} (log, writer, ticket) VALUES (%s, %s, %s) "
            "ON CONFLICT (log, writer) DO UPDATE SET ticket = EXCLUDED.ticket"
        )
        self._q = q
        self._alone: dict[int, Any] = {}
        self.insert_row = q("INSERT INTO {t} (log, seq, saga, type, line) VALUES (%s, %s, %s, %s, %s)")
        self.mark_writer = q(
            "INSERT INTO {writers} (log, writer, ticket) VALUES (%s, %s, %s) "
            "ON CONFLICT (log, writer) DO UPDATE SET ticket = EXCLUDED.ticket"
        )
        self.writer_ticket = q("SELECT ticket FROM {writers} WHERE log = %s AND writer = %s")
        self.forget_writer = q("DELETE FROM {writers} WHERE log = %s AND writer = %s")
        self.read_after = q("SELECT seq, line FROM {t} WHERE log = %s AND seq > %s ORDER BY seq")
        self.replace_line = q("UPDATE {t} SET line = %s WHERE log = %s AND seq = %s")
        self.delete_seqs = q("DELETE FROM {t} WHERE log = %s AND seq = ANY(%s)")

    def commit_alone(self, rows: int) -> Any:
        """PostgresWAL._commit_alone's statement for a batch of ``rows``: the head moved only from where
        the writer left it, and the rows and the marker written only if it was.

        Data-modifying WITH clauses all run, once, on one snapshot; an UPDATE that waited for the row
        re-checks its WHERE on the version it then sees. The rows are a VALUES list, one statement per
        size: with ``unnest`` of text arrays the commit took 1.6-1.9x as long (docs/BENCHMARKS.md).
        """
        found = self._alone.get(rows)
        if found is None:
            values = ", ".join(["(%s::bigint, %s, %s, %s)"] * rows)
            found = self._alone[rows] = self._q(
                "WITH moved AS (UPDATE {head} SET seq = %s, hash = %s WHERE log = %s AND seq = %s AND hash = %s "
                "RETURNING log), "
                "written AS (INSERT INTO {t} (log, seq, saga, type, line) "
                f"SELECT moved.log, r.seq, r.saga, r.type, r.line FROM moved, (VALUES {values}) AS r(seq, saga, type, line)) "
                "INSERT INTO {writers} (log, writer, ticket) SELECT log, %s, %s FROM moved "
                "ON CONFLICT (log, writer) DO UPDATE SET ticket = EXCLUDED.ticket RETURNING ticket"
            )
        return found
