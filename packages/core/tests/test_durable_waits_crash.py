"""Issue 41 part 5: a durable run killed while it sleeps or waits for an event, resumed by another process.

The worker (``waits_worker.py``) thinks, sleeps an hour, waits a minute for "approved", then
books; it dies (``os._exit``) in a chosen park of its clock, or once a chosen record is on disk.
``agent-saga signal`` and ``agent-saga recover --import waits_worker`` then run as processes of
their own. Time is the worker's test clock: each park is a line in the world (seconds, pid), so
"sleeps only the remainder" is read there, and from the recorded wake-up times, never measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from approval_support import wait_for
from recovery_checks import HERE, chain_ok, read_log, wait_until_expired
from resume_checks import env_for
from resume_trip import effects
from waits_worker import HOUR, POLL, TIMEOUT

pytestmark = pytest.mark.slow  # a worker process is killed

T0 = 1_000_000.0
ENTRIES = ["waits.errand", "waits.errand_async"]


def _agent_saga(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_saga", *argv], env=env_for(Path(env.pop("world")), **env),
                          capture_output=True, text=True, timeout=120, check=False)


def _crash(wal: Path, world: Path, entry: str, **how: str) -> None:
    done = subprocess.run([sys.executable, str(HERE / "waits_worker.py"), str(wal), entry, "t-1"],
                          env=env_for(world, WAITS_NOW=str(T0), **how), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 137, done.stderr
    wait_until_expired()


def _recover(wal: Path, world: Path, now: float) -> subprocess.CompletedProcess[str]:
    done = _agent_saga("recover", "--wal-path", str(wal), "--import", "waits_worker", "--lease-grace", "0",
                       world=str(world), WAITS_NOW=str(now))
    assert done.returncode == 0 and "resumed 1" in done.stdout, done.stdout + done.stderr
    return done


def _bodies(wal: Path, rtype: str) -> list[dict[str, Any]]:
    return [r["body"] for r in read_log(wal) if r["type"] == rtype]


def _parks(world: Path) -> dict[int, list[float]]:
    """Each process's parks (its pid -> the seconds of each), in order."""
    parks: dict[int, list[float]] = {}
    for e in effects(world):
        if e["ev"] == "park":
            parks.setdefault(e["pid"], []).append(e["seconds"])
    return parks


def _result(wal: Path) -> Any:
    (body,) = _bodies(wal, "SAGA_COMPLETED")
    return body["result"]


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_run_killed_mid_sleep_sleeps_only_the_remainder_once_resumed(tmp_path: Path, entry: str) -> None:
    wal = tmp_path / "w.wal"
    _crash(wal, tmp_path, entry, WAITS_DIE_AT_PARK="1")  # killed in its hour's sleep
    (started,) = _bodies(wal, "WAIT_STARTED")
    assert started["until"] == T0 + HOUR and started["wait"] == "sleep"

    _recover(wal, tmp_path, T0 + 600)  # resumed ten minutes later
    worker, resumer = _parks(tmp_path).values()
    assert worker == [HOUR]
    # Fifty minutes more, not sixty; then the minute's wait for "approved", which nobody sends,
    # looking at the log every POLL seconds for a signal from another process.
    assert resumer == [HOUR - 600] + [POLL] * int(TIMEOUT / POLL)
    sleeps = [b for b in _bodies(wal, "WAIT_STARTED") if b["wait"] == "sleep"]
    assert [b["until"] for b in sleeps] == [T0 + HOUR]  # the wake-up time is the one recorded before the kill
    assert _result(wal) == {"thought": "go to rome", "answer": "timed out", "ref": "R-rome"}
    assert [e["ev"] for e in effects(tmp_path) if e["ev"] != "park"] == ["think", "book"]  # think served
    assert chain_ok(wal)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_signal_sent_while_the_waiting_run_was_dead_is_delivered_on_resume(tmp_path: Path, entry: str) -> None:
    wal = tmp_path / "w.wal"
    _crash(wal, tmp_path, entry, WAITS_DIE_AT_PARK="2")  # slept its hour, killed waiting for "approved"
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke"]

    sent = _agent_saga("signal", "t-1", "approved", "--data", '{"by": "ops", "limit": 300}', "--wal-path", str(wal),
                       world=str(tmp_path))
    assert sent.returncode == 0, sent.stderr
    _recover(wal, tmp_path, T0 + HOUR + 30)

    assert _result(wal)["answer"] == {"by": "ops", "limit": 300}
    assert len(_parks(tmp_path)) == 1  # the resumer parked not once: the sleep was served, the signal there
    ended = _bodies(wal, "WAIT_ENDED")
    assert [b["outcome"] for b in ended] == ["woke", "signalled"]
    (signalled,) = [r["seq"] for r in read_log(wal) if r["type"] == "EVENT_SIGNALLED"]
    assert ended[1]["signal"] == signalled
    assert len(_bodies(wal, "WAIT_STARTED")) == 2 and chain_ok(wal)


# Records of the worker: 1 SAGA_STARTED, 2 think COMMITTED, 3-4 the sleep's WAIT_STARTED and WAIT_ENDED,
# 5-6 the wait's WAIT_STARTED and WAIT_ENDED, then book's intent.
AFTER_THE_TIMEOUT = 6


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_timeout_recorded_before_the_crash_replays_as_a_timeout(tmp_path: Path, entry: str) -> None:
    wal = tmp_path / "w.wal"
    _crash(wal, tmp_path, entry, RESUME_CRASH_AT=f"after:{AFTER_THE_TIMEOUT}")
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke", "timed_out"]

    # Too late: a resume must give the answer the run already had, not this one.
    sent = _agent_saga("signal", "t-1", "approved", "--data", json.dumps("late"), "--wal-path", str(wal),
                       world=str(tmp_path))
    assert sent.returncode == 0, sent.stderr
    _recover(wal, tmp_path, T0 + HOUR + TIMEOUT + 5)

    assert _result(wal)["answer"] == "timed out"
    assert len(_parks(tmp_path)) == 1  # the resumer waited for nothing
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke", "timed_out"]
    again = _agent_saga("signal", "t-1", "approved", "--wal-path", str(wal), world=str(tmp_path))
    assert again.returncode == 1 and "already ended (SAGA_COMPLETED)" in again.stderr


def test_a_live_wait_sees_a_signal_another_process_sent_at_its_next_look(tmp_path: Path) -> None:
    wal = tmp_path / "w.wal"
    worker = subprocess.Popen([sys.executable, str(HERE / "waits_worker.py"), str(wal), "waits.errand", "t-1"],
                              env=env_for(tmp_path, WAITS_NOW=str(T0), WAITS_REAL_PARK="2", WAITS_POLL="0.5"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Its first real park: the wait for "approved" has begun, and looked at the log once.
        wait_for(lambda: len(next(iter(_parks(tmp_path).values()), [])) >= 2, "the worker to wait for 'approved'")
        sent = _agent_saga("signal", "t-1", "approved", "--data", '"from another process"', "--wal-path", str(wal),
                           world=str(tmp_path))
        assert sent.returncode == 0, sent.stderr
        _, err = worker.communicate(timeout=120)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert _result(wal)["answer"] == "from another process"
    assert [b["outcome"] for b in _bodies(wal, "WAIT_ENDED")] == ["woke", "signalled"]
