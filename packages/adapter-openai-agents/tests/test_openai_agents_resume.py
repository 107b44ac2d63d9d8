"""Issue 41, part 6: a ``Runner.run`` inside a ``@durable`` entry point, killed after a booking committed, resumed.

The worker (``agents_durable_run.py``) is killed with SIGKILL while its model thinks about the
second turn, Paris booked; ``agent-saga recover --import agents_durable_run`` runs the entry
point again under the same saga id. The agent loop starts over (the SDK keeps no state of its
own across processes): its model is asked again, the Paris booking is served from the log, and
Rome is booked live.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_saga.log.file import read_records
from agent_saga.testing import World, kill_at, recover, wait_out_lease, world_env

pytestmark = pytest.mark.slow  # a worker process is killed

HERE = Path(__file__).parent


def test_a_killed_agents_run_resumed_through_durable_books_each_city_once(tmp_path: Path) -> None:
    wal = tmp_path / "trip.wal"
    env = world_env(tmp_path, HERE)
    kill_at([sys.executable, str(HERE / "agents_durable_run.py"), str(wal)], {**env, "OA_HOLD_AT_TURN": "2"},
            "model turn 2")
    world = World(tmp_path)
    assert world.seen("book") == {"paris": 1}
    worker = world.pids()

    wait_out_lease()
    done = recover(wal, "agents_durable_run", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed 1" in done.stdout

    # The world: each city booked once, nothing cancelled. The resumed run asked the model again
    # from its first turn (model calls are served only once they are steps), so the resumer's
    # own effects are three model turns and one booking.
    assert world.seen("book") == {"paris": 1, "rome": 1}
    assert not world.seen("cancel")
    assert world.by_others(worker) == [
        ("model", "turn 1"), ("model", "turn 2"), ("book", "rome"), ("model", "turn 3")]

    records = list(read_records(wal))
    types = [r["type"] for r in records]
    assert types.count("SAGA_STARTED") == 1 and types.count("SAGA_RESUMED") == 1
    assert types[-1] == "SAGA_COMPLETED" and records[-1]["body"]["result"] == "booked"
    assert "ROLLBACK_STARTED" not in types
