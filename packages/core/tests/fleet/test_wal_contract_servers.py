"""The one log contract (``wal_contract``) for PostgresWAL and RedisWAL, on real servers.

The same test bodies as ``test_wal_contract.py`` (FileWAL, MemoryWAL). A server log stalls
the way it does in production: Postgres, another transaction holds the log's head row (as
a long maintenance rewrite does); Redis, the server process is stopped (SIGSTOP), so a
commit in flight waits for a reply, times out and is retried until the server answers.
"""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from servers import ThrowawayRedis
from wal_contract import *  # noqa: F403 - the contract's test bodies run here
from wal_contract import Backend

from agent_saga import WAL
from agent_saga.log.postgres import PostgresWAL
from agent_saga.log.redis import RedisWAL


@pytest.fixture(scope="module")
def stoppable_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayRedis]:
    server = ThrowawayRedis(tmp_path_factory.mktemp("contract-redis"))
    server.start()
    yield server
    server.stop()


def _stored_bytes(wal: WAL) -> int:
    assert isinstance(wal, (PostgresWAL, RedisWAL))
    return sum(len(line.encode()) + 1 for _, line in wal.lines_after(0))


def _postgres(pg: str) -> Backend:
    def make(**options: Any) -> WAL:
        return PostgresWAL(f"{pg}?log=contract-{uuid.uuid4().hex[:12]}", **options)

    def reopen(wal: WAL) -> WAL:
        assert isinstance(wal, PostgresWAL)
        return PostgresWAL(f"{pg}?log={wal.log_name}", create=False)

    @contextlib.contextmanager
    def hold_the_head_row(wal: WAL) -> Iterator[None]:
        assert isinstance(wal, PostgresWAL)
        with wal.connect() as conn, conn.transaction():
            conn.execute(wal._sql.lock_head, (wal.log_name,))
            yield

    return Backend("postgres", make, reopen, hold_the_head_row, lambda wal: wal, _stored_bytes)


def _redis(server: ThrowawayRedis) -> Backend:
    def make(**options: Any) -> WAL:
        return RedisWAL(f"{server.url}?log=contract-{uuid.uuid4().hex[:12]}", socket_timeout=1.0, **options)

    def reopen(wal: WAL) -> WAL:
        assert isinstance(wal, RedisWAL)
        return RedisWAL(f"{server.url}?log={wal.log_name}", create=False)

    @contextlib.contextmanager
    def stop_the_server(wal: WAL) -> Iterator[None]:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            server.proc.send_signal(signal.SIGCONT)

    return Backend("redis", make, reopen, stop_the_server, lambda wal: wal, _stored_bytes)


def _backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "postgres":
        return _postgres(request.getfixturevalue("pg"))
    return _redis(request.getfixturevalue("stoppable_redis"))


@pytest.fixture(params=["postgres", "redis"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = _backend(request)
    yield made
    made.close_all()


@pytest.fixture(params=["postgres", "redis"])
def durable_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = _backend(request)
    yield made
    made.close_all()

