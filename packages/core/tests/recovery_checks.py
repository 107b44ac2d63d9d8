"""Shared helpers for the recovery tests: run the worker, read the world and the log."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from agent_saga.log.codec import canonical, chain_hash
from agent_saga.log.file import read_records
from agent_saga.log.records import GENESIS

__all__ = [
    "HERE",
    "WORKER",
    "chain_ok",
    "env_for",
    "read_log",
    "recover_twice",
    "run_worker",
    "wait_until_expired",
    "world_counts",
]

HERE = Path(__file__).parent
WORKER = HERE / "recovery_worker.py"
LEASE_TTL = 0.3


def env_for(world: Path, role: str = "worker", **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RECOVERY_CRASH_AT", None)
    env.pop("RECOVERY_CRASH_EFFECT", None)
    env.update({
        "RECOVERY_WORLD": str(world), "RECOVERY_ROLE": role,
        "AGENT_SAGA_LEASE_TTL": str(LEASE_TTL),
        "PYTHONPATH": os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    })
    env.update(extra)
    return env


def run_worker(wal: Path, world: Path, scenario: str, *args: str, **extra: str) -> int:
    done = subprocess.run(
        [sys.executable, str(WORKER), str(wal), scenario, *args],
        env=env_for(world, **extra), capture_output=True, text=True, timeout=60, check=False,
    )
    if done.returncode not in (0, 137):
        raise AssertionError(f"worker failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.returncode


def wait_until_expired() -> None:
    # The worker is dead; its lease (renewed at most LEASE_TTL ago) runs out by itself.
    time.sleep(LEASE_TTL + 0.1)


def read_log(path: Path) -> list[dict[str, Any]]:
    return list(read_records(path))


def chain_ok(path: Path) -> bool:
    """The chain rule checked directly (and by agent_saga.audit when it is installed)."""
    prev = GENESIS
    expected_seq = None
    for record in read_records(path):
        body = canonical(record["body"])
        digest = hashlib.sha256(bytes.fromhex(record["salt"]) + body.encode()).hexdigest()
        if digest != record["digest"] or record["prev"] != prev or chain_hash(record) != record["hash"]:
            return False
        if expected_seq is not None and record["seq"] != expected_seq:
            return False
        expected_seq = record["seq"] + 1
        prev = record["hash"]
    try:
        from agent_saga.audit import verify_log
    except ImportError:
        return True
    return bool(verify_log(path).ok)


def world_counts(items: list[dict[str, Any]], ev: str, role: str | None = None) -> Counter[str]:
    return Counter(e["key"] for e in items if e["ev"] == ev and (role is None or e["role"] == role))


def recover_twice(wal: Path, directory: Path, forwards: Collection[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """Recover a dead worker's log twice: (its records, the world's entries, what the two sweeps got wrong).

    Wrong: the second sweep changed anything; an effect or compensation applied twice; the
    daemon called a compensation twice, or one the worker's log records as done; the daemon ran
    a forward call (an op in ``forwards``). Call with $RECOVERY_WORLD at ``directory``.
    """
    import recovery_world as world

    from agent_saga.recovery import RecoveryDaemon

    before = read_log(wal)
    done_by_worker = {r["body"]["key"] for r in before if r["type"] == "STEP_COMPENSATED"}
    with RecoveryDaemon(wal, lease_grace=0) as daemon:
        daemon.sweep()
    after_first, world_first = read_log(wal), world.entries(directory)
    with RecoveryDaemon(wal, lease_grace=0) as again:
        second = again.sweep()
    records, items = read_log(wal), world.entries(directory)
    problems = []
    if len(records) != len(after_first) or items != world_first or second.actions:
        problems.append(f"a second daemon run changed something: {second.actions}")
    applied = world_counts(items, "applied")
    if any(count > 1 for count in applied.values()):
        problems.append(f"an effect or compensation was applied twice: {applied}")
    daemon_attempts = world_counts(items, "attempt", role="daemon")
    if any(count > 1 for count in daemon_attempts.values()):
        problems.append(f"the daemon called a compensation twice: {daemon_attempts}")
    if set(daemon_attempts) & done_by_worker:
        problems.append("the daemon re-ran a compensation the worker's log records as done")
    if any(e["role"] == "daemon" and e["op"] in forwards for e in items):
        problems.append("the daemon ran a forward effect")
    return records, items, problems
