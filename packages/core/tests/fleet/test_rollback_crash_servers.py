"""A worker SIGKILLed inside its own rollback, on PostgresWAL and RedisWAL.

The same crash as test_rollback_crash.py (a real worker killed inside its k-th
undo, then the real ``agent-saga recover``), with the log on a server: the
group-commit flusher holds records just as FileWAL's does, and the same barrier
before each undo must leave at most the undo in flight to be called again.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_saga.audit import verify_records

TESTS = Path(__file__).parent.parent
sys.path.insert(0, str(TESTS))

from rollback_crash import crash_in_rollback  # noqa: E402
from test_rollback_crash import COUNT, check  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kill_at", [3, COUNT])
def test_a_kill_inside_the_rollback_repeats_only_the_undo_in_flight(url: str, tmp_path: Path, kill_at: int) -> None:
    run = crash_in_rollback(url, tmp_path, COUNT, kill_at, "sync")
    check(run, kill_at)
    assert verify_records(run.after).status == "intact"
