"""examples/google_adk_trip.py, run as a user runs it (`python examples/google_adk_trip.py`) where this adapter is installed."""

from __future__ import annotations

from pathlib import Path

from agent_saga.testing import assert_trip_undone


def test_the_example_books_the_trip_and_undoes_it_each_time_it_runs(tmp_path: Path) -> None:
    assert_trip_undone("google_adk_trip", tmp_path)
