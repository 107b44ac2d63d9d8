"""Kill a worker inside its own rollback, run the real daemon, and read what the world saw.

Shared by the file-log test (test_rollback_crash.py) and the server-log one
(fleet/test_rollback_crash_servers.py): only where the log lives differs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import recovery_world as world
from recovery_checks import HERE, env_for, wait_until_expired

from agent_saga.log.file import read_records
from agent_saga.log.resolve import is_url, open_log

__all__ = ["Unwound", "crash_in_rollback", "read_any"]

UNWIND_WORKER = HERE / "unwind_worker.py"


@dataclass
class Unwound:
    """What a worker killed inside undo ``kill_at`` left, and what the daemon then did."""

    in_flight: str  # the idempotency key of the undo the worker was killed inside
    worker_calls: Counter[str]  # refund calls by the worker, per key
    calls: Counter[str]  # refund calls by anyone, per key
    applied: Counter[str]  # refunds applied (the world dedupes by key), per key
    before: list[dict[str, Any]]  # the log as the dead worker left it
    after: list[dict[str, Any]]  # the log once the daemon had run
    daemon_output: str

    @property
    def repeated(self) -> dict[str, int]:
        """Undo keys called more than once, with their counts."""
        return {key: n for key, n in self.calls.items() if n > 1}


def read_any(target: str) -> list[dict[str, Any]]:
    if not is_url(target):
        return list(read_records(target))
    with open_log(target) as wal:
        return list(wal.records())


def crash_in_rollback(target: str, world_dir: Path, count: int, kill_at: int, face: str) -> Unwound:
    """Run ``count`` charges, fail, SIGKILL the worker once its ``kill_at``-th undo has landed."""
    ref = f"U{count - kill_at + 1}"  # undone newest first
    paused = world_dir / f"paused-refund-{ref}"
    env = env_for(world_dir, RECOVERY_PAUSE_EFFECT=f"refund:{ref}")
    worker = subprocess.Popen(
        [sys.executable, str(UNWIND_WORKER), target, str(count), face],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60  # a bound on a hang, not a timing assertion
        while not paused.exists():
            if worker.poll() is not None:
                out, err = worker.communicate()
                raise AssertionError(f"the worker ended ({worker.returncode}) before undo {kill_at}:\n{out}\n{err}")
            if time.monotonic() > deadline:
                raise AssertionError(f"undo {kill_at} ({ref}) was not reached within 60 s")
            time.sleep(0.01)
        os.kill(worker.pid, signal.SIGKILL)
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()
    assert worker.returncode == -signal.SIGKILL, worker.returncode

    items = world.entries(world_dir)
    refunds = [e for e in items if e["op"] == "refund"]
    (in_flight,) = {e["key"] for e in refunds if e["ref"] == ref}
    worker_calls = Counter(e["key"] for e in refunds if e["ev"] == "attempt")
    before = read_any(target)

    wait_until_expired()
    done = subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", target, "--lease-grace", "0",
         "--import", "recovery_world"],
        env=env_for(world_dir, role="daemon"), capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, f"recover exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    items = world.entries(world_dir)
    refunds = [e for e in items if e["op"] == "refund"]
    return Unwound(
        in_flight=in_flight,
        worker_calls=worker_calls,
        calls=Counter(e["key"] for e in refunds if e["ev"] == "attempt"),
        applied=Counter(e["key"] for e in refunds if e["ev"] == "applied"),
        before=before,
        after=read_any(target),
        daemon_output=done.stdout + done.stderr,
    )
