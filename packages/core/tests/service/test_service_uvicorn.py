"""saga_lifespan under a real uvicorn process: route sagas, recovery of a killed worker, SIGTERM drain, verify."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from uvicorn_server import HERE, Server

from agent_saga.log.file import read_records

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path)
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()


def sagas(wal: Path) -> dict[str, list[dict[str, Any]]]:
    by_saga: dict[str, list[dict[str, Any]]] = {}
    for record in read_records(wal):
        by_saga.setdefault(record["saga"], []).append(record)
    return by_saga


def ended(records: list[dict[str, Any]]) -> str | None:
    return next((r["type"] for r in records if r["type"] in ("SAGA_COMPLETED", "SAGA_ROLLED_BACK")), None)


def standing(world: Path) -> set[str]:
    return {p.name for p in (world / "charges").iterdir()}


def test_route_sagas_are_in_the_log(server: Server) -> None:
    assert server.http.post("/checkout/o-1").json() == {"shipment": "shipment of o-1"}
    refused = server.http.post("/checkout/fail-2")
    assert refused.status_code == 409 and refused.json() == {"detail": {"clean": True}}
    assert server.http.post("/scoped/o-3").json() == {"id": "o-3"}
    assert server.http.post("/blocking/o-4").json() == {"id": "o-4"}
    assert standing(server.world) == {"o-1", "o-3", "o-4"}  # fail-2 was refunded

    endings: dict[str, list[str | None]] = {}
    for records in sagas(server.wal).values():
        endings.setdefault(records[0]["body"]["name"], []).append(ended(records))
    assert endings == {
        "checkout.<locals>.process_payment": ["SAGA_COMPLETED", "SAGA_ROLLED_BACK"],
        "scoped": ["SAGA_COMPLETED"],
        "blocking": ["SAGA_COMPLETED"],
    }


def test_a_killed_workers_saga_is_compensated_by_the_background_daemon(server: Server, tmp_path: Path) -> None:
    with subprocess.Popen(
        [sys.executable, str(HERE / "service_worker.py"), str(server.wal), "w-1"],
        env={**server.env, "AGENT_SAGA_LEASE_TTL": "1"}, stdout=subprocess.PIPE, text=True,
    ) as worker:
        try:
            assert worker.stdout is not None
            saga_id = worker.stdout.readline().strip()
            assert saga_id, "the worker did not start its saga"
            assert standing(server.world) == {"w-1"}  # the effect is real
        finally:
            worker.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 60
    while standing(server.world) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert standing(server.world) == set(), f"the charge was never refunded:\n{server.log()}"
    records = sagas(server.wal)[saga_id]
    while ended(records) is None and time.monotonic() < deadline:  # the refund lands before its record
        time.sleep(0.1)
        records = sagas(server.wal)[saga_id]
    rolled_back = [r for r in records if r["type"] == "SAGA_ROLLED_BACK"]
    assert [r["body"]["recovered"] for r in rolled_back] == [True]
    assert rolled_back[0]["body"]["clean"] is True
    assert server.http.get("/readyz").json()["signals"]["recovery"]["ok"] is True


def test_sigterm_drains_running_sagas_and_exits_0_and_the_log_verifies(server: Server) -> None:
    assert server.http.post("/background/bg-1", params={"wait": 1.5}).status_code == 202
    code = server.terminate()
    # uvicorn re-raises the SIGTERM it handled once its graceful shutdown is over; run through
    # `python -m agent_saga.service`, that ends the process with 0 after a complete drain.
    assert code == 0, server.log()
    assert "Application shutdown complete." in server.log()
    assert "agent-saga service stopped (0 saga(s) left running)" in server.log()
    assert standing(server.world) == {"bg-1"}  # it was let finish, not cut off
    [records] = sagas(server.wal).values()
    assert ended(records) == "SAGA_COMPLETED"
    verify = subprocess.run([sys.executable, "-m", "agent_saga", "verify", "--wal-path", str(server.wal)],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_readiness_fails_closed_when_the_kill_switch_cannot_be_read(server: Server, tmp_path: Path) -> None:
    ready = server.http.get("/readyz")
    assert ready.status_code == 200
    signals = ready.json()["signals"]
    assert {name: s["ok"] for name, s in signals.items()} == {
        "draining": True, "log": True, "kill_switch": True, "recovery": True,
    }
    [switch_file] = signals["kill_switch"]["stores"]
    Path(switch_file).parent.mkdir(parents=True, exist_ok=True)
    Path(switch_file).write_text("{not json")
    unready = server.http.get("/readyz")
    assert unready.status_code == 503
    body = unready.json()
    assert body["ready"] is False and body["signals"]["kill_switch"]["ok"] is False
    assert "not a valid switch state" in body["signals"]["kill_switch"]["detail"]
    Path(switch_file).unlink()  # no switch file: nobody ever pulled a lever
    assert server.http.get("/readyz").status_code == 200
