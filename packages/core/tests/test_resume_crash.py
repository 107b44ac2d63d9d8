"""Issue 41: a durable run killed with SIGKILL-like force mid-way, resumed by ``agent-saga recover --import``.

The worker (``resume_trip.py``) runs the issue's trip and dies (``os._exit``, nothing flushed on
its way out) once a chosen record of its own is on disk; then ``agent-saga recover`` runs as a
process of its own, importing the module that defines the entry point. The world (the tools'
effects file) says what happened across both processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from recovery_checks import HERE, chain_ok, read_log, wait_until_expired
from resume_checks import AFTER_OSLO_THOUGHT, CITIES, ROME_IN_FLIGHT, crash, env_for
from resume_trip import effects

from agent_saga.recovery.escalations import queue_of

pytestmark = pytest.mark.slow  # a worker process is killed


def _recover(wal: Path, world: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", "resume_trip",
         "--lease-grace", "0"],
        env=env_for(world, **extra), capture_output=True, text=True, timeout=120, check=False,
    )


def _types(wal: Path) -> list[str]:
    return [r["type"] for r in read_log(wal)]


def _seen(world: Path, ev: str) -> Counter[str]:
    return Counter(e.get("city") or e.get("ref") for e in effects(world) if e["ev"] == ev)


def _body(wal: Path, rtype: str) -> dict[str, Any]:
    (record,) = [r for r in read_log(wal) if r["type"] == rtype]
    body: dict[str, Any] = record["body"]
    return body


@pytest.mark.parametrize("entry", ["trip.plan", "trip.plan_async"])
def test_a_killed_run_resumes_forward_each_booking_once_each_model_call_once(tmp_path: Path, entry: str) -> None:
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, entry, AFTER_OSLO_THOUGHT)
    assert _seen(tmp_path, "book") == {"paris": 1, "rome": 1}
    worker = {e["pid"] for e in effects(tmp_path)}

    done = _recover(wal, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed 1" in done.stdout

    # The world: every booking exactly once, the model asked once per city across both processes,
    # nothing undone; the recovering process ran only what was left.
    assert _seen(tmp_path, "book") == {"paris": 1, "rome": 1, "oslo": 1}
    assert _seen(tmp_path, "think") == {"paris": 1, "rome": 1, "oslo": 1}
    assert not _seen(tmp_path, "cancel")
    resumer = [e for e in effects(tmp_path) if e["pid"] not in worker]
    assert [(e["ev"], e["city"]) for e in resumer] == [("book", "oslo")]

    types = _types(wal)
    assert types.count("SAGA_STARTED") == 1 and types[AFTER_OSLO_THOUGHT] == "SAGA_RESUMED"
    assert types[-1] == "SAGA_COMPLETED" and "ROLLBACK_STARTED" not in types
    assert _body(wal, "SAGA_COMPLETED")["result"] == ["R-paris", "R-rome", "R-oslo"]
    assert _body(wal, "SAGA_RESUMED")["recorded_steps"] == 5
    # The served steps ran nothing (each says it was served); the live one is numbered after the recorded ones.
    assert [(r["type"], r["step"]) for r in read_log(wal)[AFTER_OSLO_THOUGHT + 1:-1]] == [
        *[("STEP_SERVED", i) for i in range(1, 6)], ("STEP_INTENT", 6), ("STEP_COMMITTED", 6)]
    assert chain_ok(wal)

    again = _recover(wal, tmp_path)
    assert again.returncode == 0 and len(_types(wal)) == len(types), again.stdout


def test_a_run_killed_inside_a_model_call_resumes_with_the_booking_before_it_on_disk(tmp_path: Path) -> None:
    # Killed while thinking about oslo: rome's booking committed just before, and no durable step's
    # intent came after it to flush its commit record. A durable run waits for each commit.
    wal = tmp_path / "trip.wal"
    done = subprocess.run([sys.executable, str(HERE / "resume_trip.py"), str(wal), "trip.plan", "t-42", *CITIES],
                          env=env_for(tmp_path, RESUME_DIE_THINKING="oslo"), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 137, done.stderr
    wait_until_expired()
    resumed = _recover(wal, tmp_path)
    assert resumed.returncode == 0 and "resumed 1" in resumed.stdout, resumed.stdout + resumed.stderr
    assert _seen(tmp_path, "book") == {"paris": 1, "rome": 1, "oslo": 1}  # rome served, not escalated
    assert _seen(tmp_path, "think") == {"paris": 1, "rome": 1, "oslo": 2}  # the call cut short runs again
    assert _types(wal)[-1] == "SAGA_COMPLETED" and not queue_of(wal).pending()


def test_code_edited_between_crash_and_resume_diverges_and_unwinds_the_replayed_steps(tmp_path: Path) -> None:
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, "trip.plan", AFTER_OSLO_THOUGHT)

    done = _recover(wal, tmp_path, RESUME_EDIT="1")  # the resumed code visits oslo first
    assert done.returncode == 0, done.stdout + done.stderr

    diverged = _body(wal, "SAGA_DIVERGED")
    assert diverged["position"] == 1
    assert diverged["expected"] == {"step": 1, "tool": "think", "args": {"prompt": "paris"}}
    assert diverged["got"] == {"tool": "think", "args": {"prompt": "oslo"}}
    assert _types(wal)[-1] == "SAGA_ROLLED_BACK"
    # Both bookings the log replayed are undone, once each; the diverging call never ran.
    assert _seen(tmp_path, "cancel") == {"R-paris": 1, "R-rome": 1}
    assert _seen(tmp_path, "book") == {"paris": 1, "rome": 1}
    assert _seen(tmp_path, "think") == {"paris": 1, "rome": 1, "oslo": 1}  # oslo's by the worker


def test_a_booking_in_flight_at_the_crash_is_escalated_not_guessed(tmp_path: Path) -> None:
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, "trip.plan", ROME_IN_FLIGHT)

    done = _recover(wal, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # a person has something to decide
    (escalation,) = queue_of(wal).pending()
    assert (escalation.kind, escalation.step) == ("resume-unknown", 4)
    types = _types(wal)
    assert "SAGA_RESUMED" not in types and "ROLLBACK_STARTED" not in types and "SAGA_COMPLETED" not in types
    assert not _seen(tmp_path, "cancel") and _seen(tmp_path, "book")["oslo"] == 0

    again = _recover(wal, tmp_path)  # still nobody can tell: nothing more happens
    assert again.returncode == 1 and len(_types(wal)) == len(types)


def test_a_booking_in_flight_that_its_reconciler_says_never_landed_runs_again_once(tmp_path: Path) -> None:
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, "trip.plan", ROME_IN_FLIGHT)
    booked_before = _seen(tmp_path, "book")["rome"]

    done = _recover(wal, tmp_path, RESUME_RECONCILER="no")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _seen(tmp_path, "book")["rome"] == booked_before + 1 and _seen(tmp_path, "book")["oslo"] == 1
    assert _seen(tmp_path, "think") == {"paris": 1, "rome": 1, "oslo": 1}
    records = read_log(wal)
    (answered,) = [r for r in records if r["type"] == "RECONCILE_ANSWERED"]
    assert answered["step"] == 4 and answered["body"]["exists"] is False
    assert json.loads(json.dumps(_body(wal, "SAGA_COMPLETED")["result"])) == ["R-paris", "R-rome", "R-oslo"]
