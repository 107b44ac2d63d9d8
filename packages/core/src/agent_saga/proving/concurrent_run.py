"""One concurrent shape, run through the real engine with its ordering forced.

The saga's own thread (or task) runs the steps before, then parks; the siblings start one by
one, each parking as its call begins (a fenced one as its intent is made durable); then the
controller lets each actor go in the order the shape names: the siblings that land before the
failure, then the failure itself (the rollback), the siblings that land while the rollback
waits, and so on (``_Controller``). The log is a real ``FileWAL`` in a fresh directory, so the
lifecycle hooks (leases, escalations) run as in production; the tools write to a world whose
effects can be compared with what the engine says.

The rollback's grace is 30 s where no sibling is to be left (every one lands inside it, so the
rollback really waits and is woken), and 0 where one is: on the threads face the rollback is
then held just after ROLLBACK_STARTED, the siblings meant to land inside the grace land, and
letting the rollback go is the moment the grace runs out.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_saga.context import saga_scope
from agent_saga.engine.report import RollbackReport, SagaAborted
from agent_saga.engine.saga import Saga
from agent_saga.errors import NotApplied
from agent_saga.log.file import FileWAL
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R
from agent_saga.proving.concurrent_shapes import ConcurrentShape, Face, Fate, Slot
from agent_saga.proving.scheduler import BOUND, Scheduler, Unforced, acting, current, park
from agent_saga.proving.shapes import RETRY, Ledger, OpenGate, SagaFails, Undo, undo_in
from agent_saga.recovery.escalations import Escalation, queue_of
from agent_saga.recovery.lease import lease_keeper
from agent_saga.registry import compensator, registered, resolve
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = ["ConcurrentRun", "LedgerWorld", "Lost", "ScheduledWAL", "World", "run_concurrent"]

MAIN = "main"
_OUTCOMES = frozenset({R.STEP_COMMITTED, R.STEP_UNKNOWN, R.STEP_NOT_APPLIED})


class World(Protocol):
    """The outside world the tools act on: what the checks compare the engine's word with."""

    def forward(self, step: int, idempotency_key: str | None = None) -> dict[str, Any]:
        """Step ``step``'s effect (inside its tool); returns what the tool returns, ``{"step": step, ...}``."""

    def undo(self, step: int, works: bool) -> Compensation:
        """Step ``step``'s undo: ``fn`` runs in this process, ``handler`` names it for a daemon."""


class LedgerWorld:
    """A world in memory (``shapes.Ledger``): what every effect and undo attempt did.

    Its undo is a handler registered by name (as a user's would be, so the engine's check that
    the function run is the one the name resolves to holds); it finds the run's world, and
    parks at ``undo``, through the run's context.
    """

    def __init__(self) -> None:
        self.ledger = Ledger()
        self.lock = threading.Lock()

    def forward(self, step: int, idempotency_key: str | None = None) -> dict[str, Any]:
        with self.lock:
            self.ledger.forwards.append((step, idempotency_key))
            self.ledger.standing.add(step)
        return {"step": step}

    def undo(self, step: int, works: bool) -> Compensation:
        fn = _ledger_undo()
        return Compensation(fn=fn, handler=_LEDGER_UNDO, kwargs={"step": step, "works": works})

    def standing(self) -> set[int]:
        with self.lock:
            return set(self.ledger.standing)


_LEDGER_UNDO = "agent_saga.proving.ledger_undo"
_world: contextvars.ContextVar[Any] = contextvars.ContextVar("agent_saga_proving_world")


def _undo_in_ledger(step: int, works: bool, idempotency_key: str | None = None) -> None:
    park("undo")
    world = _world.get()
    with world.lock:
        undo_in(world.ledger, step, works, idempotency_key)


def _ledger_undo() -> Callable[..., Any]:
    # Registered on first use, under a name of ours, so that importing agent_saga adds nothing
    # to the user's registry.
    if not registered(_LEDGER_UNDO):
        compensator(_LEDGER_UNDO)(_undo_in_ledger)
    return resolve(_LEDGER_UNDO)


class ScheduledWAL(FileWAL):
    """A file log whose appends and barriers are points the scheduler can hold an actor at.

    After an append the actor may stop at ``TYPE`` or ``TYPE:STEP`` (and ``outcome`` for a
    step's outcome record); in a barrier, once the record is durable, at ``barrier:TYPE``.
    ``synchronous``: every append waits until its record is durable (a crash test then kills
    the process at a record boundary with nothing else done after it).
    """

    def __init__(self, path: str | Path, scheduler: Scheduler, *, synchronous: bool = False) -> None:
        super().__init__(path, linger=0.0)
        self.scheduler = scheduler
        self.synchronous = synchronous
        self._types: dict[int, str] = {}

    def append(self, type: str, saga: str, body: Mapping[str, Any], step: int | None = None) -> int:
        ticket = super().append(type, saga, body, step)
        self._types[ticket] = str(type)
        if self.synchronous:
            super().barrier(ticket)
        for point in _points(str(type), step):
            self.scheduler.park(point)
        return ticket

    def barrier(self, ticket: int | None = None, timeout: float | None = None) -> None:
        super().barrier(ticket, timeout)
        if ticket in self._types:
            self.scheduler.park(f"barrier:{self._types[ticket]}")

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        await super().barrier_async(ticket, timeout)
        if ticket in self._types:
            await self.scheduler.park_async(f"barrier:{self._types[ticket]}")


def _points(rtype: str, step: int | None) -> list[str]:
    points = [rtype] if step is None else [f"{rtype}:{step}"]
    if rtype in _OUTCOMES:
        points.append("outcome")
    return points


class Lost(Exception):
    """A call that landed and lost its answer (the engine sees an UNKNOWN outcome)."""


@dataclass(slots=True)
class ConcurrentRun:
    """What one shape did: the world, the engine's report and log, and what each caller got."""

    shape: ConcurrentShape
    world: Any
    report: RollbackReport | None = None
    error: BaseException | None = None  # what escaped the saga's scope, if not SagaAborted
    records: list[Record] = field(default_factory=list)
    escalations: list[Escalation] = field(default_factory=list)
    results: dict[int, Any] = field(default_factory=dict)  # sibling position -> return value or exception
    standing_at_report: set[int] = field(default_factory=set)  # effects standing when the report came back
    lease_held: bool = False  # the saga's lease still held once everything landed
    unforced: str = ""  # the ordering could not be forced: why
    trace: list[tuple[str, str]] = field(default_factory=list)


class _Actors:
    """The saga's actors and what they share: the saga, its faces, their results."""

    def __init__(self, shape: ConcurrentShape, world: World, wal: FileWAL, scheduler: Scheduler) -> None:
        self.shape = shape
        self.world = world
        self.wal = wal
        self.scheduler = scheduler
        self.saga: Saga | None = None
        self.execute: Callable[..., Any] | None = None  # the face the siblings call
        self.run = ConcurrentRun(shape, world)
        self.threads: list[threading.Thread] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop: asyncio.Event | None = None
        left = bool(shape.left)
        self.options: dict[str, Any] = {
            "name": "verify-concurrent", "gate": OpenGate(), "halt_on_compensation_failure": shape.halt,
            "compensation_retry": RETRY, "rollback_grace": 0.0 if left else BOUND,
        }

    # -- what each step is -------------------------------------------------------------------

    def _from_result(self, works: bool) -> Callable[[Any], Compensation]:
        # Needs the result (a subscript of None raises): an undo known only after the call.
        return lambda result: self.world.undo(result["step"], works)

    def before(self, step: int, kind: Undo) -> dict[str, Any]:
        forward = functools.partial(self.world.forward, step)
        if kind is Undo.NONE:
            return {"tool": f"t{step}", "semantics": ActionSemantics.IRREVERSIBLE, "forward": forward}
        return {"tool": f"t{step}", "semantics": ActionSemantics.COMPENSABLE, "forward": forward,
                "compensate": self._from_result(kind is Undo.WORKS)}

    def sibling(self, position: int) -> dict[str, Any]:
        fate = self.shape.siblings[position].fate
        step = self.shape.step(position)
        options: dict[str, Any] = {"tool": f"t{step}", "forward": self._tool(step, fate),
                                   "semantics": ActionSemantics.COMPENSABLE}
        if fate is Fate.IRREVERSIBLE:
            options["semantics"] = ActionSemantics.IRREVERSIBLE
        elif fate is Fate.UNKNOWN_UNDO_KNOWN:
            options["compensate"] = self.world.undo(step, True)
        else:
            options["compensate"] = self._from_result(fate is not Fate.COMMITS_UNDO_REFUSES)
        return options

    def _tool(self, step: int, fate: Fate) -> Callable[..., Any]:
        world = self.world

        def tool(idempotency_key: str | None = None) -> dict[str, Any]:
            park("call")
            if fate is Fate.NOT_APPLIED:
                raise NotApplied(f"step {step} was declined")
            result = world.forward(step, idempotency_key)  # a fenced step never gets here, unless the fence fails
            if fate in (Fate.UNKNOWN_UNDO_KNOWN, Fate.UNKNOWN_NO_UNDO):
                raise Lost(f"step {step} landed but its answer was lost")
            return result

        return tool

    # -- the threads face --------------------------------------------------------------------

    def main_sync(self) -> None:
        with acting(MAIN):
            try:
                with saga_scope(self.wal, **self.options) as s:
                    self.saga, self.execute = s.saga, s.execute
                    for step, kind in enumerate(self.shape.before, start=1):
                        s.execute(**self.before(step, kind))
                    self.scheduler.park("fail")
                    raise SagaFails("the agent gives up")
            except SagaAborted as aborted:
                self.run.report = aborted.report
            except BaseException as err:  # noqa: BLE001 - a broken engine's escape is a finding
                self.run.error = err
            finally:
                self.scheduler.done(MAIN)

    def sibling_sync(self, position: int) -> None:
        with acting(f"s{position}"):
            try:
                assert self.execute is not None
                self.run.results[position] = self.execute(**self.sibling(position))
            except BaseException as err:  # noqa: BLE001 - what the caller gets is under test
                self.run.results[position] = err
            finally:
                self.scheduler.done(f"s{position}")

    def thread(self, target: Callable[..., None], *args: Any) -> None:
        worker = threading.Thread(target=contextvars.copy_context().run, args=(target, *args),
                                  name="agent-saga-proving", daemon=True)
        self.threads.append(worker)
        worker.start()

    # -- the tasks face ----------------------------------------------------------------------

    async def serve(self, ready: threading.Event) -> None:
        """The event loop's life: run whatever the controller starts, until it says stop."""
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        ready.set()
        await self.stop.wait()

    async def main_async(self) -> None:
        with acting(MAIN):
            try:
                async with saga_scope(self.wal, **self.options) as saga:
                    self.saga, self.execute = saga, saga.execute
                    for step, kind in enumerate(self.shape.before, start=1):
                        await saga.execute(**self.before(step, kind))
                    await self.scheduler.park_async("fail")
                    raise SagaFails("the agent gives up")
            except SagaAborted as aborted:
                self.run.report = aborted.report
            except BaseException as err:  # noqa: BLE001 - a broken engine's escape is a finding
                self.run.error = err
            finally:
                self.scheduler.done(MAIN)

    async def sibling_async(self, position: int) -> None:
        with acting(f"s{position}"):
            try:
                assert self.execute is not None
                self.run.results[position] = await self.execute(**self.sibling(position))
            except BaseException as err:  # noqa: BLE001 - what the caller gets is under test
                self.run.results[position] = err
            finally:
                self.scheduler.done(f"s{position}")

    def task(self, coro: Any) -> None:
        assert self.loop is not None
        asyncio.run_coroutine_threadsafe(coro, self.loop)


class _Controller:
    """Lets the actors go in the order the shape names (see the module docstring)."""

    def __init__(self, actors: _Actors) -> None:
        self.a = actors
        self.s = actors.scheduler
        self.shape = actors.shape
        self.threads = self.shape.face is Face.THREADS
        sibs = self.shape.siblings
        self.has = {slot: any(s.slot is slot for s in sibs) for slot in Slot}
        # Threads face, a sibling to leave: the rollback is held after ROLLBACK_STARTED while
        # the siblings meant to land inside the grace (which is 0) land.
        self.hold_start = self.threads and bool(self.shape.left) and (self.has[Slot.WAITED] or self.has[Slot.EDGE])

    def holds(self) -> None:
        s, shape = self.s, self.shape
        s.hold(MAIN, "fail")
        if self.hold_start:
            s.hold(MAIN, R.ROLLBACK_STARTED)
        if self.has[Slot.EDGE]:
            # Just after the last STEP_UNRESOLVED (in flight) record: the leave writes them newest first.
            s.hold(MAIN, f"{R.STEP_UNRESOLVED}:{min(shape.step(i) for i in shape.left)}")
        if self.has[Slot.UNDOING]:
            s.hold(MAIN, "undo")
        if self.has[Slot.ENDING]:
            s.hold(MAIN, f"barrier:{R.SAGA_ROLLED_BACK}")
        for i, sibling in enumerate(shape.siblings):
            s.hold(f"s{i}", self.first(i))
            if sibling.slot is Slot.EDGE:
                s.hold(f"s{i}", "outcome")

    def first(self, position: int) -> str:
        """Where sibling ``position`` first stops: as its call begins (a fenced one: in its intent's barrier)."""
        return f"barrier:{R.STEP_INTENT}" if self.shape.siblings[position].fate is Fate.FENCED else "call"

    def land(self, slot: Slot) -> None:
        for i in self.shape.landed(slot):
            self.s.resume(f"s{i}")
            self.s.finished(f"s{i}")

    def drive(self) -> None:
        a, s, shape = self.a, self.s, self.shape
        self.holds()
        if self.threads:
            a.thread(a.main_sync)
        else:
            a.task(a.main_async())
        s.reached(MAIN, "fail")
        for i in range(len(shape.siblings)):
            if self.threads:
                a.thread(a.sibling_sync, i)
            else:
                a.task(a.sibling_async(i))
            s.reached(f"s{i}", self.first(i))
        self.land(Slot.BEFORE)
        s.resume(MAIN)  # the saga fails: the rollback begins
        if self.hold_start:
            s.reached(MAIN, R.ROLLBACK_STARTED)
        elif self.has[Slot.WAITED]:
            saga = a.saga
            assert saga is not None
            s.until(lambda: saga._inflight.waiters > 0, "the rollback's wait for its steps in flight")
        self.land(Slot.WAITED)
        for i in shape.landed(Slot.EDGE):
            s.resume(f"s{i}")
            s.reached(f"s{i}", "outcome")
        if self.hold_start:
            s.resume(MAIN)  # the grace runs out
        if self.has[Slot.EDGE]:
            s.reached(MAIN, f"{R.STEP_UNRESOLVED}:{min(shape.step(i) for i in shape.left)}")
            self.land(Slot.EDGE)
            s.resume(MAIN)
        if self.has[Slot.UNDOING]:
            s.reached(MAIN, "undo")
            self.land(Slot.UNDOING)
            s.resume(MAIN)
        if self.has[Slot.ENDING]:
            s.reached(MAIN, f"barrier:{R.SAGA_ROLLED_BACK}")
            self.land(Slot.ENDING)
            s.resume(MAIN)
        s.finished(MAIN)
        a.run.standing_at_report = _standing(a.world)
        self.land(Slot.AFTER)


def _standing(world: Any) -> set[int]:
    standing = getattr(world, "standing", None)
    return set(standing()) if callable(standing) else set()


def run_concurrent(
    shape: ConcurrentShape,
    *,
    world: World | None = None,
    directory: Path | None = None,
    wal_factory: Callable[[Path, Scheduler], FileWAL] | None = None,
) -> ConcurrentRun:
    """Run ``shape`` once through ``saga_scope``, with its ordering forced (blocking).

    ``world`` defaults to a :class:`LedgerWorld`; ``directory`` (default: a fresh temporary one,
    removed afterwards) holds the log and its recovery files; ``wal_factory(path, scheduler)``
    makes the log (default: a :class:`ScheduledWAL`).
    """
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="agent-saga-verify-") as tmp:
            return run_concurrent(shape, world=world, directory=Path(tmp), wal_factory=wal_factory)
    # Every actor's thread, task and tool call starts from this context: the run's scheduler and world.
    return contextvars.copy_context().run(_run, shape, world if world is not None else LedgerWorld(), directory,
                                          wal_factory)


def _run(
    shape: ConcurrentShape, world: World, directory: Path, wal_factory: Callable[[Path, Scheduler], FileWAL] | None
) -> ConcurrentRun:
    scheduler = Scheduler()
    current.set(scheduler)
    _world.set(world)
    path = directory / "saga.wal"
    wal = wal_factory(path, scheduler) if wal_factory is not None else ScheduledWAL(path, scheduler)
    actors = _Actors(shape, world, wal, scheduler)
    loop_thread = None
    if shape.face is Face.TASKS:
        ready = threading.Event()
        loop_thread = threading.Thread(target=contextvars.copy_context().run, args=(asyncio.run, actors.serve(ready)),
                                       name="agent-saga-proving-loop", daemon=True)
        loop_thread.start()
        ready.wait(BOUND)
    run = actors.run
    try:
        _Controller(actors).drive()
    except Unforced as stuck:
        run.unforced = str(stuck)
        scheduler.release_all()
    finally:
        for worker in actors.threads:
            worker.join(BOUND)
        if loop_thread is not None:
            _stop_loop(actors)
            loop_thread.join(BOUND)
        run.trace = list(scheduler.trace)
        _collect(run, wal, actors.saga)
    return run


def _stop_loop(actors: _Actors) -> None:
    """End the event loop once every task on it has ended (bounded)."""
    loop, stop = actors.loop, actors.stop
    assert loop is not None
    assert stop is not None
    names = [MAIN, *(f"s{i}" for i in range(len(actors.shape.siblings)))]
    for name in names:
        try:
            actors.scheduler.finished(name)
        except Unforced:
            pass  # reported already (the run is unforced), or it never started
    loop.call_soon_threadsafe(stop.set)


def _collect(run: ConcurrentRun, wal: FileWAL, saga: Saga | None) -> None:
    try:
        wal.barrier()
        run.records = [r for r in wal.records() if saga is None or r.get("saga") == saga.saga_id]
        run.escalations = queue_of(wal.path).all()
    finally:
        if saga is not None:
            keeper = lease_keeper()
            run.lease_held = (wal.path, saga.saga_id) in keeper.held()
            if run.lease_held:
                keeper.release(wal.path, saga.saga_id)  # a finding, reported; not left renewing
        wal.close()
