"""Durable snapshots on FileWAL: a worker SIGKILLed at each point, the daemon restores the state file."""

from __future__ import annotations

from pathlib import Path

import pytest
import snapshot_world as world
from snapshot_crash import crash_and_recover

pytestmark = pytest.mark.slow  # every test here runs another process


@pytest.mark.parametrize("point", ["", *world.POINTS])
def test_the_daemon_restores_a_durable_snapshot_after_kill_9(tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wal = tmp_path / "saga.wal"
    problems = crash_and_recover(str(wal), "file", str(tmp_path / "snapshots"), tmp_path / "world", point,
                                 monkeypatch)
    assert not problems, "\n".join(problems)
