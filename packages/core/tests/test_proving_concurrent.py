"""verify_concurrent_invariants: every concurrent shape within the bound, each ordering forced, on the real engine.

The engine passes at 2 siblings after 1 step (both faces); engines with a bug injected on purpose
(the issue's own: a sibling that lands after the rollback gave up on it is dropped; and the
fence checked only while the rollback runs) are caught, with the invariant named and the
counterexample minimised.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import agent_saga.proving as proving
from agent_saga import ConfigurationError
from agent_saga.engine import saga as engine_saga
from agent_saga.engine.state import SagaStatus
from agent_saga.proving import ConcurrentReport, verify_concurrent_invariants
from agent_saga.proving._concurrent_invariants import (
    CONCURRENT_INVARIANTS,
    EVERY_EFFECT,
    FENCE,
    check_concurrent,
    expected_concurrent,
)
from agent_saga.proving._concurrent_run import run_concurrent
from agent_saga.proving._concurrent_shapes import (
    ConcurrentShape,
    Face,
    Fate,
    Sibling,
    Slot,
    concurrent_shapes,
    possible,
)
from agent_saga.semantics import Outcome


def shape(*siblings: tuple[Fate, Slot], before: int = 0, face: Face = Face.THREADS,
          order: tuple[int, ...] | None = None, halt: bool = True) -> ConcurrentShape:
    sibs = tuple(Sibling(f, s) for f, s in siblings)
    if order is None:
        order = tuple(sorted(range(len(sibs)), key=lambda i: sibs[i].slot))
    return ConcurrentShape(before, sibs, order, halt, face)


@pytest.mark.slow  # ~7,000 runs with threads and event loops: the full core env only
async def test_the_engine_keeps_every_invariant_over_every_concurrent_shape_of_two_siblings() -> None:
    report = await verify_concurrent_invariants(siblings=2, before=1)

    assert report.ok, report.format_text()
    assert report.shapes == report.total == 6904  # the figure docs/PROVING.md states
    text = report.format_text()
    assert "6904 of 6904 concurrent shape(s) explored" in text
    assert f"{len(CONCURRENT_INVARIANTS)} invariants: " + ", ".join(CONCURRENT_INVARIANTS) in text
    assert "result: no violation" in text


async def test_every_concurrent_shape_of_one_sibling_keeps_every_invariant() -> None:
    report = await verify_concurrent_invariants(siblings=1, before=1)

    assert report.ok, report.format_text()
    assert report.shapes == report.total == 156


def test_the_shapes_are_distinct_possible_and_counted() -> None:
    counts = {}
    for n, before in ((1, 0), (1, 1), (2, 0), (2, 1)):
        every = list(concurrent_shapes(n, before))
        assert len(every) == len(set(every))
        assert all(possible(s) for s in every)
        counts[n, before] = len(every)
    assert counts == {(1, 0): 70, (1, 1): 156, (2, 0): 2930, (2, 1): 6904}  # as docs/PROVING.md says
    one = list(concurrent_shapes(1, 0, (Face.TASKS,)))
    assert not any(s.siblings[0].slot is Slot.EDGE for s in one)  # no moment between a task's record and its land
    two = list(concurrent_shapes(2, 0))
    # every landing order within one moment: both orders of two siblings landing while the rollback waits
    assert {s.order for s in two if [x.slot for x in s.siblings] == [Slot.WAITED] * 2} == {(0, 1), (1, 0)}


def test_the_rules_each_concurrent_shape_is_held_to() -> None:
    # Step 1 before; step 2 commits and its undo refuses, landing while the rollback waits; step 3
    # commits after the end record: the rollback halts at 2, which strands 1 (older) but not 3 (newer:
    # newest first, its undo may run before 2's), so 3 is undone when it lands.
    want = expected_concurrent(shape((Fate.COMMITS_UNDO_REFUSES, Slot.WAITED), (Fate.COMMITS, Slot.ENDING), before=1))
    assert want.outcomes == {3: Outcome.UNRESOLVED, 2: Outcome.FAILED, 1: Outcome.UNRESOLVED}
    assert want.left == {3} and want.late == {3: Outcome.COMPENSATED} and want.halted_at == 2
    assert want.stranded == {1} and not want.clean
    # the same shape with the halting step newest: the late step 2, older than it, is stranded
    want = expected_concurrent(shape((Fate.COMMITS, Slot.ENDING), (Fate.COMMITS_UNDO_REFUSES, Slot.WAITED), before=1))
    assert want.halted_at == 3 and want.late == {2: Outcome.UNRESOLVED} and want.stranded == {1, 2}
    # the same step 3 landing during the rollback's first undo meets no halt yet: it is undone
    want = expected_concurrent(shape((Fate.COMMITS_UNDO_REFUSES, Slot.WAITED), (Fate.COMMITS, Slot.UNDOING), before=1))
    assert want.late == {3: Outcome.COMPENSATED} and want.attempts[3] == 2  # odd steps need two attempts
    # a fenced call never runs: nothing to settle when it lands, and its caller is refused
    want = expected_concurrent(shape((Fate.FENCED, Slot.AFTER)))
    assert want.late == {1: None} and want.effects == frozenset()


def test_a_run_is_judged_on_the_world_the_log_and_the_callers() -> None:
    run = run_concurrent(shape((Fate.COMMITS, Slot.WAITED), (Fate.UNKNOWN_UNDO_KNOWN, Slot.UNDOING), before=1))
    assert check_concurrent(run) == []
    assert run.trace == [("main", "fail"), ("s0", "call"), ("s1", "call"), ("main", "ROLLBACK_STARTED"),
                         ("main", "undo")]  # the ordering, as forced
    types = [(r["type"], r.get("step")) for r in run.records]
    # step 3 was left, then landed (UNKNOWN) during the undo of step 2 and was undone there
    assert types.index(("STEP_UNRESOLVED", 3)) < types.index(("COMPENSATION_STARTED", 2)) < types.index(
        ("STEP_UNKNOWN", 3)) < types.index(("STEP_COMPENSATED", 3)) < types.index(("STEP_COMPENSATED", 2))
    assert run.world.standing() == set()


@pytest.mark.parametrize(("bad", "match"), [
    ({"siblings": 0}, "siblings must be an int from 1 to 3"),
    ({"siblings": 4}, "siblings must be an int from 1 to 3"),
    ({"siblings": True}, "siblings must be an int from 1 to 3"),
    ({"before": 3}, "before must be an int from 0 to 2"),
    ({"faces": ("threads", "fibers")}, "unknown face 'fibers': use 'threads', 'tasks' or both"),
    ({"faces": ()}, "faces= is empty"),
])
async def test_a_bound_outside_the_checked_range_is_refused(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        await verify_concurrent_invariants(**bad)


def test_the_public_face_is_pinned() -> None:
    assert proving.__all__ == [
        "INVARIANTS", "ConcurrentReport", "Counterexample", "FailureMode", "InjectedFailure", "InvariantReport",
        "Probe", "RollbackProof", "Verdict", "prove_rollback", "verify_concurrent_invariants",
        "verify_rollback_invariants",
    ]


# -- engines with a bug injected on purpose ----------------------------------------------


@pytest.fixture
def drops_late_landings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug issue 39 reported: a sibling that lands after the rollback gave up on it is never settled."""
    def nothing(saga: Any, step: Any) -> Iterator[Any]:
        return
        yield

    monkeypatch.setattr(engine_saga, "settle_late", nothing)


@pytest.fixture
def old_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug this checker found: the fence held only while ROLLING_BACK, not once the rollback ended."""
    monkeypatch.setattr(engine_saga, "_UNWOUND", frozenset({SagaStatus.ROLLING_BACK}))


@pytest.mark.usefixtures("drops_late_landings")
async def test_an_engine_that_drops_late_landings_is_caught_and_minimised() -> None:
    report = await verify_concurrent_invariants(siblings=2, before=1)

    assert not report.ok and report.counterexample is not None
    example = report.counterexample
    assert example.violations[0][0] == EVERY_EFFECT
    # the smallest: one sibling that commits with its outcome recorded just as the grace runs out
    assert example.shape == shape((Fate.COMMITS, Slot.EDGE))
    assert report.shapes < report.total  # it stopped at the first counterexample
    text = report.format_text()
    assert "VIOLATION of every effect compensated or escalated" in text
    assert "the world holds the effects of steps [1] once every step landed, expected []" in text


@pytest.mark.usefixtures("old_fence")
async def test_an_engine_whose_fence_lapses_when_the_rollback_ends_is_caught() -> None:
    report = await verify_concurrent_invariants(siblings=1, before=0)

    assert report.counterexample is not None
    assert report.counterexample.violations[0][0] == FENCE
    assert report.counterexample.shape == shape((Fate.FENCED, Slot.AFTER))
    assert "the call of step(s) [1] ran although it had not begun when the fence went up" in report.format_text()


def test_the_report_states_its_bound() -> None:
    text = ConcurrentReport(2, 1, (Face.THREADS, Face.TASKS), 6904, 6904, 1.0).format_text()
    assert "1..2 sibling(s) x 7 fates x 6 landing moments" in text
    assert "after 0..1 step(s) before them, halt or not, threads and tasks" in text
    assert "not a claim for more siblings, for other interleavings than these moments, nor for crashes" in text


def test_a_stalled_log_names_the_actor_that_did_not_arrive_and_where_each_was(tmp_path: Any) -> None:
    # The stall is forced: another holder keeps the log file's lock, so the flusher cannot write.
    import fcntl
    import os

    from agent_saga.errors import WALStalled
    from agent_saga.proving._concurrent_run import ScheduledWAL
    from agent_saga.proving._scheduler import Scheduler, acting

    scheduler = Scheduler()
    wal = ScheduledWAL(tmp_path / "saga.wal", scheduler)
    holder = os.open(tmp_path / "saga.wal", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)
    try:
        scheduler.hold("s0", "call")  # s0 is awaited at its call and never gets there
        with acting("main"):
            scheduler.trace.append(("main", "fail"))  # where main last stopped, as a run records it
            ticket = wal.append("SAGA_STARTED", "saga-1", {})
            with pytest.raises(WALStalled) as stalled:
                wal.barrier(ticket, timeout=0.2)  # the bound of a stall that is certain
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
        wal.close()
    text = str(stalled.value)
    assert "not durable" in text
    assert "flusher committing, 0 record(s) queued; actors: main on its way from fail; s0 on its way, not stopped yet, expected at call" in text
