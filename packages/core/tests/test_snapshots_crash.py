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


def test_an_in_process_snapshot_of_a_killed_process_is_escalated_not_restored(tmp_path: Path) -> None:
    import subprocess
    import sys

    from recovery_checks import env_for, wait_until_expired
    from snapshot_crash import WORKER

    from agent_saga.recovery import RecoveryDaemon

    wal = tmp_path / "saga.wal"
    env = env_for(tmp_path, SNAPSHOT_WORLD=str(tmp_path), SNAPSHOT_CRASH_AT="after-in-process-snapshot")
    done = subprocess.run([sys.executable, str(WORKER), str(wal), "in-process", ""], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -9, done.stderr
    wait_until_expired()
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        report = daemon.sweep()
    assert [(a.step, a.kind) for a in report.actions] == [(1, "escalate"), (None, "finish")], report.actions
    assert "cannot run outside the process that made it" in report.actions[0].detail
    assert [e.kind for e in report.new_escalations] == ["not-recoverable"]
