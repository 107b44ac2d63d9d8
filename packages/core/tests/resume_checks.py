"""Shared by the resume crash tests: run the issue's trip in a worker that dies at a chosen record."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from recovery_checks import HERE, wait_until_expired

__all__ = ["AFTER_OSLO_THOUGHT", "CITIES", "ROME_IN_FLIGHT", "crash", "env_for"]

CITIES = ["paris", "rome", "oslo"]
LEASE_TTL = "0.3"  # recovery_checks.wait_until_expired waits this out


def env_for(world: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESUME_")}
    env.update(RESUME_WORLD=str(world), AGENT_SAGA_LEASE_TTL=LEASE_TTL,
               PYTHONPATH=os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.update(extra)
    return env


def crash(wal: Path, world: Path, entry: str, after: int) -> None:
    """Run the trip in a worker that dies once its ``after``-th record is on disk."""
    done = subprocess.run([sys.executable, str(HERE / "resume_trip.py"), str(wal), entry, "t-42", *CITIES],
                          env=env_for(world, RESUME_CRASH_AT=f"after:{after}"), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 137, done.stderr
    wait_until_expired()


# Records of the worker: 1 SAGA_STARTED, then per city think COMMITTED, book INTENT, book COMMITTED.
# Each crash point leaves nothing running unrecorded: the worker is waiting for the next intent's
# barrier. (A REVERSIBLE call whose commit record never reached the disk runs again on resume.)
AFTER_OSLO_THOUGHT = 8  # paris and rome booked, oslo thought about, its booking not begun
ROME_IN_FLIGHT = 6  # rome's booking intent on disk, no outcome
