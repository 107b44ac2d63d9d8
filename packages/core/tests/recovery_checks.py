"""Shared helpers for the recovery tests: run the worker, read the world and the log."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections import Counter
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
