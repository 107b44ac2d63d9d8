"""A durable run killed with SIGKILL in a process of its own, and the world it leaves behind.

The adapters' resume tests run a framework's real loop inside a ``@durable`` entry point in a
worker process, kill it at a point the worker names (``hold``: it says a marker on stdout and
waits to be killed), and resume the run in another process. The tools write each effect to a
SQLite file (``World``), committed before they return, so what happened is read from the world
across both processes, not from the engine's opinion of it; ``book`` is such a tool, with its undo.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from agent_saga.registry import compensator
from agent_saga.semantics import Compensation

__all__ = [
    "LEASE_TTL", "World", "book", "booking_cancelled", "cancel_booking", "hold", "kill_at", "recover", "wait_out_lease",
    "world_env",
]

#: The workers' lease, short: a killed worker's lease runs out by itself this soon (``wait_out_lease``).
LEASE_TTL = 0.3
#: The variable naming the world's directory, in the worker and in the resuming process.
WORLD = "AGENT_SAGA_KILLED_WORLD"
#: The registered undo of ``book``.
CANCEL = "agent_saga.testing.cancel_booking"


class World:
    """The effects the tools had, one row each (what, on what, which process), in ``effects.sqlite``."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory if directory is not None else os.environ[WORLD])
        self.path = self.directory / "effects.sqlite"

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60)
        db.execute("PRAGMA synchronous=FULL")  # a row committed is on disk before the tool returns
        db.execute("CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY, ev TEXT, what TEXT, pid INTEGER)")
        return db

    def note(self, ev: str, what: str) -> None:
        """Record one effect, committed before this returns."""
        with self._connect() as db:
            db.execute("INSERT INTO effects (ev, what, pid) VALUES (?, ?, ?)", (ev, what, os.getpid()))
        db.close()

    def rows(self) -> list[tuple[str, str, int]]:
        """Every effect, in the order it happened: (ev, what, pid)."""
        if not self.path.exists():
            return []
        db = self._connect()
        try:
            return [(ev, what, pid) for ev, what, pid in db.execute("SELECT ev, what, pid FROM effects ORDER BY seq")]
        finally:
            db.close()

    def seen(self, ev: str) -> Counter[str]:
        """How many times each ``what`` had the effect ``ev``."""
        return Counter(what for e, what, _ in self.rows() if e == ev)

    def landed(self, ev: str, what: str) -> bool:
        """Whether ``what`` had the effect ``ev`` at least once (what a reconciler asks the provider)."""
        return self.seen(ev)[what] > 0

    def pids(self) -> set[int]:
        """The processes that had an effect so far."""
        return {pid for _, _, pid in self.rows()}

    def by_others(self, pids: set[int]) -> list[tuple[str, str]]:
        """The effects of every process not in ``pids``, in order: what a resumer did once the worker died."""
        return [(ev, what) for ev, what, pid in self.rows() if pid not in pids]


def book(city: str) -> dict[str, str]:
    """Book a hotel room in a city (the resume tests' tool: it notes the booking in the world)."""
    World().note("book", city)
    return {"ref": f"R-{city}"}


@compensator(CANCEL)
def cancel_booking(ref: str, idempotency_key: str = "") -> None:
    World().note("cancel", ref)


def booking_cancelled(result: dict[str, str]) -> Compensation:
    """The undo of ``book``, from its result."""
    return Compensation(handler=CANCEL, kwargs={"ref": result["ref"]})


def hold(marker: str) -> None:
    """Say ``marker`` on stdout and wait to be killed (the test that reads it kills this process)."""
    print(marker, flush=True)
    sys.stdin.readline()  # never answered: the test kills the process instead
    os._exit(3)  # stdin closed without a kill: not the crash the test asked for


def world_env(world: Path, tests: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker and of its resumer: the world, a short lease, ``tests`` importable."""
    env = {k: v for k, v in os.environ.items() if k != WORLD}
    env.update({WORLD: str(world), "AGENT_SAGA_LEASE_TTL": str(LEASE_TTL),
                "PYTHONPATH": os.pathsep.join([str(tests), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    env.update(extra)
    return env


def kill_at(argv: Sequence[str], env: dict[str, str], marker: str, *, timeout: float = 180) -> None:
    """Run ``argv`` until it says ``marker`` on stdout, then SIGKILL it; fail if it ends another way."""
    proc = subprocess.Popen(list(argv), env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(timeout, proc.kill)  # an upper bound, not a timing: a hung worker ends the wait
    watchdog.start()
    said: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if line.strip() == marker:
                os.kill(proc.pid, signal.SIGKILL)
                break
        _, err = proc.communicate()
    finally:
        watchdog.cancel()
        if proc.stdin is not None:
            proc.stdin.close()
    ended = f"the worker ended with {proc.returncode} without saying {marker!r}:\n{''.join(said)}\n{err}"
    assert said, ended
    assert said[-1].strip() == marker, ended
    assert proc.returncode == -signal.SIGKILL, ended


def wait_out_lease() -> None:
    """Wait until a worker killed just now has no lease left (it renewed it at most ``LEASE_TTL`` ago)."""
    time.sleep(LEASE_TTL + 0.1)


def recover(wal: Path, module: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``agent-saga recover --import module`` over ``wal``, as a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", module, "--lease-grace", "0"],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )
