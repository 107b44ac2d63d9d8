"""The one log contract (``wal_contract``) for the logs of the core lane: FileWAL and MemoryWAL.

The same test bodies run against PostgresWAL and RedisWAL on real servers in
``fleet/test_wal_contract_servers.py``. FileWAL stalls the way it does in production:
another writer (a process, a compaction) holds the file's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wal_contract import *  # noqa: F403 - the contract's test bodies run here
from wal_contract import Backend

from agent_saga import WAL, FileWAL, MemoryWAL
from agent_saga.log import maintenance


@contextlib.contextmanager
def _hold_the_file_lock(wal: WAL) -> Iterator[None]:
    assert isinstance(wal, FileWAL)
    fd = os.open(wal.path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the flusher to let go (it does when idle)
        yield
    finally:
        os.close(fd)  # releases the lock


class _FileRewrites:
    """A log file's rewrites, through the public functions of ``log.maintenance``."""

    def __init__(self, wal: WAL) -> None:
        assert isinstance(wal, FileWAL)
        self.path = wal.path

    def redact_record(self, seq: int, **options: Any) -> Any:
        return maintenance.redact_record(self.path, seq, **options)

    def compact(self, **options: Any) -> Any:
        return maintenance.compact(self.path, **options)


def _file_bytes(wal: WAL) -> int:
    assert isinstance(wal, FileWAL)
    return wal.path.stat().st_size


def _file(tmp_path: Path) -> Backend:
    counter = iter(range(1_000_000))

    def make(**options: Any) -> WAL:
        return FileWAL(tmp_path / f"contract-{next(counter)}.wal", **options)

    def reopen(wal: WAL) -> WAL:
        assert isinstance(wal, FileWAL)
        return FileWAL(wal.path)

    return Backend("file", make, reopen, _hold_the_file_lock, _FileRewrites, _file_bytes)


def _memory() -> Backend:
    return Backend("memory", lambda **options: MemoryWAL(), lambda wal: wal)


@pytest.fixture(params=["file", "memory"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = _file(tmp_path) if request.param == "file" else _memory()
    yield made
    made.close_all()


@pytest.fixture(params=["file"])
def durable_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = _file(tmp_path)
    yield made
    made.close_all()
