"""prove_rollback: fail a scenario at every step, and check the world, not the report.

A compensation that runs, returns and undoes nothing makes the engine's report
say clean while the world is wrong. Only comparing the world after the rollback
with the world before the run catches it, so that is what each probe does:

1. a discovery run, with nothing injected, counts the steps (the tools called
   through ``saga.execute``) and checks that the scenario succeeds and that
   ``snapshot()`` can see what it does;
2. one run per step and per failure mode (the step never ran; the step's call
   landed and then failed, so its outcome is UNKNOWN), plus one that fails after
   the last step, each starting from ``reset()`` and judged by ``snapshot()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import inspect
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agent_saga.context import saga_scope, use_saga
from agent_saga.engine.report import RollbackReport, SagaAborted, StepOutcome
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL, MemoryWAL
from agent_saga.proving._injection import (
    FailureMode,
    InjectedFailure,
    Injection,
    ProbedSaga,
    ProbedSyncSaga,
)
from agent_saga.semantics import Outcome

__all__ = ["Probe", "RollbackProof", "Verdict", "prove_rollback"]


class Verdict(enum.StrEnum):
    """What one probe found, comparing the engine's report with the world."""

    #: The world came back and the engine said clean.
    OK = "ok"
    #: The engine said clean and the world did not come back: an undo that lies.
    ENGINE_DISAGREES = "engine_disagrees"
    #: The world did not come back, and the engine said so (failed, orphaned, unresolved).
    NOT_UNDONE = "not_undone"
    #: The engine reports something left standing that ``snapshot()`` does not show.
    UNSEEN = "unseen"
    #: The run called other tools than the discovery run: the probe proves nothing.
    DIVERGED = "diverged"


_MARKS = {
    Verdict.OK: "ok  ",
    Verdict.ENGINE_DISAGREES: "LIES",
    Verdict.NOT_UNDONE: "LEFT",
    Verdict.UNSEEN: "??  ",
    Verdict.DIVERGED: "DIFF",
}
_INDENT = " " * 9

StepId = tuple[int, str]  # (the engine's step number, tool)


@dataclass(frozen=True, slots=True)
class Probe:
    """One failure injected into one run, and what it left behind.

    ``step`` counts ``execute`` calls from 1; the probe that fails after the last
    step has ``step`` = number of steps + 1 and ``tool`` None.
    """

    step: int
    tool: str | None
    mode: FailureMode
    verdict: Verdict
    report: RollbackReport | None
    left_behind: tuple[str, ...] = ()
    detail: str = ""

    @property
    def label(self) -> str:
        if self.tool is None:
            return "after the last step [fail at end]"
        return f"step {self.step} {self.tool} [fail {self.mode.value}]"

    @property
    def undone(self) -> tuple[StepOutcome, ...]:
        """The steps whose undo the engine ran successfully in this probe."""
        return self.report.compensated if self.report is not None else ()


@dataclass(frozen=True, slots=True)
class RollbackProof:
    """The result of :func:`prove_rollback`.

    ``proven`` is true only if the scenario succeeds on its own, ``snapshot()``
    sees its effects, and every probe found the world back where it started with
    the engine saying so. ``problem`` says why nothing was probed, if so.
    """

    steps: tuple[str, ...]
    probes: tuple[Probe, ...] = ()
    problem: str = ""
    happy_path: tuple[str, ...] = ()  # what the undisturbed run changed

    @property
    def proven(self) -> bool:
        return not self.problem and bool(self.probes) and all(p.verdict is Verdict.OK for p in self.probes)

    @property
    def failures(self) -> tuple[Probe, ...]:
        return tuple(p for p in self.probes if p.verdict is not Verdict.OK)

    @property
    def disagreements(self) -> tuple[Probe, ...]:
        """Probes where the engine's report and the world tell different stories."""
        return tuple(p for p in self.probes if p.verdict in (Verdict.ENGINE_DISAGREES, Verdict.UNSEEN))

    def suspects(self) -> tuple[StepOutcome, ...]:
        """The undos that most likely lie: run in the probes that lie, never in one that came back.

        Each lying probe implicates the undos it ran that no clean probe vouches
        for; the fewest undos that account for every lying probe are returned
        (several lying undos can hide one another, so this is a lead, not a verdict).
        """
        vouched = {_step_id(o) for p in self.probes if p.verdict is Verdict.OK for o in p.undone}
        outcomes: dict[StepId, StepOutcome] = {}
        open_sets: list[set[StepId]] = []
        for probe in self.probes:
            if probe.verdict is Verdict.ENGINE_DISAGREES:
                implicated = {_step_id(o) for o in probe.undone} - vouched
                outcomes.update({_step_id(o): o for o in probe.undone})
                if implicated:
                    open_sets.append(implicated)
        chosen: list[StepOutcome] = []
        while open_sets:  # greedy cover: the undo implicated by the most lying probes first
            counts = Counter(s for implicated in open_sets for s in implicated)
            best = max(counts, key=lambda s: (counts[s], s[0]))
            chosen.append(outcomes[best])
            open_sets = [implicated for implicated in open_sets if best not in implicated]
        return tuple(chosen)

    def format_text(self) -> str:
        """The proof as a person reads it in a CI log."""
        verdict = "proven" if self.proven else "NOT PROVEN"
        head = f"rollback proof: {verdict}, {len(self.probes)} probe(s) across {len(self.steps)} step(s)"
        if self.problem:
            return f"{head}\n  {self.problem}"
        lines = [head]
        for probe in self.probes:
            lines.append(f"  {_MARKS[probe.verdict]} {probe.label}")
            if probe.verdict is not Verdict.OK:
                lines.extend(f"{_INDENT}{text}" for text in _explain(probe))
        suspects = self.suspects()
        if suspects:
            named = ", ".join(f"step {o.step} {o.tool} ({o.compensation})" for o in suspects)
            lines.append(f"  undo(s) that report success but leave the world changed: {named}")
        return "\n".join(lines)


def _step_id(outcome: StepOutcome) -> StepId:
    return (outcome.step, outcome.tool)


def _explain(probe: Probe) -> list[str]:
    report = probe.report
    lines = [probe.detail] if probe.detail else []
    if report is not None:
        if report.clean:
            undone = ", ".join(f"step {o.step} {o.tool}" for o in report.compensated) or "nothing"
            lines.append(f"engine: clean; undone: {undone}")
        else:
            standing = [o for o in report.steps if o.outcome not in (Outcome.COMPENSATED, Outcome.KEPT)]
            lines.append("engine: NOT clean")
            lines.extend(
                f"  step {o.step} {o.tool} {o.outcome.value}" + (f": {o.detail}" if o.detail else "")
                for o in standing
            )
    lines.extend(f"left behind: {change}" for change in probe.left_behind)
    return lines


def world_changes(before: Any, after: Any) -> tuple[str, ...]:
    """What differs between two snapshots, key by key when both are mappings."""
    if before == after:
        return ()
    if not (isinstance(before, Mapping) and isinstance(after, Mapping)):
        return (f"{before!r} -> {after!r}",)
    changes = []
    for key in [*before, *(k for k in after if k not in before)]:
        if key not in after:
            changes.append(f"{key}: {before[key]!r} -> (gone)")
        elif key not in before:
            changes.append(f"{key}: (absent) -> {after[key]!r}")
        elif before[key] != after[key]:
            changes.append(f"{key}: {before[key]!r} -> {after[key]!r}")
    return tuple(changes)


@dataclass(slots=True)
class _Run:
    calls: list[str]
    report: RollbackReport | None  # None: the saga committed
    cause: BaseException | None
    called: bool = False  # the probed tool was called ("after" mode)


async def prove_rollback(
    scenario: Callable[[Any], Any],
    *,
    snapshot: Callable[[], Any],
    reset: Callable[[], Any] | None = None,
    modes: Iterable[FailureMode | str] = (FailureMode.BEFORE, FailureMode.AFTER),
    wal_factory: Callable[[], WAL] | None = None,
) -> RollbackProof:
    """Fail ``scenario`` at every step, in every mode, and check the world after each rollback.

    ``scenario(saga)`` does its work through ``saga.execute`` (``async def``
    scenarios get the awaiting face, plain functions the blocking one and run on
    a worker thread). ``snapshot()`` returns the world as a comparable value (a
    dict of lists reads best); ``reset()`` puts the world back to its start
    before every run. Either may be sync or async. ``modes`` picks the failure
    shapes (``"before"``: the step never ran, and one run fails after the last
    step; ``"after"``: the step's call landed and then failed). ``wal_factory``
    returns a fresh log for each run (default: a MemoryWAL); each is closed after
    its run.
    """
    chosen = _check_arguments(scenario, snapshot, reset, modes, wal_factory)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise ConfigurationError(
            "prove_rollback runs on asyncio (the engine's async face does); under anyio, "
            "use the asyncio backend"
        ) from None

    runner = _Runner(scenario, wal_factory)
    await _settle(reset)
    start = await _observe(snapshot)
    discovery = await runner.run(Injection())
    steps = tuple(discovery.calls)
    if discovery.report is not None:
        cause = discovery.cause
        if isinstance(cause, ConfigurationError):
            raise cause  # the scenario declares a step wrongly: bad input, not a finding
        return RollbackProof(steps, problem=(
            f"the scenario fails with nothing injected ({_name(cause)}); make it succeed first. "
            f"Its own rollback:\n{discovery.report.format_text()}"
        ))
    happy = world_changes(start, await _observe(snapshot))
    if not steps:
        return RollbackProof(steps, problem="the scenario ran no step through saga.execute: nothing to prove")
    if not happy:
        return RollbackProof(steps, problem=(
            "snapshot() returned the same world before and after the scenario ran, so it cannot "
            "see what the scenario does and no probe could fail; return the state the steps change"
        ))

    probes = []
    for at in range(1, len(steps) + 2):
        for mode in chosen:
            if at > len(steps) and mode is not FailureMode.BEFORE:
                continue  # past the last step there is no call to land
            await _settle(reset)
            baseline = await _observe(snapshot)
            run = await runner.run(Injection(at, mode))
            left = world_changes(baseline, await _observe(snapshot))
            probes.append(_judge(at, mode, steps, run, left))
    await _settle(reset)
    return RollbackProof(steps, tuple(probes), happy_path=happy)


def _judge(at: int, mode: FailureMode, steps: tuple[str, ...], run: _Run, left: tuple[str, ...]) -> Probe:
    tool = steps[at - 1] if at <= len(steps) else None
    expected = list(steps[:at]) if tool is not None else list(steps)
    seen = run.calls[: len(expected)] if tool is not None else run.calls
    report = run.report
    if seen != expected:
        detail = (f"this run called {seen} where the discovery run called {expected}: a scenario that "
                  "does not repeat itself cannot be probed step by step")
        return Probe(at, tool, mode, Verdict.DIVERGED, report, left, detail)
    assert report is not None, "a probed run always ends in an injected failure, so it always aborts"
    if mode is FailureMode.AFTER and tool is not None and not run.called:
        detail = f"the probed call never ran: the step failed first with {_name(run.cause)}"
        return Probe(at, tool, mode, Verdict.DIVERGED, report, left, detail)
    if report.clean:
        verdict = Verdict.ENGINE_DISAGREES if left else Verdict.OK
    else:
        verdict = Verdict.NOT_UNDONE if left else Verdict.UNSEEN
    detail = ""
    if verdict is Verdict.UNSEEN:
        detail = ("snapshot() shows the world back where it started, but the engine reports steps "
                  "left standing: make snapshot() cover what they change")
    elif not isinstance(run.cause, InjectedFailure):
        detail = f"the scenario failed with {_name(run.cause)} once the failure was injected"
    return Probe(at, tool, mode, verdict, report, left, detail)


class _Runner:
    """Runs the scenario once inside a fresh saga, with one injection."""

    def __init__(self, scenario: Callable[[Any], Any], wal_factory: Callable[[], WAL] | None) -> None:
        self.scenario = scenario
        self.wal_factory = wal_factory
        self.is_async = _is_async(scenario)

    def _wal(self) -> WAL:
        if self.wal_factory is None:
            return MemoryWAL("prove_rollback")
        wal = self.wal_factory()
        if not isinstance(wal, WAL):
            raise ConfigurationError(
                f"wal_factory must return a WAL (a MemoryWAL or FileWAL, say), got {type(wal).__name__}"
            )
        return wal

    async def run(self, injection: Injection) -> _Run:
        wal = self._wal()
        try:
            if self.is_async:
                await self._run_async(wal, injection)
            else:
                await asyncio.to_thread(self._run_sync, wal, injection)
        except SagaAborted as aborted:
            return _Run(injection.calls, aborted.report, aborted.cause, injection.called)
        finally:
            wal.close()
        return _Run(injection.calls, None, None, injection.called)

    async def _run_async(self, wal: WAL, injection: Injection) -> None:
        async with saga_scope(wal, name="prove_rollback") as saga:
            with _current(ProbedSaga(saga, injection)):
                await self.scenario(ProbedSaga(saga, injection))
            injection.finish()

    def _run_sync(self, wal: WAL, injection: Injection) -> None:
        with saga_scope(wal, name="prove_rollback") as saga, _current(ProbedSaga(saga.saga, injection)):
            result = self.scenario(ProbedSyncSaga(saga, injection))
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise ConfigurationError(
                    "the scenario returned an awaitable but is not an `async def`; declare it "
                    "`async def scenario(saga)` so that prove_rollback awaits it"
                )
            injection.finish()


@contextlib.contextmanager
def _current(probed: ProbedSaga) -> Iterator[None]:
    """Make the probed saga the current one, so that tools that find their saga themselves
    (``@tool``, ``AgentKit.safe_tool``, an adapter's wrapped tool, ``@saga`` joining it) go
    through the injection too, not only ``saga.execute`` calls on the saga handed over."""
    token = use_saga(probed)  # type: ignore[arg-type]  # it is a Saga for every caller
    try:
        yield
    finally:
        token.var.reset(token)


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


def _check_arguments(
    scenario: Any, snapshot: Any, reset: Any, modes: Iterable[FailureMode | str], wal_factory: Any
) -> tuple[FailureMode, ...]:
    for name, value in (("scenario", scenario), ("snapshot", snapshot)):
        if not callable(value):
            raise ConfigurationError(f"prove_rollback: {name}= must be callable, got {value!r}")
    for name, value in (("reset", reset), ("wal_factory", wal_factory)):
        if value is not None and not callable(value):
            raise ConfigurationError(f"prove_rollback: {name}= must be callable or None, got {value!r}")
    if isinstance(modes, str):
        modes = (modes,)
    chosen = tuple(dict.fromkeys(FailureMode.parse(m) for m in modes))
    if not chosen:
        raise ConfigurationError("prove_rollback: modes= is empty; pass 'before', 'after' or both")
    return chosen


async def _settle(fn: Callable[[], Any] | None) -> Any:
    if fn is None:
        return None
    value = fn()
    return (await value) if inspect.isawaitable(value) else value


async def _observe(snapshot: Callable[[], Any]) -> Any:
    # A copy: a snapshot that returns the live state would otherwise change along
    # with the world, and every probe would compare the world with itself.
    value = await _settle(snapshot)
    try:
        return copy.deepcopy(value)
    except Exception as err:
        raise ConfigurationError(
            f"snapshot() returned a {type(value).__name__} that cannot be copied ({err}); return "
            "plain data (dicts, lists, strings, numbers)"
        ) from err


def _name(err: BaseException | None) -> str:
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
