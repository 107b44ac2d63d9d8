"""``agent-saga settle``: a person settles the step a resume could not tell about, and the run goes on.

The worker (``resume_trip.py``) is killed with rome's booking intent on disk and no outcome; with
no reconciler, ``agent-saga recover`` escalates it (``resume-unknown``) and leaves the run open.
The person checks the provider and settles it, signed by an operator key the host trusts: it
landed (with the result the tool returned: the resume serves it, and the booking is not made
again) or it did not (the resume books rome live). A finding the agent writes into its own log,
signed by a key of its own, is not believed: the run stays held.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from cli_support import run_cli
from operator_support import trusted_operator_key, untrusted_operator_key
from recovery_checks import read_log
from resume_checks import ROME_IN_FLIGHT, crash, env_for
from resume_trip import effects

from agent_saga import FileWAL
from agent_saga.log.attestation import OperatorKey
from agent_saga.recovery.escalations import queue_of

pytestmark = pytest.mark.slow  # a worker process is killed


def _recover(wal: Path, world: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent_saga", "recover", "--wal-path", str(wal), "--import", "resume_trip",
         "--lease-grace", "0"],
        env=env_for(world), capture_output=True, text=True, timeout=120, check=False,
    )


def _held(tmp_path: Path) -> tuple[Path, str]:
    """A trip killed with rome's booking in flight, escalated by a sweep; the log and the escalation's id."""
    wal = tmp_path / "trip.wal"
    crash(wal, tmp_path, "trip.plan", ROME_IN_FLIGHT)
    held = _recover(wal, tmp_path)
    assert held.returncode == 1, held.stdout + held.stderr
    (escalation,) = queue_of(wal).pending()
    assert (escalation.kind, escalation.step) == ("resume-unknown", 4)
    assert f"agent-saga settle {escalation.id} --landed --result JSON" in escalation.detail  # what to run
    return wal, escalation.id


def _booked(world: Path) -> Counter[str]:
    return Counter(e["city"] for e in effects(world) if e["ev"] == "book")


def _settle(wal: Path, eid: str, key: Path, *found: str) -> subprocess.CompletedProcess[str]:
    ran = run_cli("settle", eid, *found, "--operator", "ops@example.com", "--reason", "checked the booking console",
                  "--operator-key", str(key), "--wal-path", str(wal))
    return subprocess.CompletedProcess([], ran.returncode, ran.stdout, ran.stderr)


def test_a_step_settled_as_landed_is_served_with_the_result_given(tmp_path: Path) -> None:
    wal, eid = _held(tmp_path)
    booked = _booked(tmp_path)
    settled = _settle(wal, eid, trusted_operator_key(tmp_path), "--landed", "--result", '{"ref": "R-rome-console"}')
    assert settled.returncode == 0, settled.stderr
    assert queue_of(wal).pending() == []  # answered
    (finding,) = [r for r in read_log(wal) if r["type"] == "STEP_SETTLED"]
    assert finding["step"] == 4 and finding["body"]["landed"] is True
    assert finding["body"]["result"] == {"ref": "R-rome-console"} and finding["body"]["operator"] == "ops@example.com"

    resumed = _recover(wal, tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_log(wal)
    assert records[-1]["type"] == "SAGA_COMPLETED"
    assert records[-1]["body"]["result"] == ["R-paris", "R-rome-console", "R-oslo"]  # the person's result, served
    assert 4 in {r["step"] for r in records if r["type"] == "STEP_SERVED"}
    assert _booked(tmp_path) == booked + Counter({"oslo": 1})  # rome is not booked again


def test_a_step_settled_as_not_landed_runs_again_once(tmp_path: Path) -> None:
    wal, eid = _held(tmp_path)
    booked = _booked(tmp_path)
    settled = _settle(wal, eid, trusted_operator_key(tmp_path), "--not-landed")
    assert settled.returncode == 0, settled.stderr

    resumed = _recover(wal, tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    records = read_log(wal)
    assert records[-1]["body"]["result"] == ["R-paris", "R-rome", "R-oslo"]
    assert _booked(tmp_path) == booked + Counter({"rome": 1, "oslo": 1})  # rome booked live, once


def test_a_finding_without_a_trusted_signature_settles_nothing(tmp_path: Path) -> None:
    wal, eid = _held(tmp_path)
    own = untrusted_operator_key(tmp_path)  # a key the agent could make for itself
    refused = _settle(wal, eid, own, "--not-landed")
    assert refused.returncode == 2 and "not trusted on this host" in refused.stderr
    assert "STEP_SETTLED" not in [r["type"] for r in read_log(wal)]
    # The agent writes the same finding into its own log, under its own key: it is a claim, not a settle.
    log = FileWAL(wal)
    saga = read_log(wal)[0]["saga"]
    log.append("STEP_SETTLED", saga, OperatorKey.load(own).sign_saga("STEP_SETTLED", saga, {
        "operator": "ops@example.com", "reason": "trust me", "landed": False, "escalation": eid}), 4)
    log.close()
    booked = _booked(tmp_path)
    again = _recover(wal, tmp_path)
    assert again.returncode == 1, again.stdout + again.stderr  # still held for a person
    assert [e.id for e in queue_of(wal).pending()] == [eid] and _booked(tmp_path) == booked
    assert "SAGA_RESUMED" not in [r["type"] for r in read_log(wal)]


@pytest.mark.parametrize(("found", "code", "says"), [
    pytest.param(["--landed"], 2, "--landed needs --result JSON", id="landed-without-a-result"),
    pytest.param(["--landed", "--result", "{R-rome"], 2, "--result is not JSON", id="a-result-that-is-not-json"),
    pytest.param(["--not-landed", "--result", "{}"], 2, "--result goes with --landed", id="a-result-for-no-effect"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, found: list[str], code: int, says: str) -> None:
    wal, eid = _held(tmp_path)
    before = len(read_log(wal))
    ran = _settle(wal, eid, trusted_operator_key(tmp_path), *found)
    assert ran.returncode == code and says in ran.stderr and ran.stderr.strip().count("\n") == 0, ran.stderr
    assert len(read_log(wal)) == before and [e.id for e in queue_of(wal).pending()] == [eid]


def test_an_escalation_that_is_not_pending_is_refused_in_one_line(tmp_path: Path) -> None:
    wal, eid = _held(tmp_path)
    key = trusted_operator_key(tmp_path)
    assert _settle(wal, eid, key, "--not-landed").returncode == 0
    again = _settle(wal, eid, key, "--not-landed")  # answered already
    assert again.returncode == 1 and f"no pending resume-unknown escalation {eid!r}" in again.stderr
    assert [r["type"] for r in read_log(wal)].count("STEP_SETTLED") == 1
