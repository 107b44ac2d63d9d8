"""Resume forward (issue 41) on PostgresWAL and RedisWAL: the claim is the daemon's on that server.

A run is stopped with no end record (its entry point raises ``SagaQuarantined`` where a crash
would be), then resumed by ``agent_saga.resume`` naming the log by URL (a connection of its own)
and by the recovery daemon.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))

from agent_saga import RecoveryDaemon, ResumeRefused, SagaQuarantined, durable, resume, tool
from agent_saga.log.base import WAL
from agent_saga.testing import stop_run_if

BOOKED: Counter[str] = Counter()
HOOK: dict[str, Any] = {}


@tool(semantics="COMPENSABLE", compensate=lambda r: {"handler": "servers.cancel", "kwargs": {"ref": r["ref"]}})
def reserve(city: str) -> dict[str, str]:
    BOOKED[city] += 1
    return {"ref": f"R-{city}"}


@durable("servers.trip")
def server_trip(cities: list[str]) -> list[str]:
    refs = []
    for city in cities:
        stop_run_if(HOOK.get("stop") == city)
        if HOOK.get("wait") == city:
            HOOK["entered"].set()
            assert HOOK["release"].wait(60)
        refs.append(reserve(city)["ref"])
    return refs


@pytest.fixture(autouse=True)
def fresh() -> None:
    from agent_saga import compensator
    from agent_saga.registry import registered

    if not registered("servers.cancel"):
        compensator("servers.cancel")(lambda ref, idempotency_key="": None)
    BOOKED.clear()
    HOOK.clear()


def later() -> float:
    return time.time() + 3600


def _stopped(wal: WAL, saga_id: str) -> None:
    HOOK["stop"] = "oslo"
    with pytest.raises(SagaQuarantined):
        server_trip(["paris", "rome", "oslo"], saga_id=saga_id, wal=wal)
    HOOK.clear()
    wal.barrier()


def _types(wal: WAL, saga_id: str) -> list[str]:
    return [r["type"] for r in wal.records() if r["saga"] == saga_id]


def test_resume_by_url_serves_the_recorded_steps_and_ends_the_run(server_wal: WAL, url: str) -> None:
    _stopped(server_wal, "srv-1")
    assert resume("srv-1", wal=url, clock=later) == ["R-paris", "R-rome", "R-oslo"]
    assert BOOKED == {"paris": 1, "rome": 1, "oslo": 1}
    types = _types(server_wal, "srv-1")
    assert types[types.index("SAGA_RESUMED"):] == ["SAGA_RESUMED", "STEP_SERVED", "STEP_SERVED", "STEP_INTENT",
                                                     "STEP_COMMITTED", "SAGA_COMPLETED"]
    with pytest.raises(ResumeRefused, match="already ended"):
        resume("srv-1", wal=url, clock=later)


def test_a_resumer_holds_the_servers_claim_against_another_connection_and_the_daemon(
    server_wal: WAL, url: str
) -> None:
    _stopped(server_wal, "srv-2")
    HOOK.update(wait="oslo", entered=threading.Event(), release=threading.Event())
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(resume("srv-2", wal=server_wal, clock=later)))
    first.start()
    try:
        assert HOOK["entered"].wait(60)
        with pytest.raises(ResumeRefused, match="being resumed or recovered by another process"):
            resume("srv-2", wal=url, clock=later)  # another connection, the same server's claim
        with RecoveryDaemon(url, lease_grace=0, clock=later) as daemon:
            assert daemon.sweep().busy == ["srv-2"]
    finally:
        HOOK["release"].set()
        first.join(60)
    assert results == [["R-paris", "R-rome", "R-oslo"]] and BOOKED == {"paris": 1, "rome": 1, "oslo": 1}


def test_the_daemon_resumes_a_durable_run_on_a_server_log(server_wal: WAL, url: str) -> None:
    _stopped(server_wal, "srv-3")
    with RecoveryDaemon(url, lease_grace=0, clock=later) as daemon:
        report = daemon.sweep()
    assert report.resumed == ["srv-3"] and not report.recovered, report.summary()
    assert BOOKED == {"paris": 1, "rome": 1, "oslo": 1}
    assert _types(server_wal, "srv-3")[-1] == "SAGA_COMPLETED"
