"""Issue 41, part 6: an ``Agent.run_sync`` inside a ``@durable`` entry point, killed after a booking committed, resumed.

The worker (``pydantic_ai_durable_run.py``) is killed with SIGKILL while its model thinks about
the second turn, Paris booked; ``agent_saga.resume`` then runs the entry point again, here,
under the same saga id. The agent loop starts over: its model is asked again (unless it is
``wrap_model``'s, whose first turn is served), the Paris booking is served from the log, and
Rome is booked live.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pydantic_ai_durable_run  # noqa: F401 - registers @durable("pai.trip") here, for the resume
import pytest

import agent_saga
from agent_saga.log.file import read_records
from agent_saga.testing import World, kill_at, world_env

pytestmark = pytest.mark.slow  # a worker process is killed

HERE = Path(__file__).parent


def test_a_killed_pydantic_ai_run_resumed_through_durable_books_each_city_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = tmp_path / "trip.wal"
    env = world_env(tmp_path, HERE)
    kill_at([sys.executable, str(HERE / "pydantic_ai_durable_run.py"), str(wal)], {**env, "PAI_HOLD_AT_TURN": "2"},
            "model turn 2")
    world = World(tmp_path)
    assert world.seen("book") == {"paris": 1}
    worker = world.pids()

    monkeypatch.setenv("AGENT_SAGA_KILLED_WORLD", str(tmp_path))

    # The worker is dead (killed above): its lease is treated as run out, with no wait.
    value = agent_saga.resume("trip-7", wal=wal, lease_grace=0, clock=lambda: time.time() + 3600)
    assert value == "booked"

    # The world: each city booked once, nothing cancelled; this process asked the model from its
    # first turn again (model calls are served only once they are steps) and booked only Rome.
    assert world.seen("book") == {"paris": 1, "rome": 1}
    assert not world.seen("cancel")
    assert world.by_others(worker) == [
        ("model", "turn 1"), ("model", "turn 2"), ("book", "rome"), ("model", "turn 3")]

    types = [r["type"] for r in read_records(wal)]
    assert types.count("SAGA_STARTED") == 1 and types.count("SAGA_RESUMED") == 1
    assert types[-1] == "SAGA_COMPLETED" and "ROLLBACK_STARTED" not in types


def test_with_wrap_model_the_resumed_run_is_served_the_models_first_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = tmp_path / "trip.wal"
    env = {**world_env(tmp_path, HERE), "PAI_HOLD_AT_TURN": "2", "PAI_WRAP_MODEL": "1"}
    kill_at([sys.executable, str(HERE / "pydantic_ai_durable_run.py"), str(wal)], env, "model turn 2")
    world = World(tmp_path)
    worker = world.pids()
    monkeypatch.setenv("AGENT_SAGA_KILLED_WORLD", str(tmp_path))
    monkeypatch.setenv("PAI_WRAP_MODEL", "1")

    assert agent_saga.resume("trip-7", wal=wal, lease_grace=0, clock=lambda: time.time() + 3600) == "booked"
    # The first turn and the Paris booking came from the log: this process asked the model from
    # the turn the kill interrupted (in flight, so never recorded) and booked only Rome.
    assert world.seen("book") == {"paris": 1, "rome": 1}
    assert world.by_others(worker) == [("model", "turn 2"), ("book", "rome"), ("model", "turn 3")]
    types = [r["type"] for r in read_records(wal)]
    assert types[-1] == "SAGA_COMPLETED" and "ROLLBACK_STARTED" not in types
