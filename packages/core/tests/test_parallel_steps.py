"""Several tool calls at once: a rollback settles every step, the siblings in flight included.

Each ordering is forced with the log's own records (``parallel_support.SignalWAL``): a
sibling's tool blocks until the rollback has begun (it then commits while the rollback waits
for it) or has ended (it lands after the rollback gave up on it). Two faces: tasks on one
event loop (``asyncio.gather``, as OpenAI Agents or Pydantic AI run a model's calls), and
sync tools on a raw thread pool that does not copy the context, under ``SagaFleet``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from parallel_support import BOUND, Bookings, SignalWAL, wait_until

from agent_saga import (
    Compensation,
    MemoryWAL,
    NotApplied,
    Outcome,
    RecoveryDaemon,
    RetryPolicy,
    SagaAborted,
    SagaClosed,
    SagaFleet,
    StepRefused,
    StepState,
    call_with,
    compensator,
    saga_scope,
)
from agent_saga.engine.saga import Saga, SagaStatus
from agent_saga.recovery.escalations import queue_of
from agent_saga.recovery.lease import lease_keeper, lease_path

SIBLINGS = ("b1", "b2", "b3")


@pytest.fixture
def world() -> Bookings:
    return Bookings()


@pytest.fixture
def log(tmp_path: Path) -> Iterator[SignalWAL]:
    wal = SignalWAL(tmp_path / "parallel.wal")
    yield wal
    wal.close()


def _undo(result: Any) -> Compensation:
    return Compensation(handler=Bookings.HANDLER, kwargs={"ref": result["ref"]})


def _run(face: str, log: SignalWAL, world: Bookings, after: str, **options: Any) -> tuple[SagaAborted, list[Any]]:
    """Three booking siblings, each landing once the log holds ``after``, and a fourth call that
    fails once all three are in flight: (what the saga raised, what each sibling's caller got)."""

    def sibling(ref: str) -> dict[str, str]:
        world.begin()
        log.wait_for(after)
        return world.book(ref)

    def fail() -> Any:
        world.started(len(SIBLINGS))
        raise NotApplied("the payment service refused the card")  # certainly nothing happened

    if face == "tasks":
        return asyncio.run(_run_tasks(log, sibling, fail, options))
    return _run_threads(log, sibling, fail, options)


async def _run_tasks(log: SignalWAL, sibling: Callable[[str], Any], fail: Callable[[], Any],
                     options: dict[str, Any]) -> tuple[SagaAborted, list[Any]]:
    tasks: list[asyncio.Future[Any]] = []
    with pytest.raises(SagaAborted) as caught:
        async with saga_scope(log, **options) as s:
            def book(ref: str) -> Any:
                return s.execute(tool="book", semantics="COMPENSABLE", forward=lambda: sibling(ref),
                                 compensate=_undo, args={"ref": ref})

            tasks = [asyncio.ensure_future(book(ref)) for ref in SIBLINGS]
            await s.execute(tool="pay", semantics="COMPENSABLE", forward=fail, compensate=_undo)
    # What each sibling's caller got (they finish on the loop after the rollback, if late).
    return caught.value, await asyncio.gather(*tasks, return_exceptions=True)


def _run_threads(log: SignalWAL, sibling: Callable[[str], Any], fail: Callable[[], Any],
                 options: dict[str, Any]) -> tuple[SagaAborted, list[Any]]:
    fleet = SagaFleet("parallel", wal=log)
    book = fleet.register(sibling, framework="raw", name="book", semantics="COMPENSABLE", compensate=_undo)
    pay = fleet.register(fail, framework="raw", name="pay", semantics="COMPENSABLE", compensate=_undo)
    futures: list[Future[Any]] = []
    # A raw pool: it copies no context, so each tool finds the saga through the fleet.
    with ThreadPoolExecutor(4) as pool, pytest.raises(SagaAborted) as caught:
        with fleet.transaction(**options):
            futures = [pool.submit(book, ref) for ref in SIBLINGS]
            pool.submit(pay).result()
    return caught.value, [future.exception() or future.result() for future in futures]


def _settled_in_order(log: SignalWAL) -> None:
    """Every STEP_COMMITTED of the run is followed by that step's STEP_COMPENSATED."""
    seen = log.types()
    for i, (rtype, step) in enumerate(seen):
        if rtype == "STEP_COMMITTED":
            assert ("STEP_COMPENSATED", step) in seen[i:], f"step {step} committed and was never undone: {seen}"


def _nothing_for_recovery(log: SignalWAL) -> None:
    log.barrier()
    with RecoveryDaemon(log.path) as daemon:
        swept = daemon.sweep()
    assert (swept.open_sagas, swept.compensated, swept.actions) == (0, 0, []), swept.summary()


FACES = pytest.mark.parametrize("face", ["tasks", "threads"])


@FACES
def test_siblings_that_commit_while_the_rollback_waits_are_undone_and_the_report_is_clean(
    face: str, log: SignalWAL, world: Bookings
) -> None:
    aborted, results = _run(face, log, world, "ROLLBACK_STARTED")

    assert world.standing == set()
    assert world.cancelled == dict.fromkeys(SIBLINGS, 1)
    report = aborted.report
    assert report.clean, report.format_text()
    undone = [o.step for o in report.compensated]
    assert [o.tool for o in report.compensated] == ["book"] * 3
    assert undone == sorted(undone, reverse=True)  # newest first, as if they had run one by one
    assert report.in_flight == ()
    assert all(isinstance(r, dict) for r in results)  # each call returned its (real) result
    seen = log.types()
    assert seen.index(("SAGA_ROLLED_BACK", None)) > max(
        i for i, (rtype, _) in enumerate(seen) if rtype in ("STEP_COMMITTED", "STEP_COMPENSATED"))
    _settled_in_order(log)
    _nothing_for_recovery(log)


@FACES
def test_siblings_still_running_when_the_grace_runs_out_are_undone_the_moment_they_land(
    face: str, log: SignalWAL, world: Bookings
) -> None:
    aborted, results = _run(face, log, world, "SAGA_ROLLED_BACK", rollback_grace=0)

    assert world.standing == set()
    assert world.cancelled == dict.fromkeys(SIBLINGS, 1)
    report = aborted.report
    assert not report.clean  # the rollback ended not knowing: it said so
    left = [o.step for o in report.in_flight]
    assert [(o.tool, o.outcome, o.state) for o in report.in_flight] == [
        ("book", Outcome.UNRESOLVED, StepState.PENDING)] * 3
    assert left == sorted(left, reverse=True)
    assert f"IN FLIGHT  step {left[0]} book" in report.format_text()
    # Each late caller is told its saga is gone; its effect was settled as it landed.
    assert [type(r) for r in results] == [SagaClosed] * 3
    seen = log.types()
    end = seen.index(("SAGA_ROLLED_BACK", None))
    for step in left:
        committed = seen.index(("STEP_COMMITTED", step))
        assert committed > end and seen.index(("STEP_COMPENSATED", step)) > committed
    _settled_in_order(log)
    # A person was told at the end, and told again when each landed.
    queue = queue_of(log.path)
    assert sorted((e.step, e.kind, e.resolved) for e in queue.all()) == [
        (step, "in-flight", True) for step in sorted(left)]
    wait_until(lambda: not lease_path(log.path, report.saga_id).exists(), "the lease's release")
    _nothing_for_recovery(log)


def test_the_lease_is_held_until_the_last_step_left_in_flight_lands(log: SignalWAL, world: Bookings) -> None:
    gate = asyncio.Event()

    async def main() -> None:
        async with saga_scope(log, rollback_grace=0) as s:
            async def late() -> dict[str, str]:
                world.begin()
                await gate.wait()
                return world.book("b1")

            task = asyncio.ensure_future(s.execute(tool="book", semantics="COMPENSABLE", forward=late,
                                                   compensate=_undo))
            saga_id = s.saga_id
            try:
                await s.execute(tool="pay", semantics="COMPENSABLE", forward=_fail_once_started(world, 1),
                                compensate=_undo)
            finally:
                holder.append((task, saga_id))

    holder: list[tuple[asyncio.Future[Any], str]] = []

    async def run() -> None:
        with pytest.raises(SagaAborted):
            await main()
        task, saga_id = holder[0]
        assert (log.path, saga_id) in lease_keeper().held()  # the step still runs: the saga is not over
        gate.set()
        with pytest.raises(SagaClosed):
            await task
        assert (log.path, saga_id) not in lease_keeper().held()

    asyncio.run(run())
    assert world.standing == set()


def _fail_once_started(world: Bookings, n: int) -> Callable[[], Any]:
    async def fail() -> None:
        await asyncio.to_thread(world.started, n)
        raise NotApplied("refused")

    return fail


@pytest.mark.parametrize(("semantics", "raises", "kind", "record"), [
    ("IRREVERSIBLE", None, "irreversible", "STEP_ORPHANED"),
    ("COMPENSABLE", RuntimeError("the booking service timed out"), "unknown-outcome", "STEP_UNRESOLVED"),
    ("COMPENSABLE", NotApplied("the booking service said no"), None, "STEP_NOT_APPLIED"),
], ids=["irreversible-commit", "unknown", "not-applied"])
def test_a_late_step_that_cannot_be_undone_is_escalated_never_dropped(
    log: SignalWAL, world: Bookings, semantics: str, raises: BaseException | None, kind: str | None, record: str,
) -> None:
    def late() -> dict[str, str]:
        world.begin()
        log.wait_for("SAGA_ROLLED_BACK")
        booked = world.book("b1")
        if raises is not None:
            raise raises
        return booked

    box: list[Any] = []
    with ThreadPoolExecutor(1) as pool, pytest.raises(SagaAborted):
        with saga_scope(log, rollback_grace=0) as s:
            compensate = _undo if semantics == "COMPENSABLE" else None
            box.append(pool.submit(s.execute, tool="book", semantics=semantics, forward=late, compensate=compensate))
            world.started(1)
            raise RuntimeError("the agent gave up")
    with pytest.raises(BaseException) as late_error:
        box[0].result()
    # The late caller gets what its own call did: a closed saga for a commit, its own error otherwise.
    assert isinstance(late_error.value, SagaClosed if raises is None else type(raises))
    assert (record, 1) in log.types()[log.types().index(("SAGA_ROLLED_BACK", None)):]
    opened = {e.kind: e for e in queue_of(log.path).all()}
    assert opened["in-flight"].resolved
    if kind is None:
        assert set(opened) == {"in-flight"}  # it never ran: nothing for a person
    else:
        assert not opened[kind].resolved and opened[kind].step == 1
        assert ("ESCALATED", 1) in log.types()[log.types().index(("STEP_COMMITTED", 1))
                                               if raises is None else -2:]
    _nothing_for_recovery(log)


def test_a_step_waiting_at_the_gate_when_the_rollback_begins_never_starts(log: SignalWAL, world: Bookings) -> None:
    """The fence: a call admitted after ROLLBACK_STARTED is refused, and its tool never runs."""
    admitted = asyncio.Event()

    class WaitingGate:
        def admit(self, saga: Any) -> None: ...

        def check(self, request: Any) -> None: ...

        async def check_async(self, request: Any) -> None:
            if request.tool == "book":
                await admitted.wait()  # a person is asked (an approval)

        def observe(self, request: Any, error: BaseException | None) -> None: ...

    loops: list[asyncio.AbstractEventLoop] = []

    @compensator("parallel.release_gate")
    def release_gate(ref: str) -> None:
        # The undo of step 1 runs inside the rollback (on a worker thread): let the waiting call through now.
        loops[0].call_soon_threadsafe(admitted.set)
        log.wait_for("STEP_REFUSED", 2)

    async def main() -> None:
        async with saga_scope(log, gate=WaitingGate()) as s:
            await s.execute(tool="reserve", semantics="COMPENSABLE", forward=lambda: world.book("r1"),
                            compensate=call_with(release_gate, ref="r1"))
            waiting.append(asyncio.ensure_future(s.execute(
                tool="book", semantics="COMPENSABLE", forward=lambda: world.book("b1"), compensate=_undo)))
            await asyncio.sleep(0)  # the call reaches the gate
            raise RuntimeError("the agent gave up")

    waiting: list[asyncio.Future[Any]] = []

    async def run() -> None:
        loops.append(asyncio.get_running_loop())
        with pytest.raises(SagaAborted) as caught:
            await main()
        with pytest.raises(StepRefused) as refused:
            await waiting[0]
        assert refused.value.rule == "rolling-back"
        assert caught.value.report.clean

    asyncio.run(run())
    assert world.made == {"r1": 1}  # b1 was never booked
    refusal = next(r for r in log.records() if r["type"] == "STEP_REFUSED")
    assert (refusal["step"], refusal["body"]["rule"]) == (2, "rolling-back")


def test_a_durable_call_whose_intent_is_on_disk_when_the_rollback_begins_does_not_run(
    tmp_path: Path, world: Bookings
) -> None:
    """Between a durable step's intent barrier and its call, the fence is checked again."""

    class SlowIntent(SignalWAL):
        def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
            if threading.current_thread().name.startswith("sibling"):  # its intent, once the rollback began
                self.wait_for("ROLLBACK_STARTED")
            super().barrier(ticket, timeout)

    log = SlowIntent(tmp_path / "slow.wal")
    box: list[Any] = []
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="sibling") as pool, pytest.raises(SagaAborted) as caught:
            with saga_scope(log) as s:
                box.append(pool.submit(s.execute, tool="book", semantics="COMPENSABLE",
                                       forward=lambda: world.book("b1"), compensate=_undo))
                log.wait_for("STEP_INTENT", 1)
                raise RuntimeError("the agent gave up")
        with pytest.raises(StepRefused, match="began to roll back before this call started"):
            box[0].result()
        assert world.made == {}  # never called
        assert caught.value.report.clean and caught.value.report.steps == ()
        not_applied = next(r for r in log.records() if r["type"] == "STEP_NOT_APPLIED")
        assert not_applied["step"] == 1
    finally:
        log.close()


@pytest.mark.parametrize("retry", [None, RetryPolicy(max_attempts=3, base_delay=0)], ids=["once", "retrying"])
def test_a_call_left_in_flight_before_it_began_never_begins_after_the_rollback_ended(
    tmp_path: Path, world: Bookings, retry: RetryPolicy | None
) -> None:
    """The fence holds after the rollback too: a step the rollback left (grace 0) with its intent
    on disk but its call not begun resumes once the saga is ROLLED_BACK; its call must not run."""
    sagas: list[Saga] = []

    class SlowIntent(SignalWAL):
        def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
            if threading.current_thread().name.startswith("sibling"):  # its intent: on after the end
                wait_until(lambda: sagas[0].status is SagaStatus.ROLLED_BACK, "the rollback's end")
            super().barrier(ticket, timeout)

    log = SlowIntent(tmp_path / "slow.wal")
    box: list[Any] = []
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="sibling") as pool, pytest.raises(SagaAborted) as caught:
            with saga_scope(log, rollback_grace=0) as s:
                sagas.append(s.saga)
                box.append(pool.submit(s.execute, tool="book", semantics="COMPENSABLE", retry=retry,
                                       forward=lambda: world.book("b1"), compensate=_undo))
                log.wait_for("STEP_INTENT", 1)
                raise RuntimeError("the agent gave up")
        with pytest.raises(StepRefused, match="did not run"):
            box[0].result()
        assert world.made == {}  # never called, although its saga had already ended
        (left,) = caught.value.report.in_flight
        assert left.step == 1
        seen = log.types()
        assert seen.index(("SAGA_ROLLED_BACK", None)) < seen.index(("STEP_NOT_APPLIED", 1))
        assert ("STEP_COMMITTED", 1) not in seen
        (escalation,) = queue_of(log.path).all()
        assert (escalation.kind, escalation.resolved) == ("in-flight", True)
    finally:
        log.close()


def test_a_retrying_sibling_stops_retrying_when_the_rollback_begins(log: SignalWAL, world: Bookings) -> None:
    """Attempt 1 landed and raised; the rollback began during the retry's wait: no attempt 2."""
    attempts: list[int] = []

    def flaky() -> dict[str, str]:
        attempts.append(1)
        world.begin()
        log.wait_for("ROLLBACK_STARTED")
        world.book("b1")
        raise ConnectionError("the reply was lost")

    box: list[Any] = []
    with ThreadPoolExecutor(1) as pool, pytest.raises(SagaAborted) as caught:
        with saga_scope(log) as s:
            box.append(pool.submit(
                s.execute, tool="book", semantics="COMPENSABLE", forward=flaky,
                compensate=call_with(world.cancel, ref="b1"), retry=RetryPolicy(max_attempts=5, base_delay=0),
            ))
            world.started(1)
            raise RuntimeError("the agent gave up")
    with pytest.raises(StepRefused, match="stopped before attempt 2, after attempt 1 failed"):
        box[0].result()
    assert attempts == [1]
    assert world.standing == set()  # UNKNOWN, undone with the undo known before the call
    (outcome,) = caught.value.report.steps
    assert (outcome.state, outcome.outcome) == (StepState.UNKNOWN, Outcome.COMPENSATED)


def test_a_sibling_that_never_returns_is_bounded_by_its_own_timeout(log: SignalWAL, world: Bookings) -> None:
    never = threading.Event()

    def hang() -> None:
        world.begin()
        never.wait(BOUND)

    box: list[Any] = []
    try:
        with ThreadPoolExecutor(1) as pool, pytest.raises(SagaAborted) as caught:
            with saga_scope(log) as s:  # the default grace (30 s) is longer than the step's timeout
                box.append(pool.submit(s.execute, tool="book", semantics="COMPENSABLE", forward=hang,
                                       compensate=_undo, timeout=0.2))
                world.started(1)
                raise RuntimeError("the agent gave up")
        (outcome,) = caught.value.report.steps
        assert (outcome.state, outcome.outcome) == (StepState.UNKNOWN, Outcome.UNRESOLVED)
        assert caught.value.report.in_flight == ()
        with pytest.raises(TimeoutError):
            box[0].result()
    finally:
        never.set()


def test_the_commit_waits_for_the_steps_in_flight_and_refuses_new_ones(log: SignalWAL, world: Bookings) -> None:
    release = threading.Event()

    def slow() -> dict[str, str]:
        world.begin()
        release.wait(BOUND)
        return world.book("b1")

    saga = Saga(log, name="commit-waits")
    saga.start()
    with ThreadPoolExecutor(2) as pool:
        step = pool.submit(saga.execute_sync, tool="book", semantics="COMPENSABLE", forward=slow, compensate=_undo)
        world.started(1)
        commit = pool.submit(saga.complete_sync)
        wait_until(lambda: saga.status is SagaStatus.COMPLETING, "the commit's start")
        with pytest.raises(SagaClosed, match="is completing"):
            saga.execute_sync(tool="book", semantics="COMPENSABLE", forward=lambda: world.book("b2"),
                              compensate=_undo)
        release.set()
        assert step.result() == {"ref": "b1"}
        commit.result()
    seen = log.types()
    assert seen.index(("STEP_COMMITTED", 1)) < seen.index(("SAGA_COMPLETED", None))
    assert world.made == {"b1": 1}


def test_a_sequential_saga_writes_the_same_log_as_before() -> None:
    """No sibling: the fence and the wait add no record (the crash matrix pins the rest)."""
    wal = MemoryWAL()
    with pytest.raises(SagaAborted), saga_scope(wal) as s:
        s.execute(tool="a", semantics="COMPENSABLE", forward=lambda: {"ref": "a"}, compensate=_undo)
        s.execute(tool="b", semantics="REVERSIBLE", forward=lambda: 1)
        raise RuntimeError("x")
    assert [r["type"] for r in wal.records()] == [
        "SAGA_STARTED", "STEP_INTENT", "STEP_COMMITTED", "STEP_COMMITTED", "ROLLBACK_STARTED", "STEP_KEPT",
        "COMPENSATION_STARTED", "STEP_COMPENSATED", "SAGA_ROLLED_BACK"]


# -- what recovery reads: a rolled-back saga with a step left in flight ----------------------


def _fold(*records: tuple[str, int | None, dict[str, Any]]) -> Any:
    from agent_saga.recovery import fold

    base: list[tuple[str, int | None, dict[str, Any]]] = [
        ("SAGA_STARTED", None, {"name": "s"}),
        ("STEP_INTENT", 1, {"tool": "book", "semantics": "COMPENSABLE", "op": "o1", "compensation": None}),
        ("ROLLBACK_STARTED", None, {"cause": "x"}),
    ]
    rows = [{"seq": i, "saga": "s1", "type": t, "step": step, "body": body}
            for i, (t, step, body) in enumerate([*base, *records], 1)]
    return fold(rows)["s1"]


_UNDO = {"handler": Bookings.HANDLER, "kwargs": {"ref": "b1"}, "key": "k1", "recoverable": True}
_LEFT = ("STEP_UNRESOLVED", 1, {"op": "o1", "detail": "in flight", "in_flight": True})
_END = ("SAGA_ROLLED_BACK", None, {"clean": False})
_COMMIT = ("STEP_COMMITTED", 1, {"op": "o1", "compensation": _UNDO})


@pytest.mark.parametrize(("records", "open_"), [
    ((_LEFT, _END), True),  # never landed: open, for the daemon once the process is gone (its lease)
    ((_LEFT, _END, _COMMIT), True),  # landed, not undone yet
    ((_COMMIT, _LEFT, _END), True),  # landed as the rollback gave up on it (either order)
    ((_LEFT, _END, _COMMIT, ("STEP_COMPENSATED", 1, {"key": "k1"})), False),
    ((_LEFT, _END, _COMMIT, ("COMPENSATION_FAILED", 1, {"key": "k1"})), False),  # escalated when it failed
    ((_LEFT, _END, ("STEP_NOT_APPLIED", 1, {"op": "o1"})), False),  # it never ran
    ((_END, _COMMIT), True),  # recorded after the saga rolled back without it (a process taken for dead)
    ((_COMMIT, ("STEP_COMPENSATED", 1, {"key": "k1"}), _END), False),  # an ordinary rollback
], ids=["never-landed", "landed", "landed-first", "undone", "undo-failed", "not-applied", "after-the-end",
        "sequential"])
def test_recovery_reads_a_rolled_back_saga_as_open_while_a_step_left_in_flight_is_unsettled(
    records: tuple[tuple[str, int | None, dict[str, Any]], ...], open_: bool
) -> None:
    view = _fold(*records)
    assert view.ended == "SAGA_ROLLED_BACK"
    assert view.open is open_
    assert [s.index for s in view.late_open()] == ([1] if open_ else [])


def test_a_committed_saga_is_not_reopened_by_a_step_that_lands_after_its_commit() -> None:
    from agent_saga.recovery import fold

    rows = [{"seq": i, "saga": "s1", "type": t, "step": step, "body": body} for i, (t, step, body) in enumerate([
        ("SAGA_STARTED", None, {"name": "s"}),
        ("STEP_INTENT", 1, {"tool": "book", "semantics": "COMPENSABLE", "op": "o1"}),
        ("SAGA_COMPLETED", None, {"steps": 1, "unknown": [], "in_flight": [1]}),
        _COMMIT,
    ], 1)]
    assert not fold(rows)["s1"].open  # a commit covers its steps: one landing late stands, as committed


# -- calls that outlive their step: a timeout, a cancellation --------------------------------


def _slow_booking(world: Bookings, release: threading.Event, ref: str) -> Callable[[], dict[str, str]]:
    def book() -> dict[str, str]:
        world.begin()
        release.wait(BOUND)
        return world.book(ref)

    return book


def _book_past_its_timeout(s: Any, world: Bookings, release: threading.Event) -> None:
    """A booking step that times out (0.05 s) while the booking goes on until ``release``."""
    with pytest.raises(TimeoutError):
        s.execute(tool="book", semantics="COMPENSABLE", forward=_slow_booking(world, release, "b1"),
                  compensate=_undo, timeout=0.05)


def test_a_call_that_times_out_and_then_returns_is_undone_by_the_later_rollback(
    log: SignalWAL, world: Bookings
) -> None:
    """It was UNKNOWN with no undo known before the call; when it returned, its undo became known."""
    release = threading.Event()
    with pytest.raises(SagaAborted) as caught, saga_scope(log) as s:
        _book_past_its_timeout(s, world, release)
        release.set()
        log.wait_for("STEP_COMMITTED", 1)  # recorded when it returned, on its own thread
        raise RuntimeError("the agent gave up")
    assert world.standing == set()
    (outcome,) = caught.value.report.steps
    assert (outcome.state, outcome.outcome) == (StepState.COMMITTED, Outcome.COMPENSATED)
    assert caught.value.report.clean
    late = next(r for r in log.records() if r["type"] == "STEP_COMMITTED")
    assert late["body"]["late"] is True and late["body"]["result"] == {"ref": "b1"}
    _nothing_for_recovery(log)


def test_a_call_that_returns_after_its_rollback_is_escalated_with_its_result_and_undone_by_recovery(
    log: SignalWAL, world: Bookings
) -> None:
    release = threading.Event()
    with pytest.raises(SagaAborted) as caught, saga_scope(log) as s:
        _book_past_its_timeout(s, world, release)
        raise RuntimeError("the agent gave up")
    assert not caught.value.report.clean  # UNKNOWN, no undo known before the call: unresolved
    release.set()
    log.wait_for("ESCALATED", 1)
    wait_until(lambda: "late-commit" in {e.kind for e in queue_of(log.path).all()}, "the late-commit escalation")
    (late,) = [e for e in queue_of(log.path).all() if e.kind == "late-commit"]
    assert "'book' returned after its step was settled as UNKNOWN" in late.detail and "'b1'" in late.detail
    assert world.standing == {"b1"}

    log.barrier()
    later = time.time() + 3600  # the owner's lease, released at the saga's end, long past
    with RecoveryDaemon(log.path, clock=lambda: later) as daemon:
        swept = daemon.sweep()
    assert swept.compensated == 1, swept.summary()
    assert world.standing == set()
    resolved = {e.kind: e.resolved for e in queue_of(log.path).all()}
    assert resolved == {"unknown-outcome": True, "late-commit": True}
    _nothing_for_recovery(log)


def test_siblings_a_task_group_cancels_are_waited_for_and_undone_when_their_threads_return(
    log: SignalWAL, world: Bookings
) -> None:
    """asyncio.TaskGroup cancels the other calls when one fails: their sync tools run on, on threads."""

    async def main() -> None:
        async with saga_scope(log) as s:
            async with asyncio.TaskGroup() as group:
                for ref in SIBLINGS:
                    group.create_task(s.execute(tool="book", semantics="COMPENSABLE",
                                                forward=_after_rollback_started(log, world, ref), compensate=_undo))

                async def fail() -> None:
                    await asyncio.to_thread(world.started, len(SIBLINGS))
                    raise NotApplied("the payment service refused the card")

                group.create_task(s.execute(tool="pay", semantics="COMPENSABLE", forward=fail, compensate=_undo))

    with pytest.raises(SagaAborted) as caught:
        asyncio.run(main())
    assert world.standing == set()
    report = caught.value.report
    assert report.clean, report.format_text()
    assert sorted(o.tool for o in report.compensated) == ["book"] * 3
    assert all(o.state is StepState.COMMITTED for o in report.compensated)  # known, once their threads returned
    _nothing_for_recovery(log)


def _after_rollback_started(log: SignalWAL, world: Bookings, ref: str) -> Callable[[], dict[str, str]]:
    def book() -> dict[str, str]:
        world.begin()
        log.wait_for("ROLLBACK_STARTED")
        return world.book(ref)

    return book


def test_a_cancelled_run_waits_for_no_sibling_and_settles_them_as_they_land(log: SignalWAL, world: Bookings) -> None:
    """Ctrl-C (a cancellation of the whole run): the rollback ends at once; what lands later is undone."""
    release = threading.Event()

    async def main() -> None:
        async with saga_scope(log) as s:  # the default grace: not used for a cancellation
            await s.execute(tool="book", semantics="COMPENSABLE", forward=_slow_booking(world, release, "b1"),
                            compensate=_undo)

    async def run() -> None:
        task = asyncio.ensure_future(main())
        await asyncio.to_thread(world.started, 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    log.barrier()
    left = next(r for r in log.records() if r["type"] == "STEP_UNRESOLVED")
    end = next(r for r in log.records() if r["type"] == "SAGA_ROLLED_BACK")
    assert left["step"] == 1 and left["body"]["in_flight"] is True and end["body"]["clean"] is False
    assert world.standing == set()  # nothing landed yet
    release.set()
    log.wait_for("STEP_COMPENSATED", 1)  # it landed, and was undone on its own thread
    assert world.made == {"b1": 1} and world.standing == set()
