"""Kill a real worker at each point of a durable-snapshot saga, then let the daemon restore.

Shared by test_snapshots_crash.py (FileWAL, FileSnapshotStore) and the fleet's
test_snapshots_servers.py (PostgresWAL/RedisWAL with their stores).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import snapshot_world as world
from recovery_checks import HERE, env_for, wait_until_expired

from agent_saga.recovery import RecoveryDaemon
from agent_saga.snapshots import collect

WORKER = HERE / "snapshot_worker.py"


def crash_and_recover(
    wal_at: str, kind: str, where: str, world_dir: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Run the worker to ``point`` ('' for no crash), recover, and say what is wrong ([] when nothing)."""
    monkeypatch.setenv("SNAPSHOT_WORLD", str(world_dir))  # the restore handler writes the world's state file
    monkeypatch.setenv("SNAPSHOT_STORE_NAME", f"{kind}-{uuid.uuid4().hex[:12]}")
    world_dir.mkdir(parents=True, exist_ok=True)
    (world_dir / "state.json").write_text(json.dumps(world.ORIGINAL))
    env = env_for(world_dir, SNAPSHOT_WORLD=str(world_dir), SNAPSHOT_CRASH_AT=point)
    done = subprocess.run([sys.executable, str(WORKER), wal_at, kind, where], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    problems: list[str] = []
    expected = -9 if point else 0
    if done.returncode != expected:
        return [f"[{point}] the worker exited {done.returncode}, not {expected}:\n{done.stderr[-2000:]}"]
    store = world.install(world.make_store(kind, where))
    if point:
        # Before the daemon: the saga is open, so a GC deletes none of its snapshots.
        early = collect(store, _records(wal_at))
        if early.deleted or early.refused:
            problems.append(f"[{point}] GC of an unsettled saga: {early.summary()}")
        wait_until_expired()
        with RecoveryDaemon(wal_at, lease_grace=0) as daemon:
            report = daemon.sweep()
        if len(report.recovered) != 1:
            problems.append(f"[{point}] the daemon did not finish the saga: {report.summary()} {report.actions}")
    state = world.read_state()
    if state != world.ORIGINAL:
        problems.append(f"[{point or 'no crash'}] the state is {state}, not the original {world.ORIGINAL}")
    settled = collect(store, _records(wal_at))
    if settled.refused or store.sagas():
        problems.append(f"[{point or 'no crash'}] GC after the saga settled left snapshots: {settled.summary()}")
    return problems


def _records(wal_at: str) -> Any:
    from agent_saga.log.resolve import open_log

    if "://" not in wal_at:
        return wal_at
    wal = open_log(wal_at)
    try:
        return list(wal.records())
    finally:
        wal.close()
