"""Issue 41, part 7: one crash, the same outcome on the embedded engine and on Temporal.

The order (``three_steps.py``): the agent proposes reserve, charge, ship, then "done"; each
process is SIGKILLed while the agent decides its third turn, after the charge (step 2) committed.

- Embedded: the ``@durable`` run in a worker process, killed, then ``agent_saga.resume`` here.
- Temporal: a worker process for the job on the dev server, killed, then a new worker here; the
  server retries the decision that died with the first worker once its timeout runs out.

Each engine gets a world of its own; afterwards both worlds hold the same effects in the same
order (each step once, the interrupted decision asked twice, once per process) and the three
steps have the same results.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from agent_saga_temporal import Status, saga_worker, start_job
from temporalio.client import Client
from three_steps import JOB, ORDER, ThreeStepAgent

import agent_saga
from agent_saga.log.file import read_records
from agent_saga.testing import World, kill_at, world_env

pytestmark = pytest.mark.slow  # worker processes are killed; the dev server times a decision out

HERE = Path(__file__).parent
WORKER = [sys.executable, str(HERE / "three_steps.py")]
AT_THE_THIRD_TURN = {"THREE_HOLD_AT_TURN": "3"}
EXPECTED = {"reserve": {"id": "reserve-1", "order": ORDER}, "charge": {"id": "charge-2", "order": ORDER},
            "ship": {"id": "ship-3", "order": ORDER}}


def _effects(world: World) -> list[tuple[str, str]]:
    return [(ev, what) for ev, what, _ in world.rows()]


def _embedded(directory: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    wal = directory / "order.wal"
    kill_at([*WORKER, "embedded", str(wal)], world_env(directory, HERE, **AT_THE_THIRD_TURN), "deciding turn 3")
    monkeypatch.setenv("AGENT_SAGA_KILLED_WORLD", str(directory))
    # The worker is dead (killed above): its lease is treated as run out, with no wait.
    results: dict[str, Any] = agent_saga.resume(ORDER, wal=wal, lease_grace=0, clock=lambda: time.time() + 3600)
    types = [r["type"] for r in read_records(wal)]
    assert types.count("SAGA_RESUMED") == 1 and types[-1] == "SAGA_COMPLETED", types
    return results


async def _temporal(directory: Path, address: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    client = await Client.connect(address)
    queue = f"three-{uuid.uuid4().hex}"
    handle = await start_job(client, JOB, workflow_id=f"three-{uuid.uuid4().hex}", task_queue=queue)
    # The first worker takes the job, runs reserve and charge, and dies deciding the third turn.
    await asyncio.to_thread(kill_at, [*WORKER, "temporal", address, queue],
                            world_env(directory, HERE, **AT_THE_THIRD_TURN), "deciding turn 3")
    monkeypatch.setenv("AGENT_SAGA_KILLED_WORLD", str(directory))
    async with saga_worker(client, driver=ThreeStepAgent(), task_queue=queue):
        report = await asyncio.wait_for(handle.result(), timeout=240)
    assert report.status == Status.SUCCEEDED_VERIFIED, (report.status, report.cause)
    return {s.name: s.result for s in report.steps if s.state == "committed"}


async def test_a_crash_after_step_two_ends_the_same_on_both_engines(
    tmp_path: Path, temporal_address: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedded_world, temporal_world = World(tmp_path / "embedded"), World(tmp_path / "temporal")
    embedded_world.directory.mkdir()
    temporal_world.directory.mkdir()

    embedded = await asyncio.to_thread(_embedded, embedded_world.directory, monkeypatch)
    temporal = await _temporal(temporal_world.directory, temporal_address, monkeypatch)

    assert embedded == temporal == EXPECTED
    assert _effects(embedded_world) == _effects(temporal_world) == [
        ("decide", "turn 1"), ("reserve", ORDER), ("decide", "turn 2"), ("charge", ORDER),
        ("decide", "turn 3"), ("decide", "turn 3"), ("ship", ORDER), ("decide", "turn 4"),
    ]
    # Before the crash, one process; after it, another: on both engines the resumer ran only the
    # decision that died, the third step and the last decision.
    for world in (embedded_world, temporal_world):
        assert world.by_others({world.rows()[0][2]}) == [
            ("decide", "turn 3"), ("ship", ORDER), ("decide", "turn 4")]
