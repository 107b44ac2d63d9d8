"""Run a framework example of the repository as a user does, and check the trip it tells.

Every ``examples/<framework>_trip.py`` books the trip of ``examples/trip.py`` through its
framework's real agent loop (a scripted model): a seat, a hotel room, then a card that is
declined; the saga undoes the room, then the seat, and the example prints the rollback report
and what is left of the world. Each adapter's tests run its example with
:func:`assert_trip_undone`: ``python examples/<name>.py`` in a fresh folder, twice (each run
must tell of itself only: the example starts its own log afresh), in the adapter's environment.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agent_saga.log import read_records

__all__ = ["EXAMPLES", "assert_trip_undone"]

#: The repository's examples folder (this file is packages/core/src/agent_saga/testing/_examples.py).
EXAMPLES = Path(__file__).resolve().parents[5] / "examples"


def assert_trip_undone(name: str, cwd: Path, *, clean: bool = True, warnings_as_errors: bool = True) -> str:
    """Run ``examples/<name>.py`` in ``cwd`` twice; each run must book the trip and undo it. Returns the output.

    ``clean``: whether the report may say the rollback is clean (an MCP error result leaves the
    declined charge UNKNOWN, so its report cannot). ``warnings_as_errors``: run with ``-W error``
    (off for a framework that warns on its own import).
    """
    command = [sys.executable, *(["-W", "error"] if warnings_as_errors else []), str(EXAMPLES / f"{name}.py")]
    out = ""
    for run in (1, 2):
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
        out = done.stdout
        assert done.returncode == 0, f"run {run} of {name}.py failed:\n{done.stdout}\n{done.stderr}"
        booked = ("held seat 7A on TP1351", "booked room 12 in Lisbon")
        assert all(line in out for line in booked), out
        assert out.index("cancelled room_12") < out.index("released seat_7A"), out  # newest first
        verdict = ": clean\n" if clean else ": NOT CLEAN - needs a human\n"
        assert verdict in out, out
        assert "2 compensated" in out, out
        assert "card declined" in out or "charge_card" in out, out  # the cause is named
        assert out.rstrip().endswith("world: {'seat_7A': 'released', 'room_12': 'cancelled'}"), out
        assert out.count("rollback of saga ") == 1, out
    log = cwd / f"{name.replace('_', '-')}.wal"
    assert len({r["saga"] for r in read_records(log)}) == 1, f"{log} holds more than the last run"
    return out
