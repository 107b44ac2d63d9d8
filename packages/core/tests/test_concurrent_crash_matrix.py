"""The concurrent crash matrix: every concurrent shape within its bound, killed at every boundary, then recovered.

The shapes are those of ``verify_concurrent_invariants`` on the threads face (siblings in flight
when the saga fails, each landing at its chosen moment of the rollback, the ordering forced by
the scheduler), with every fate whose undo works (the file world's refunds do not refuse: a
refusing undo's recovery is the sequential crash matrix's). Each shape first runs once without a
crash (``concurrent_worker.py``), tracing what happened in order: every record and every effect.
A crash point is then each boundary of that trace: before and after the flush of each record
(every append of the worker's log waits until its record is durable, so nothing else has happened
after it), and inside each effect call, before and after it applies. Two points that leave the
same log (record types, steps, what recovery reads from them) and the same world are one crash
state, run once. Each is a forked process killed with os._exit; then the recovery daemon runs,
twice.

Judged on the world's own file (attempts and applied effects, deduplicated by idempotency key),
the log and the escalation queue, for every crash state: no effect and no undo applied twice; the
daemon never runs a forward call, nor an undo twice, nor one the worker's log records as done;
every effect that stands is escalated (or was settled in the log as standing by a rollback the
worker finished, which then died before it could file the escalation, as in the sequential
matrix); every step the log calls compensated was undone in the world; exactly one settlement
per step that may have had an effect; the saga ends rolled back and nothing is left open; a
"clean" end record means nothing stands; the chain verifies; ``certify`` names every effect that
stands and nothing it does not.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import recovery_world as world
from concurrent_worker import encode, ref, run_points  # registers the undo the daemon runs here
from recovery_checks import LEASE_TTL, chain_ok, read_log, recover_twice

from agent_saga.audit import certify
from agent_saga.proving._concurrent_shapes import ConcurrentShape, Face, Fate, Slot, concurrent_shapes
from agent_saga.recovery import fold
from agent_saga.recovery.escalations import queue_of
from agent_saga.recovery.fold import StepView

pytestmark = pytest.mark.slow  # thousands of forked processes

#: The bound (threads face): (siblings, steps before them, their fates). One sibling with every fate
#: whose undo works; two with the fates a rollback undoes (a commit, an UNKNOWN outcome with an undo
#: known before the call): every fate for two would be several times the crash states, and minutes more.
BOUNDS = (
    (1, 1, frozenset(Fate) - {Fate.COMMITS_UNDO_REFUSES}),
    (2, 0, frozenset({Fate.COMMITS, Fate.UNKNOWN_UNDO_KNOWN})),
)
_SETTLING = frozenset({"STEP_COMPENSATED", "COMPENSATION_FAILED", "STEP_ORPHANED", "STEP_UNRESOLVED", "STEP_KEPT"})


def crash_shapes() -> list[ConcurrentShape]:
    shapes = {s: None for siblings, before, fates in BOUNDS for s in concurrent_shapes(siblings, before, (Face.THREADS,))
              if all(sibling.fate in fates for sibling in s.siblings)}
    return list(shapes)


def crash_points(shapes: list[ConcurrentShape], traces: list[list[list[Any]]]) -> dict[str, tuple[str, ConcurrentShape, dict[str, str]]]:
    """Every boundary of every trace, one per distinct crash state: key -> (label, shape, env)."""
    points: dict[str, tuple[str, ConcurrentShape, dict[str, str]]] = {}
    for shape, trace in zip(shapes, traces, strict=True):
        records = 0
        for i, event in enumerate(trace):
            if event[0] == "record":
                records += 1
                where = [(f"before flush of record {records} ({event[1]})", {"RECOVERY_CRASH_AT": f"before:{records}"}, i),
                         (f"after flush of record {records} ({event[1]})", {"RECOVERY_CRASH_AT": f"after:{records}"}, i + 1)]
            elif event[0] == "effect":
                _, op, name = event
                where = [(f"inside {op} {name} before it applies", {"RECOVERY_CRASH_EFFECT": f"{op}:{name}:before"}, i),
                         (f"inside {op} {name} after it applies", {"RECOVERY_CRASH_EFFECT": f"{op}:{name}:after"}, i + 1)]
            else:  # the queue's write: a crash right after it is one before its ESCALATED record's flush
                continue
            for label, env, end in where:
                points.setdefault(json.dumps(trace[:end]), (label, shape, env))
    return points


def test_concurrent_crash_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    shapes = crash_shapes()
    runs = []
    for i, shape in enumerate(shapes):
        directory = tmp_path / f"t{i}"
        directory.mkdir()
        runs.append({"shape": encode(shape), "dir": str(directory), "env": {"RECOVERY_WORLD": str(directory)},
                     "trace": str(directory / "trace.json")})
    assert set(run_points(tmp_path, runs, "traces.json")) == {0}
    traces = [json.loads(Path(run["trace"]).read_text()) for run in runs]
    for run in runs:
        shutil.rmtree(run["dir"])

    points = crash_points(shapes, traces)
    boundaries = sum(2 * len(trace) for trace in traces)
    spec, where = [], []
    for n, (label, shape, env) in enumerate(points.values()):
        directory = tmp_path / f"p{n}"
        directory.mkdir()
        spec.append({"shape": encode(shape), "dir": str(directory), "env": {"RECOVERY_WORLD": str(directory), **env}})
        where.append((f"{label} | {shape.describe()}", shape, directory))
    codes = run_points(tmp_path, spec, "points.json")
    time.sleep(LEASE_TTL + 0.1)  # every worker is dead; let the last leases run out

    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    problems: list[str] = []
    for (label, shape, directory), code in zip(where, codes, strict=True):
        if code != 137:
            error = directory / "worker-error.txt"
            why = error.read_text().strip().splitlines()[-1] if error.exists() else "no traceback"
            died = directory / "thread-errors.txt"
            if died.exists():  # a thread of the worker died first (its log's flusher, say): say of what
                why += f"; before that, {died.read_text().strip().splitlines()[-1]} (see {died})"
            problems.append(f"[{label}] the worker was not killed (exit {code}): the crash point never fired ({why})")
            continue
        problems.extend(_check_point(label, shape, directory, monkeypatch))
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nconcurrent crash matrix: {len(shapes)} shapes, {boundaries} crash points, {len(points)} distinct "
              f"crash states, {elapsed:.1f}s")
    assert not problems, "\n".join(problems[:40])
    assert (len(shapes), len(points)) == (200, 2277)  # the figures docs/PROVING.md states


def _check_point(label: str, shape: ConcurrentShape, directory: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    wal = directory / "saga.wal"
    monkeypatch.setenv("RECOVERY_WORLD", str(directory))
    problems: list[str] = []

    def fail(message: str) -> None:
        problems.append(f"[{label}] {message}")

    before = read_log(wal) if wal.exists() else []
    worker_ended = any(r["type"] == "SAGA_ROLLED_BACK" for r in before)
    if not before:
        if world.entries(directory):
            fail(f"the world changed although no record is durable: {world.entries(directory)}")
        return problems
    records, items, wrong = recover_twice(wal, directory, ("charge",))
    for message in wrong:
        fail(message)

    (view,) = fold(records).values()
    if view.ended != "SAGA_ROLLED_BACK" or view.open:
        fail(f"the saga is not closed after recovery (ended {view.ended}, open {view.open})")
    open_ = [e for e in queue_of(wal).all() if not e.resolved]
    if any(e.kind == "in-flight" for e in open_):
        fail(f"an in-flight escalation is still open after recovery: {[(e.step, e.kind) for e in open_]}")
    pending = Counter(e.step for e in open_ if e.kind != "in-flight")
    done = {(e["op"], e["ref"]) for e in items if e["ev"] == "applied"}
    standing = set()
    for index in range(1, shape.before + len(shape.siblings) + 1):
        if ("charge", ref(index)) not in done or ("refund", ref(index)) in done:
            continue
        standing.add(index)
        step = view.steps.get(index)
        settled_by_worker = worker_ended and step is not None and step.settled in ("orphaned", "unresolved")
        if not pending[index] and not settled_by_worker:
            fail(f"step {index}'s charge stands, and it is neither undone nor escalated")
    for index, step in sorted(view.steps.items()):
        if step.compensated and ("refund", ref(index)) not in done:
            fail(f"the log says step {index} was compensated but the world saw no refund")
        settling = sum(1 for r in records if r.get("step") == index and r["type"] in _SETTLING
                       and r["body"].get("in_flight") is not True)
        if settling != int(step.applied):
            fail(f"step {index} is settled {settling} time(s) in the log (its effect {'may exist' if step.applied else 'never existed'})")
    if any(r["type"] == "SAGA_ROLLED_BACK" and r["body"].get("clean") is True for r in records) and standing:
        fail(f"an end record says clean while the charges of steps {sorted(standing)} stand")
    if not chain_ok(wal):
        fail("the hash chain does not verify")
    unaccounted = {u.step for u in certify(records).unaccounted}
    if not standing <= unaccounted:
        fail(f"certify missed standing effects: world {sorted(standing)}, certify {sorted(unaccounted)}")
    undone = {index for index in view.steps if ("refund", ref(index)) in done}
    if unaccounted & undone:
        fail(f"certify names steps whose charge was refunded: {sorted(unaccounted & undone)}")
    stale = sorted(step for step in pending if step in undone)
    if stale:
        fail(f"escalations stay open for steps whose charge was refunded: {stale} ({[(e.step, e.kind) for e in open_]})")
    return problems


def test_the_matrix_catches_a_daemon_blind_to_steps_that_landed_after_their_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that cannot fail proves nothing: with recovery reading a rolled-back saga as closed
    whatever landed after it, a late charge whose process died before its undo is reported."""
    shape = next(s for s in crash_shapes() if len(s.siblings) == 1 and s.before == 0
                 and s.siblings[0].fate is Fate.COMMITS and s.siblings[0].slot is Slot.AFTER)
    env = {"RECOVERY_WORLD": str(tmp_path), "RECOVERY_CRASH_AT": "after:STEP_COMMITTED"}
    assert run_points(tmp_path, [{"shape": encode(shape), "dir": str(tmp_path), "env": env}]) == [137]
    time.sleep(LEASE_TTL + 0.1)
    monkeypatch.setenv("RECOVERY_ROLE", "daemon")
    monkeypatch.setattr(StepView, "late_open", property(lambda step: False))
    problems = _check_point("late charge, killed before its undo", shape, tmp_path, monkeypatch)
    assert any("step 1's charge stands, and it is neither undone nor escalated" in p for p in problems), problems
