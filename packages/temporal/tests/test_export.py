"""A job's Temporal history exported to the core's chained log, read by the core's own tools.

``agent-saga verify`` and ``agent-saga graph`` run as commands on the exported log,
exactly as on a log the embedded engine wrote.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from agent_saga_temporal import ExportError, export_job, resolve, settled
from agent_saga_temporal.examples.ecommerce.provider import Provider
from agent_saga_temporal.examples.ecommerce.run import SCRIPT
from conftest import kinds, open_order, start, worker

from agent_saga import RecoveryDaemon
from agent_saga.log import read_records
from agent_saga.recovery.fold import fold

AGENT_SAGA = [str(Path(sys.executable).with_name("agent-saga"))]


def types(wal: Path, saga: str) -> list[tuple[Any, str]]:
    return [(r.get("step"), r["type"]) for r in read_records(wal) if r["saga"] == saga]


async def run_and_export(
    address: str, provider: Provider, scenario: str, wal: Path, script: list[Any] = SCRIPT
) -> str:
    order_id = open_order(provider, scenario)
    async with worker(address, script) as (client, queue):
        handle = await start(client, queue, order_id)
        await settled(handle)
        await export_job(client, handle.id, wal)
    return handle.id


def agent_saga(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENT_SAGA, *args], capture_output=True, text=True, timeout=120, check=False)


async def test_exported_runs_verify_and_draw_like_any_saga(
    provider: Provider, temporal_address: str, tmp_path: Path
) -> None:
    wal = tmp_path / "temporal.wal"
    undone = await run_and_export(temporal_address, provider, "business-failure", wal)
    lost = await run_and_export(temporal_address, provider, "lost-response", wal)
    refused = await run_and_export(temporal_address, provider, "happy", wal, ["charge_payment", *SCRIPT])

    # The records, mapped onto the core's types, in the order the history shows them.
    assert types(wal, undone) == [
        (None, "SAGA_STARTED"),
        (1, "STEP_INTENT"), (1, "STEP_COMMITTED"), (2, "STEP_INTENT"), (2, "STEP_COMMITTED"),
        (3, "STEP_INTENT"), (3, "STEP_COMMITTED"),
        (None, "ROLLBACK_STARTED"),
        (3, "COMPENSATION_STARTED"), (3, "STEP_COMPENSATED"), (2, "COMPENSATION_STARTED"), (2, "STEP_COMPENSATED"),
        (1, "COMPENSATION_STARTED"), (1, "STEP_COMPENSATED"),
        (None, "SAGA_ROLLED_BACK"),
    ]
    # The lost reply: unknown, then settled by the reconciler, never a second intent.
    assert types(wal, lost)[3:6] == [(2, "STEP_INTENT"), (2, "STEP_UNKNOWN"), (2, "STEP_COMMITTED")]
    commit = next(r for r in read_records(wal) if r["saga"] == lost and r["type"] == "STEP_COMMITTED" and r["step"] == 2)
    assert commit["body"]["reconciled"].startswith("charge ")
    assert commit["body"]["compensation"]["kwargs"]["amount_cents"] == 4200
    refusal = next(r for r in read_records(wal) if r["saga"] == refused and r["type"] == "STEP_REFUSED")
    assert refusal["step"] == 1 and refusal["body"]["rule"] == "not_allowed"

    verified = agent_saga("verify", "--wal-path", str(wal))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "chain: intact" in verified.stdout

    drawn = agent_saga("graph", "--wal", str(wal), "--saga", undone)
    assert drawn.returncode == 0, drawn.stderr
    undo = [line.strip() for line in drawn.stdout.splitlines() if "undo " in line and "<br/>" in line]
    assert [u.split('["')[1].split("<br/>")[0] for u in undo] == [
        "undo 3. schedule_fulfillment", "undo 2. charge_payment", "undo 1. reserve_inventory",
    ]
    assert all(u.endswith(":::compensated") for u in undo)
    assert '(["rollback clean"]):::clean' in drawn.stdout
    drawn = agent_saga("graph", "--wal", str(wal), "--saga", refused)
    assert "1. charge_payment<br/>COMPENSABLE - refused" in drawn.stdout

    # The chain is real: one changed byte in a body and verify names the record.
    data = bytearray(wal.read_bytes())
    at = data.index(b'"quantity":2')
    data[at + len(b'"quantity":')] = ord("9")
    wal.write_bytes(bytes(data))
    broken = agent_saga("verify", "--wal-path", str(wal))
    assert broken.returncode == 1
    assert "the body does not match its digest" in broken.stdout


async def test_a_waiting_job_exports_open_then_resolved(
    provider: Provider, temporal_address: str, tmp_path: Path
) -> None:
    order_id = open_order(provider, "refund-fails")
    async with worker(temporal_address, SCRIPT) as (client, queue):
        handle = await start(client, queue, order_id)
        await settled(handle)
        open_log, closed_log = tmp_path / "open.wal", tmp_path / "closed.wal"
        await export_job(client, handle.id, open_log)
        with pytest.raises(ExportError, match="already holds saga"):
            await export_job(client, handle.id, open_log)
        assert await resolve(client, handle.id, decision="accept", by="ops", note="refunded by hand") == (
            "resolved_by_person"
        )
        await export_job(client, handle.id, closed_log)

    view = fold(read_records(open_log))[handle.id]
    assert view.open  # no end record while a person is awaited
    assert [s.settled for s in view.newest_first()] == ["compensated", None, "unresolved"]
    assert view.steps[2].compensation_failed == 2  # the lying refund, twice
    assert "undo-unproven" in view.steps[2].escalated and "waiting-for-person" in view.escalated

    # A recovery daemon reading the export must not run the workflow's undo a second time.
    before = kinds(provider, order_id)
    with RecoveryDaemon(open_log, clock=lambda: time.time() + 3600) as daemon:
        swept = daemon.sweep()
    assert kinds(provider, order_id) == before
    assert swept.compensated == 0 and swept.new_escalations

    records = list(read_records(closed_log))
    resolved = next(r for r in records if r["type"] == "ESCALATION_RESOLVED")
    assert resolved["body"]["by"] == "ops" and resolved["body"]["decision"] == "accept"
    end = records[-1]
    assert end["type"] == "SAGA_ROLLED_BACK"
    assert end["body"]["status"] == "resolved_by_person" and end["body"]["clean"] is False
    drawn = agent_saga("graph", "--wal", str(closed_log))
    assert "COMPENSATION FAILED - needs a human" in drawn.stdout
    assert "rollback NOT CLEAN" in drawn.stdout
