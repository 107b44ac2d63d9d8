"""RepairSession on PostgresWAL and RedisWAL: the same scenarios as test_repair.py's FileWAL ones.

The claim a session takes is the daemon's on that server (a Postgres advisory lock, a
Redis key), so a second operator on another connection is refused just as a daemon is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))

from repair_checks import (
    check_a_failed_continuation_unwinds_everything_once,
    check_a_second_open_is_refused,
    check_an_abandoned_repair_is_finished_by_the_daemon,
    check_the_seed_snippet,
    repair_world,
)

__all__ = ["repair_world"]  # the fixture, imported for pytest

pytestmark = pytest.mark.usefixtures("repair_world")


async def test_the_seed_snippet_runs_with_a_real_continuation(server_wal: object, url: str) -> None:
    await check_the_seed_snippet(server_wal, url)  # type: ignore[arg-type]


async def test_a_failed_continuation_unwinds_the_whole_transaction_once(server_wal: object) -> None:
    await check_a_failed_continuation_unwinds_everything_once(server_wal, server_wal)  # type: ignore[arg-type]


async def test_a_second_operator_on_another_connection_is_refused(server_wal: object, url: str) -> None:
    # The first operator holds the log object; the second names it by URL (a connection of its own).
    await check_a_second_open_is_refused(server_wal, server_wal, url)  # type: ignore[arg-type]


async def test_an_abandoned_repair_is_unwound_by_the_daemon(server_wal: object) -> None:
    await check_an_abandoned_repair_is_finished_by_the_daemon(server_wal, server_wal)  # type: ignore[arg-type]
