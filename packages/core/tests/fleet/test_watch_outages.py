"""A watching recovery daemon rides out its server's restarts: `recover --watch` and saga_lifespan's.

Real servers of our own (throwaway redis-server and PostgreSQL, SIGKILLed and started
again), the daemon as a real process, and the world checked, not the daemon's opinion:
a saga that dies after the restarts is compensated (its refund lands in the world file).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import recovery_world as world
from servers import ThrowawayPostgres, ThrowawayRedis

from agent_saga.log.resolve import open_log
from agent_saga.service import SagaService

TESTS = Path(__file__).resolve().parents[1]

# A worker that charges once (undo: world.refund) and dies before its saga ends.
DEAD_WORKER = """
import functools, os, sys
sys.path.insert(0, {tests!r})
import recovery_world as world
from agent_saga import call_with, saga_scope
from agent_saga.log.resolve import open_log
wal = open_log(sys.argv[1])
scope = saga_scope(wal, name="dies")
s = scope.__enter__()
s.execute(tool="world.charge", semantics="COMPENSABLE",
          forward=functools.partial(world.charge, ref=sys.argv[2], amount=5),
          compensate=call_with(world.refund, ref=sys.argv[2]))
wal.barrier()
os._exit(137)
"""


class Server:
    """A throwaway server of one backend: ``url``, ``kill()`` (SIGKILL) and ``start()``."""

    def __init__(self, backend: str, directory: Path) -> None:
        self.backend = backend
        if backend == "redis":
            self._redis = ThrowawayRedis(directory)
            self.url = self._redis.url + "?log=watched"
        else:
            self._pg = ThrowawayPostgres()
            self.url = self._pg.url + "?log=watched"

        self.up = False

    def start(self) -> None:
        (self._redis if self.backend == "redis" else self._pg).start()
        self.up = True

    def kill(self) -> None:
        (self._redis if self.backend == "redis" else self._pg).kill()
        self.up = False

    def stop(self) -> None:
        if self.backend == "redis":
            self._redis.stop()
        elif self.up:
            self._pg.stop()
        else:
            shutil.rmtree(self._pg.dir, ignore_errors=True)


@pytest.fixture(params=["redis", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    found = Server(str(request.param), tmp_path)
    found.start()
    try:
        yield found
    finally:
        found.stop()


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within {timeout:g}s")


def env(world_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
            "RECOVERY_WORLD": str(world_dir), **extra}


def die_in_a_saga(url: str, ref: str, world_dir: Path) -> None:
    done = subprocess.run([sys.executable, "-c", DEAD_WORKER.format(tests=str(TESTS)), url, ref],
                          env=env(world_dir, RECOVERY_ROLE="worker", AGENT_SAGA_LEASE_TTL="1"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 137, done.stderr
    assert world.applied(world.entries(world_dir), "charge")  # the effect stands, the saga is open


def refunded(world_dir: Path, ref: str) -> bool:
    return any(e["ref"] == ref and e["role"] == "daemon" for e in world.applied(world.entries(world_dir), "refund"))


def test_recover_watch_rides_out_three_server_restarts(server: Server, tmp_path: Path) -> None:
    with open_log(server.url) as wal:  # the log exists (one finished saga) before the daemon starts
        wal.append("SAGA_STARTED", "0" * 32, {"name": "first", "owner": "t:1"})
        wal.append("SAGA_COMPLETED", "0" * 32, {"steps": 0, "unknown": []})
        wal.barrier()
    err_path = tmp_path / "daemon.err"
    with open(err_path, "w") as err, open(tmp_path / "daemon.out", "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent_saga", "recover", "--watch", "--wal-path", server.url, "--interval", "0.2",
             "--lease-grace", "0", "--import", "recovery_world"],
            stdout=out, stderr=err, env=env(tmp_path, RECOVERY_ROLE="daemon"),
        )
    stderr = err_path.read_text
    try:
        for outage in (1, 2, 3):
            server.kill()
            wait_for(lambda n=outage: proc.poll() is not None or stderr().count("is unreachable") == n,
                     f"outage {outage} noticed")
            assert proc.poll() is None, stderr()  # still watching, not exited with a traceback
            server.start()
            wait_for(lambda n=outage: stderr().count("answers again") == n, f"outage {outage} over")
            assert proc.poll() is None, stderr()
        die_in_a_saga(server.url, "after-restarts", tmp_path)
        wait_for(lambda: refunded(tmp_path, "after-restarts"), "the dead saga's refund in the world")
        assert proc.poll() is None, stderr()
        # its records of that are committed (the saga ended): nothing is left queued for the server
        wait_for(lambda: "recovered 1" in (tmp_path / "daemon.out").read_text(), "the sweep's report")
        # stopped while retrying an outage: SIGTERM ends it at once, cleanly
        server.kill()
        wait_for(lambda: stderr().count("is unreachable") == 4, "outage 4 noticed")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, stderr()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = stderr()
    assert "Traceback" not in text, text
    lines = text.splitlines()
    # one line as each outage began and one as it ended: never one per retry
    assert sum("is unreachable" in line for line in lines) == 4, text
    assert sum("answers again" in line for line in lines) == 3, text
    assert all(line.startswith("agent-saga recover: ") for line in lines if "unreachable" in line), text
    refunds = [e for e in world.applied(world.entries(tmp_path), "refund") if e["ref"] == "after-restarts"]
    assert len(refunds) == 1, refunds  # compensated exactly once


async def test_the_lifespan_daemon_rides_out_a_server_restart(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio

    monkeypatch.setenv("RECOVERY_WORLD", str(tmp_path))
    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    caplog.set_level(logging.INFO, logger="agent_saga")
    service = SagaService(server.url, handlers=["recovery_world"], interval=0.1, lease_grace=0)
    service.start()

    async def until(check: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        for _ in range(1200):
            signal = service.readiness()[1].get("recovery", {})
            if check(signal):
                return signal
            await asyncio.sleep(0.05)
        raise AssertionError(f"{what}: {service.readiness()}")

    try:
        await until(lambda s: s.get("sweeps", 0) > 0 and s["ok"], "the first sweep")
        server.kill()
        down = await until(lambda s: "unreachable" in s.get("detail", ""), "readiness reports the outage")
        assert down["ok"] is False
        server.start()
        before = down["sweeps"]
        await until(lambda s: s["ok"] and s["sweeps"] > before, "sweeping again")
        await asyncio.to_thread(die_in_a_saga, server.url, "lifespan", tmp_path)
        await until(lambda s: refunded(tmp_path, "lifespan"), "the dead saga's refund in the world")
        assert service.readiness()[1]["recovery"]["ok"]
    finally:
        await service.stop()
    warned = [r.getMessage() for r in caplog.records if r.name == "agent_saga.service"]
    assert sum("is unreachable" in m for m in warned) == 1, warned
    assert sum("answers again" in m for m in warned) == 1, warned
    assert not [r for r in caplog.records if r.name == "agent_saga.service" and r.levelno >= logging.ERROR], warned
