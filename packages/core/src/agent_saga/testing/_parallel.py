"""The parallel case: ONE model response with several tool calls, the last one failing.

Most frameworks run the calls of one response at the same time (threads or tasks), so the
failure can start the rollback while its siblings still run. The promises (issue 39): no step
begins once the rollback started; a sibling that commits within the saga's ``rollback_grace``
is undone by the rollback, newest step first, and the report can be clean; one that commits
after the rollback ended is undone at once, in its own thread, and the report (not clean)
lists it as in flight. Nothing is ever left standing.

The orderings are forced, never sampled: each sibling tool waits for a record of the log
(ROLLBACK_STARTED, SAGA_ROLLED_BACK, or the failing call's STEP_NOT_APPLIED) before its effect,
and the failing tool waits until every sibling is inside its body. Every wait is bounded by
:data:`BOUND`, so a framework that runs the calls one after another fails loudly (a stall is
reported) instead of hanging. Each run then checks the world (every ``do`` has its ``undo``),
the report (``clean`` only when nothing stands), the log (every commit followed by its
compensation) and that a recovery sweep has nothing left to do.

One more case cancels the run itself (a timeout around it, Ctrl-C under ``asyncio.run``) while
the sibling calls run on the framework's threads, where a framework runs sync tools so. A
cancelled run waits for no sibling: its rollback leaves them in flight (the report not clean),
and a thread cannot be cancelled, so each must still be followed until its function returns and
what it booked undone as it lands.

``AGENT_SAGA_PARALLEL_RUNS=N`` turns on the stress lane: every case of the adapter N times,
counting the runs that left an effect standing and those that claimed a false "clean".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from agent_saga.engine.report import RollbackReport, SagaAborted
from agent_saga.errors import NotApplied
from agent_saga.log.file import FileWAL
from agent_saga.log.records import RecordType as R
from agent_saga.plugins.patching import clear_unclassified_calls, patch_all
from agent_saga.recovery.daemon import RecoveryDaemon
from agent_saga.semantics import Outcome, StepState
from agent_saga.testing._shared import (
    UNDO_HANDLER,
    Call,
    clear_ledger,
    note,
    root_cause,
    undo_of,
    wait_balanced,
)

__all__ = [
    "AWAITED", "BOUND", "CANCELLED", "RUNS_VARIABLE", "RUN_ON", "ParallelCases", "SignallingWAL", "Verdict",
    "log_problems", "position", "settled_as_they_landed", "stress",
]

#: The longest any forced ordering may take (seconds). Reached only when something is wrong:
#: a framework that does not run the calls together, or an effect that is never undone.
BOUND = 30.0
#: The stress lane's switch: how many times to run each parallel case.
RUNS_VARIABLE = "AGENT_SAGA_PARALLEL_RUNS"
#: The stress lane stops a case after this many failing runs (each may wait BOUND seconds).
_STRESS_GIVE_UP = 3


class SignallingWAL(FileWAL):
    """A FileWAL a test can wait on: every append is counted by type and wakes the waiters."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._counts: Counter[str] = Counter()
        self._appended = threading.Condition()
        super().__init__(path)

    def append(self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None) -> int:
        ticket = super().append(type, saga, body, step)
        with self._appended:
            self._counts[type] += 1
            self._appended.notify_all()
        return ticket

    def wait_for(self, rtype: str, count: int = 1, timeout: float = BOUND) -> bool:
        """Wait until ``count`` records of type ``rtype`` were appended; False if ``timeout`` passed first."""
        with self._appended:
            return self._appended.wait_for(lambda: self._counts[rtype] >= count, timeout)

    def count(self, rtype: str) -> int:
        with self._appended:
            return self._counts[rtype]


class _Scene:
    """What the parallel tools of the current run wait on, and what they saw."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self.wal: SignallingWAL | None = None
        self.release: str | None = None
        self.siblings = 0
        self.entered = 0
        self.left = 0
        self.stalls: list[str] = []

    def reset(self, wal: SignallingWAL, release: str | None, siblings: int) -> None:
        with self._changed:
            self.wal, self.release, self.siblings = wal, release, siblings
            self.entered = self.left = 0
            self.stalls = []

    def hold(self, name: str) -> None:
        """A sibling, inside its body: wait for the release record before the effect."""
        with self._changed:
            self.entered += 1
            self._changed.notify_all()
            wal, release = self.wal, self.release
        try:
            if wal is not None and release is not None and not wal.wait_for(release, timeout=BOUND):
                self._stall(f"{name} waited {BOUND:.0f}s for {release} and went on")
        finally:
            with self._changed:
                self.left += 1
                self._changed.notify_all()

    def wait_entered(self, name: str) -> None:
        """Wait until every sibling is inside its body (a stall is noted if they do not all get there)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self.entered >= self.siblings, BOUND):
                self.stalls.append(
                    f"{name} waited {BOUND:.0f}s for its {self.siblings} sibling calls to start; "
                    f"{self.entered} did: the framework did not run the calls of one response together"
                )

    def after_siblings(self, name: str) -> None:
        """The failing call: wait until every sibling is inside its body (so they are in flight)."""
        self.wait_entered(name)

    def _stall(self, what: str) -> None:
        with self._changed:
            self.stalls.append(what)

    def wait_left(self) -> bool:
        """Wait until every sibling that entered its body has left it (its effect done or abandoned)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.left >= self.entered, BOUND)


_scene = _Scene()


# -- the tools of one response: two bookings, then a confirmation that fails -----------------


def book(seat: str) -> dict[str, Any]:
    """Book a seat."""
    _scene.hold(f"book({seat})")
    note(f"do:book:{seat}")
    return {"ref": f"book:{seat}"}


async def _waited(wait: Callable[[str], None], name: str) -> None:
    """``wait(name)`` on a thread of its own, awaited without blocking the loop.

    Not ``asyncio.to_thread``: a loop that closes (a framework's run ending) joins its default
    executor, and would so wait for a wait that only its own end can release.
    """
    loop = asyncio.get_running_loop()
    waited: asyncio.Future[None] = loop.create_future()

    def done() -> None:
        if not waited.done():  # a cancelled call's future is done already
            waited.set_result(None)

    def run() -> None:
        wait(name)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody awaits
            loop.call_soon_threadsafe(done)

    threading.Thread(target=run, name=f"parallel-{name}", daemon=True).start()
    await waited


async def abook(seat: str) -> dict[str, Any]:
    """Book a seat (async)."""
    await _waited(_scene.hold, f"abook({seat})")
    note(f"do:book:{seat}")
    return {"ref": f"book:{seat}"}


def confirm(channel: str) -> dict[str, Any]:
    """Send the booking confirmation (its service is down)."""
    _scene.after_siblings("confirm")
    raise NotApplied("confirmation service unreachable")


async def aconfirm(channel: str) -> dict[str, Any]:
    """Send the booking confirmation (async; its service is down)."""
    await _waited(_scene.after_siblings, "aconfirm")
    raise NotApplied("confirmation service unreachable")


async def _cancel_when_in_flight(run: Coroutine[Any, Any, Any]) -> str | None:
    """Run ``run`` as a task, cancel it once every sibling is inside its body; how it ended if not cancelled."""
    task = asyncio.ensure_future(run)
    await _waited(_scene.wait_entered, "the canceller")
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return None
    except Exception as err:  # noqa: BLE001 - a broken promise is a finding, not a crash
        return f"raised {type(err).__name__}: {err}"
    return "returned"


SEATS = ("a", "b")
_BOOKED = {"semantics": "COMPENSABLE", "compensate": {"handler": UNDO_HANDLER, "args": {"ref": "$.ref"}}}
_POLICY = {"mode": "observe", "tools": {
    "book": _BOOKED, "abook": _BOOKED, "confirm": {"semantics": "IRREVERSIBLE"}, "aconfirm": {"semantics": "IRREVERSIBLE"},
}}


@dataclass(frozen=True)
class Scenario:
    """When the siblings commit, and what the rollback must then have done."""

    name: str
    release: str | None  # the record the siblings wait for (None: they do not wait)
    saga: Mapping[str, Any] = field(default_factory=dict)  # saga options for the run helper


#: The siblings commit once the rollback started: inside the default grace, so it waits for them.
INSIDE_GRACE = Scenario("inside-grace", R.ROLLBACK_STARTED)
#: The siblings commit once the rollback ended (no grace): each is undone as it arrives.
AFTER_ROLLBACK = Scenario("after-rollback", R.SAGA_ROLLED_BACK, {"rollback_grace": 0})
#: The framework waits for every call of the response before the failure is seen (errors as
#: results, or a pool it joins): the siblings commit after the failure, before the rollback.
AFTER_FAILURE = Scenario("after-failure", R.STEP_NOT_APPLIED)
#: The framework cancels the siblings' tasks as the failure ends the run: their effect never
#: happens, and their steps stay UNKNOWN (the report cannot be clean, nothing stands).
CANCELLED_BY_FRAMEWORK = Scenario("cancelled", R.ROLLBACK_STARTED)
#: A framework that runs one response's calls one after another.
IN_ORDER = Scenario("in-order", None)
#: The run is cancelled while the siblings (sync tools on the framework's threads) are inside
#: their bodies; its rollback waits for none of them, and they commit once it has ended.
RUN_CANCELLED = Scenario("run-cancelled", R.SAGA_ROLLED_BACK)

# What a framework does with the other calls of a response when one of them fails.
RUN_ON, CANCELLED, AWAITED = "run on", "cancelled", "awaited"
_SCENARIOS = {
    RUN_ON: (INSIDE_GRACE, AFTER_ROLLBACK), CANCELLED: (CANCELLED_BY_FRAMEWORK,), AWAITED: (AFTER_FAILURE,),
}


@dataclass
class Verdict:
    """What one parallel run left behind."""

    problems: list[str] = field(default_factory=list)
    standing: list[str] = field(default_factory=list)
    claimed_clean: bool = False

    @property
    def false_clean(self) -> bool:
        return self.claimed_clean and bool(self.standing)


def stress(
    label: str, cases: list[tuple[str, Callable[[int], Verdict]]], record_property: Callable[[str, Any], None],
) -> None:
    """The stress lane: each case's ``run(n)`` ``$AGENT_SAGA_PARALLEL_RUNS`` times, then one verdict over all.

    Skipped when the variable is not set. A case stops after a few failing runs (each may wait
    :data:`BOUND`). The summary (runs, runs that left an effect standing, false "clean") is
    printed and recorded as the test's ``parallel_stress`` property (the junit report keeps it).
    """
    runs = int(os.environ.get(RUNS_VARIABLE, "0") or 0)
    if runs <= 0:
        pytest.skip(f"the stress lane: set {RUNS_VARIABLE}=N (tox.ini sets it in each framework env, mcp1 and mcp2)")
    total = standing = false_clean = 0
    problems: Counter[str] = Counter()
    for name, run in cases:
        failing = 0
        for n in range(runs):
            verdict = run(n)
            total += 1
            standing += bool(verdict.standing)
            false_clean += verdict.false_clean
            problems.update(f"{name}: {p.splitlines()[0]}" for p in verdict.problems)
            failing += bool(verdict.problems)
            if failing == _STRESS_GIVE_UP:  # a broken promise costs BOUND a run: enough evidence
                problems[f"{name}: stopped after {n + 1} of {runs} runs"] += 1
                break
    summary = (f"parallel stress, {label}: {total} runs, {standing} left an effect standing, "
               f"{false_clean} claimed a false clean, {sum(problems.values())} problems")
    print(summary)
    record_property("parallel_stress", summary)
    assert not problems, summary + "\n" + "\n".join(f"{n} x {p}" for p, n in problems.most_common())


def _records(wal: FileWAL) -> list[dict[str, Any]]:
    wal.barrier()  # records() reads what is on disk: the queued ones too
    return list(wal.records())


def _steps_of(records: list[dict[str, Any]], tools: tuple[str, ...]) -> list[int]:
    return sorted(r["step"] for r in records if r["type"] == R.STEP_INTENT and r["body"]["tool"] in tools)


def position(records: list[dict[str, Any]], rtype: str, step: int | None = None) -> int:
    """Where the first record of ``rtype`` (of ``step``, if given) is in the log; -1 if nowhere."""
    for i, r in enumerate(records):
        if r["type"] == rtype and (step is None or r.get("step") == step):
            return i
    return -1


def settled_as_they_landed(records: list[dict[str, Any]], steps: list[int]) -> list[str]:
    """What is wrong with ``steps`` if each was left in flight by the rollback and undone once it landed.

    Left: a ``STEP_UNRESOLVED`` marked ``in_flight`` before ``SAGA_ROLLED_BACK``; after it, its
    commit, then its undo (escalations about it may come in between).
    """
    problems = []
    ended = position(records, R.SAGA_ROLLED_BACK)
    for step in steps:
        left = position(records, R.STEP_UNRESOLVED, step)
        if not (0 <= left < ended and records[left]["body"].get("in_flight")):
            problems.append(f"step {step} was not left in flight by the rollback")
        undo = (R.STEP_COMMITTED, R.COMPENSATION_STARTED, R.STEP_COMPENSATED)
        late = [r["type"] for r in records[ended + 1:] if r.get("step") == step and r["type"] in undo]
        if late != list(undo):
            problems.append(f"step {step} after SAGA_ROLLED_BACK: {late}, expected its commit then its undo")
    return problems


def log_problems(wal: FileWAL, records: list[dict[str, Any]]) -> list[str]:
    """A commit never compensated, and anything a recovery sweep (an hour later) would still do."""
    problems = [
        f"step {r['step']} committed and was never compensated" for i, r in enumerate(records)
        if r["type"] == R.STEP_COMMITTED and position(records[i:], R.STEP_COMPENSATED, r["step"]) < 0
    ]
    wal.barrier()
    swept = RecoveryDaemon(wal, clock=lambda: time.time() + 3600).sweep()
    if swept.open_sagas or swept.compensated or swept.actions:
        problems.append(f"the recovery daemon still had work: {swept.summary()}")
    return problems


def _settled(wal: SignallingWAL, verdict: Verdict) -> list[dict[str, Any]]:
    """Once the siblings are out of their tools and every effect undone (bounded): the log's records."""
    if not _scene.wait_left():
        verdict.problems.append(f"a sibling call was still inside its tool {BOUND:.0f}s after the run")
    verdict.problems += _scene.stalls
    # Every effect must be undone, the late ones as they arrive: wait for that, bounded.
    verdict.standing = wait_balanced(BOUND)
    if verdict.standing:
        verdict.problems.append(f"left standing: {verdict.standing}")
    else:
        wal.wait_for(R.STEP_COMPENSATED, wal.count(R.STEP_COMMITTED))  # the undo's record follows the undo
    return _records(wal)


def _in_flight(report: RollbackReport) -> list[int] | str:
    listed = getattr(report, "in_flight", None)
    if listed is None:
        return "the report has no in_flight"
    return sorted(s if isinstance(s, int) else s.step for s in listed)


class ParallelCases:
    """The parallel cases, mixed into :class:`~agent_saga.testing.AdapterConformance`."""

    #: How the framework runs the tool calls of ONE model response (docs/ADAPTERS.md says it per
    #: framework and release): None = one after another; "threads" = sync tools at once, each on
    #: a thread; "tasks" = async tools as concurrent tasks (sync ones inline, one at a time).
    parallel: ClassVar[str | None] = None
    #: What becomes of the other calls of the response when a failing call ends the run
    #: (``errors_as_results=False``): RUN_ON (the rollback starts while they still run),
    #: CANCELLED (the framework cancels their tasks as it ends the run) or AWAITED (it waits for
    #: every call before the failure is seen). Where errors become results, always AWAITED.
    parallel_siblings: ClassVar[str] = AWAITED

    if TYPE_CHECKING:
        framework: ClassVar[str]
        error_modes: ClassVar[tuple[bool, ...]]

        def make_tool(self, fn: Callable[..., Any]) -> Any: ...

        def wrap(self, tool: Any, *, semantics: str, compensate: Any = None) -> Any: ...

    def run_parallel(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, errors_as_results: bool | None = None,
        **saga: Any,
    ) -> Any:
        """As ``run``, but the scripted model makes every one of ``calls`` in ONE response, then says "done"."""
        raise NotImplementedError

    def run_parallel_async(
        self, tools: list[Any], calls: list[Call], *, wal: FileWAL, **saga: Any,
    ) -> Coroutine[Any, Any, Any]:
        """``run_parallel``'s run through the adapter's async run helper, not started: the coroutine.

        The cancelled-run case cancels it. Left unimplemented where the framework has no async
        run (or this class drives its sync face): the case is then skipped.
        """
        raise NotImplementedError

    # -- one run ------------------------------------------------------------------------

    def _parallel_cases(self, *scenarios: Scenario) -> list[tuple[Scenario, bool]]:
        """The (scenario, error mode) pairs of this framework among ``scenarios``."""
        if self.parallel is None:
            return [(IN_ORDER, mode) for mode in self.error_modes if IN_ORDER in scenarios]
        return [
            (scenario, mode) for mode in self.error_modes
            for scenario in _SCENARIOS[AWAITED if mode else self.parallel_siblings] if scenario in scenarios
        ]

    def _parallel_tools(self, via: str) -> list[Any]:
        sibling, failing = (abook, aconfirm) if self.parallel == "tasks" else (book, confirm)
        if via == "patch_all":
            patch_all(_POLICY)
            return [self.make_tool(sibling), self.make_tool(failing)]
        return [
            self.wrap(self.make_tool(sibling), semantics="COMPENSABLE", compensate=undo_of),
            self.wrap(self.make_tool(failing), semantics="IRREVERSIBLE"),
        ]

    def parallel_run(self, path: Path, scenario: Scenario, mode: bool, via: str) -> Verdict:
        """One run of ``scenario``: the verdict on what it left (never raises on a broken promise)."""
        clear_ledger()
        clear_unclassified_calls()
        tools = self._parallel_tools(via)
        sibling, failing = ("abook", "aconfirm") if self.parallel == "tasks" else ("book", "confirm")
        calls = [Call(sibling, {"seat": seat}) for seat in SEATS] + [Call(failing, {"channel": "ops"})]
        wal = SignallingWAL(path)
        _scene.reset(wal, scenario.release, len(SEATS))
        verdict = Verdict()
        try:
            self._parallel_check(wal, tools, calls, scenario, mode, verdict)
        finally:
            _scene.reset(wal, None, 0)
            wal.close()
        return verdict

    def _parallel_check(
        self, wal: SignallingWAL, tools: list[Any], calls: list[Call], scenario: Scenario, mode: bool,
        verdict: Verdict,
    ) -> None:
        problems = verdict.problems
        report: RollbackReport | None = None
        try:
            self.run_parallel(tools, calls, wal=wal, errors_as_results=mode, **scenario.saga)
            problems.append("the run ended without SagaAborted although a call failed")
        except SagaAborted as aborted:
            report = aborted.report
            if not isinstance(root_cause(aborted), NotApplied):
                problems.append(f"the saga was aborted by {root_cause(aborted)!r}, not by the failing call")
        except Exception as err:  # noqa: BLE001 - a broken promise is a finding, not a crash
            problems.append(f"the run raised {type(err).__name__}: {err}")
        records = _settled(wal, verdict)
        siblings = _steps_of(records, ("book", "abook"))
        failing = _steps_of(records, ("confirm", "aconfirm"))
        if len(siblings) != len(SEATS) or len(failing) != 1:
            problems.append(f"expected {len(SEATS)} booking steps and 1 confirmation, got {siblings} and {failing}")
        elif report is not None:
            verdict.claimed_clean = report.clean
            self._parallel_report(report, records, siblings, failing[0], scenario, verdict)
        problems += log_problems(wal, records)

    def _parallel_report(
        self, report: RollbackReport, records: list[dict[str, Any]], siblings: list[int], failing: int,
        scenario: Scenario, verdict: Verdict,
    ) -> None:
        """What the report and the log's order must say in ``scenario``."""
        problems = verdict.problems
        if position(records, R.STEP_NOT_APPLIED, failing) < 0:
            problems.append(f"the failing call (step {failing}) has no STEP_NOT_APPLIED")
        compensated = [r["step"] for r in records if r["type"] == R.STEP_COMPENSATED]
        ended = position(records, R.SAGA_ROLLED_BACK)
        if scenario is AFTER_ROLLBACK:
            if report.clean:
                problems.append("the report says clean although siblings were still running when it was made")
            if _in_flight(report) != siblings:
                problems.append(f"the report's in_flight is {_in_flight(report)}, expected {siblings}")
            for step in siblings:
                outcome = next((s for s in report.steps if s.step == step), None)
                if outcome is None or (outcome.outcome, outcome.state) != (Outcome.UNRESOLVED, StepState.PENDING):
                    problems.append(f"step {step} in the report: {outcome}, expected UNRESOLVED and PENDING")
            problems += settled_as_they_landed(records, siblings)
            return
        if scenario is CANCELLED_BY_FRAMEWORK:
            if report.clean:
                problems.append("the report says clean over steps whose calls were cancelled mid-flight")
            for step in siblings:
                if position(records, R.STEP_COMMITTED, step) >= 0:
                    problems.append(f"step {step} committed, though the framework cancelled its call")
                if not 0 <= position(records, R.STEP_UNKNOWN, step) < position(records, R.ROLLBACK_STARTED):
                    problems.append(f"step {step} was not recorded UNKNOWN (cancelled) before the rollback")
            return
        if not report.clean:
            problems.append(f"the report is not clean:\n{report.format_text()}")
        if sorted(s.step for s in report.compensated) != siblings:
            problems.append(f"compensated {[s.step for s in report.compensated]}, expected the siblings {siblings}")
        if compensated != sorted(siblings, reverse=True):
            problems.append(f"undone in the order {compensated}, expected newest first {sorted(siblings, reverse=True)}")
        rollback = position(records, R.ROLLBACK_STARTED)
        commits = [position(records, R.STEP_COMMITTED, step) for step in siblings]
        if scenario is INSIDE_GRACE and not (rollback < min(commits) and max(commits) < ended):
            problems.append("the siblings did not commit between ROLLBACK_STARTED and SAGA_ROLLED_BACK")
        if scenario is AFTER_FAILURE and not (position(records, R.STEP_NOT_APPLIED) < min(commits) < rollback):
            problems.append("the siblings did not commit after the failure and before the rollback")
        if scenario is IN_ORDER and [*siblings, failing] != [1, 2, 3]:
            problems.append(f"steps numbered {[*siblings, failing]}, expected the calls' order")

    def _cancellable(self) -> bool:
        """Whether the cancelled-run case applies: sync tools on threads, and an async run to cancel."""
        return self.parallel == "threads" and type(self).run_parallel_async is not ParallelCases.run_parallel_async

    def cancelled_run(self, path: Path, via: str) -> Verdict:
        """One run of the sibling calls alone, cancelled once both are inside their bodies."""
        clear_ledger()
        clear_unclassified_calls()
        sibling = self._parallel_tools(via)[0]
        wal = SignallingWAL(path)
        _scene.reset(wal, RUN_CANCELLED.release, len(SEATS))
        verdict = Verdict()
        try:
            run = self.run_parallel_async([sibling], [Call("book", {"seat": seat}) for seat in SEATS], wal=wal)
            ended = asyncio.run(_cancel_when_in_flight(run))
            if ended is not None:
                verdict.problems.append(f"the cancelled run {ended}, expected the cancellation itself")
            self._cancelled_check(wal, verdict)
        finally:
            _scene.reset(wal, None, 0)
            wal.close()
        return verdict

    def _cancelled_check(self, wal: SignallingWAL, verdict: Verdict) -> None:
        problems = verdict.problems
        records = _settled(wal, verdict)
        siblings = _steps_of(records, ("book",))
        if len(siblings) != len(SEATS):
            problems.append(f"expected {len(SEATS)} booking steps, got {siblings}")
        ended = position(records, R.SAGA_ROLLED_BACK)
        if ended < 0:
            problems.append("the cancelled run's saga was not rolled back")
        else:
            verdict.claimed_clean = bool(records[ended]["body"].get("clean"))
            if verdict.claimed_clean:
                problems.append("the rollback says clean although the siblings were still running when it ended")
            problems += settled_as_they_landed(records, siblings)
        problems += log_problems(wal, records)

    def _assert_parallel(self, tmp_path: Path, via: str, *scenarios: Scenario) -> None:
        cases = self._parallel_cases(*scenarios)
        if not cases:
            pytest.skip(f"{self.framework}: no error mode of this kind (parallel={self.parallel!r}, "
                        f"siblings {self.parallel_siblings!r}, error modes {self.error_modes})")
        for n, (scenario, mode) in enumerate(cases):
            verdict = self.parallel_run(tmp_path / f"parallel-{n}.wal", scenario, mode, via)
            assert not verdict.problems, f"{scenario.name}, errors_as_results={mode}, {via}:\n" + "\n".join(
                verdict.problems)

    # -- the cases ------------------------------------------------------------------------

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_siblings_committing_inside_the_grace_are_undone_and_the_report_is_clean(
        self, tmp_path: Path, via: str
    ) -> None:
        self._assert_parallel(tmp_path, via, INSIDE_GRACE)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_siblings_committing_after_the_rollback_are_undone_as_they_arrive(
        self, tmp_path: Path, via: str
    ) -> None:
        self._assert_parallel(tmp_path, via, AFTER_ROLLBACK)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_siblings_the_framework_waits_for_are_undone_after_the_failure(
        self, tmp_path: Path, via: str
    ) -> None:
        self._assert_parallel(tmp_path, via, AFTER_FAILURE)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_siblings_the_framework_cancels_leave_nothing_and_no_clean_claim(
        self, tmp_path: Path, via: str
    ) -> None:
        self._assert_parallel(tmp_path, via, CANCELLED_BY_FRAMEWORK)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_calls_a_framework_runs_in_order_are_undone_newest_first(self, tmp_path: Path, via: str) -> None:
        self._assert_parallel(tmp_path, via, IN_ORDER)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_a_run_cancelled_while_sync_calls_run_on_threads_leaves_nothing_standing(
        self, tmp_path: Path, via: str
    ) -> None:
        if not self._cancellable():
            pytest.skip(f"{self.framework}: sync tools do not run on threads here (parallel={self.parallel!r}), "
                        "or this class has no async run to cancel (run_parallel_async)")
        verdict = self.cancelled_run(tmp_path / "cancelled.wal", via)
        assert not verdict.problems, f"{RUN_CANCELLED.name}, {via}:\n" + "\n".join(verdict.problems)

    @pytest.mark.parametrize("via", ["wrap_tool", "patch_all"])
    def test_parallel_stress(self, tmp_path: Path, via: str, record_property: Callable[[str, Any], None]) -> None:
        def case(scenario: Scenario, mode: bool) -> tuple[str, Callable[[int], Verdict]]:
            return scenario.name, lambda n: self.parallel_run(
                tmp_path / f"{scenario.name}-{mode}-{n}.wal", scenario, mode, via)

        cases = [case(scenario, mode) for scenario, mode in self._parallel_cases(
            INSIDE_GRACE, AFTER_ROLLBACK, AFTER_FAILURE, CANCELLED_BY_FRAMEWORK, IN_ORDER)]
        if self._cancellable():
            cases.append((RUN_CANCELLED.name, lambda n: self.cancelled_run(tmp_path / f"cancelled-{n}.wal", via)))
        stress(f"{self.framework} via {via}", cases, record_property)
