"""The crash matrix: kill a real worker at every log-append boundary, then recover.

A 4-step saga (charge A with its refund known up front, reserve R1 whose release
needs the result, an IRREVERSIBLE notify, charge B) fails after step 4 and rolls
back in-process. Each crash point is its own process (forked from one parent
that imported the library once, so fifty points take seconds) and dies with
os._exit: before and after the flush of each of its records (forward and
rollback phases), inside an effect call, inside a compensation call, and while
idle between steps. Then the daemon runs (twice).

Judged against the world's own ledger, which records attempts and applied
effects separately, for every crash point:
no effect and no compensation applied twice; the daemon never calls a
compensation twice, nor one the worker's log already records as done; every
applied effect is undone, or escalated (or orphaned by a rollback the worker
itself finished); the chain verifies; ``certify`` names exactly the effects the
world still holds plus the escalated unknowns, and nothing that was undone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from recovery_checks import LEASE_TTL, WORKER, chain_ok, env_for, read_log, recover_twice, run_worker

from agent_saga.audit import certify
from agent_saga.recovery import fold
from agent_saga.recovery.escalations import EscalationQueue
from agent_saga.recovery.lease import recovery_dir

pytestmark = pytest.mark.slow  # every test here runs the CLI or another process

# Records the worker writes: start, 4 x (intent, commit), then the rollback:
# ROLLBACK_STARTED, 3 x (COMPENSATION_STARTED, STEP_COMPENSATED), STEP_ORPHANED, SAGA_ROLLED_BACK,
# and the ESCALATED record the unclean ending (the orphaned notify) files, once.
RECORDS = 19
# step -> (forward op, ref, compensation op)
STEPS = {1: ("charge", "A", "refund"), 2: ("reserve", "R1", "release"), 3: ("notify", "ops", None),
         4: ("charge", "B", "refund")}


def crash_points() -> list[tuple[str, dict[str, str]]]:
    points: list[tuple[str, dict[str, str]]] = []
    for n in range(1, RECORDS + 1):
        for when in ("before", "after"):
            points.append((f"{when} flush of record {n}", {"RECOVERY_CRASH_AT": f"{when}:{n}"}))
    for k in (1, 2, 3):
        points.append((f"idle after step {k}", {"RECOVERY_CRASH_AT": f"idle:{k}"}))
    for op, ref in (("charge", "A"), ("reserve", "R1"), ("notify", "ops"), ("charge", "B")):
        for when in ("before", "after"):
            points.append((f"inside {op} {ref} ({when} it applies)",
                           {"RECOVERY_CRASH_EFFECT": f"{op}:{ref}:{when}"}))
    for op, ref in (("refund", "B"), ("release", "R1"), ("refund", "A")):
        points.append((f"inside compensation {op} {ref}", {"RECOVERY_CRASH_EFFECT": f"{op}:{ref}:after"}))
    return points


@pytest.fixture
def daemon_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    monkeypatch.delenv("RECOVERY_CRASH_EFFECT", raising=False)


def _check_point(label: str, directory: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    wal = directory / "saga.wal"
    monkeypatch.setenv("RECOVERY_WORLD", str(directory))
    problems: list[str] = []
    before = read_log(wal)
    worker_ended = any(r["type"] == "SAGA_ROLLED_BACK" for r in before)
    records, items, wrong = recover_twice(wal, directory, ("charge", "reserve", "notify"))

    def fail(message: str) -> None:
        problems.append(f"[{label}] {message}")

    for message in wrong:
        fail(message)

    views = fold(records)
    if not views:
        # Killed before its start record reached the disk: nothing may have happened.
        if items:
            fail(f"the world changed although no record is durable: {items}")
        return problems
    if len(views) != 1:
        fail(f"expected one saga, found {len(views)}")
        return problems
    view = next(iter(views.values()))
    if view.ended != "SAGA_ROLLED_BACK":
        fail(f"the saga did not end rolled back: {view.ended}")
    escalated_steps = {e.step for e in EscalationQueue(recovery_dir(wal) / "escalations.jsonl").all()}

    applied_refs = {(e["op"], e["ref"]) for e in items if e["ev"] == "applied"}
    outstanding = set()
    for index, (op, ref, undo) in STEPS.items():
        if (op, ref) not in applied_refs:
            continue
        undone = undo is not None and (undo, ref) in applied_refs
        if undone:
            continue
        outstanding.add(index)
        if index not in escalated_steps and not (worker_ended and view.steps[index].settled == "orphaned"):
            fail(f"step {index} ({op} {ref}) is applied, not undone and not escalated")
    compensated_in_log = {i for i, s in view.steps.items() if s.compensated}
    for index in compensated_in_log:
        _, ref, undo = STEPS[index]
        if (undo, ref) not in applied_refs:
            fail(f"the log says step {index} was compensated but the world saw no {undo} {ref}")

    if not chain_ok(wal):
        fail("the hash chain does not verify")
    cert = certify(records)
    unaccounted = {u.step for u in cert.unaccounted}
    if not outstanding <= unaccounted:
        fail(f"certify missed outstanding effects: world {outstanding}, certify {unaccounted}")
    if not unaccounted <= escalated_steps | ({3} if worker_ended else set()):
        fail(f"certify names steps nobody escalated: {unaccounted - escalated_steps}")
    if unaccounted & compensated_in_log:
        fail("certify names a step that was compensated")
    return problems


def test_crash_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, daemon_env: None,
                      capsys: pytest.CaptureFixture[str]) -> None:
    points = crash_points()
    dirs = [tmp_path / f"p{i:02d}" for i in range(len(points))]

    started = time.monotonic()
    spec = []
    for (_, env), directory in zip(points, dirs, strict=True):
        directory.mkdir()
        spec.append({"wal": str(directory / "saga.wal"), "env": {"RECOVERY_WORLD": str(directory), **env}})
    (tmp_path / "points.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(WORKER), "--fork-each", str(tmp_path / "points.json")],
        env=env_for(tmp_path), capture_output=True, text=True, timeout=300, check=True,
    )
    codes = json.loads(done.stdout.splitlines()[-1])
    time.sleep(LEASE_TTL + 0.1)  # every worker is dead; let the last leases run out

    problems: list[str] = []
    states: dict[str, int] = {}
    for (label, _), directory, code in zip(points, dirs, codes, strict=True):
        if code != 137:
            problems.append(f"[{label}] the worker was not killed (exit {code}): the crash point never fired")
        states[_shape(directory)] = states.get(_shape(directory), 0) + 1
        problems.extend(_check_point(label, directory, monkeypatch))
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\ncrash matrix: {len(points)} crash points covered, {len(states)} distinct log shapes "
              f"before recovery, {elapsed:.1f}s")
    assert not problems, "\n".join(problems)
    assert len(points) >= 47
    for directory in dirs:
        shutil.rmtree(directory, ignore_errors=True)


def _shape(directory: Path) -> str:
    """The sequence of record types the worker left behind (before any daemon wrote)."""
    types = [r["type"] for r in read_log(directory / "saga.wal") if "by" not in r["body"]]
    return ",".join(types)


def test_every_crash_point_fires(tmp_path: Path) -> None:
    """A worker not told to crash finishes; the matrix above depends on the hook being real."""
    assert run_worker(tmp_path / "saga.wal", tmp_path, "four") == 0
    records: list[dict[str, Any]] = read_log(tmp_path / "saga.wal")
    assert len(records) == RECORDS
    assert run_worker(tmp_path / "b.wal", tmp_path, "four", RECOVERY_CRASH_AT="after:3") == 137
    assert len(read_log(tmp_path / "b.wal")) == 3
