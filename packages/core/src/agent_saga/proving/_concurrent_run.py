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
import contextlib
import contextvars
import functools
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent_saga.context import saga_scope
from agent_saga.engine.report import RollbackReport, SagaAborted
from agent_saga.engine.saga import Saga
from agent_saga.errors import NotApplied, WALStalled
from agent_saga.log.file import FileWAL
from agent_saga.log.records import Record
from agent_saga.log.records import RecordType as R
from agent_saga.proving._concurrent_shapes import ConcurrentShape, Face, Fate, Slot
from agent_saga.proving._scheduler import BOUND, Scheduler, Unforced, acting, current, park
from agent_saga.proving._shapes import RETRY, Ledger, OpenGate, SagaFails, undo_in
from agent_saga.recovery.escalations import Escalation, queue_of
from agent_saga.recovery.lease import lease_keeper
from agent_saga.registry import compensator, registered, resolve
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = ["ConcurrentRun", "LedgerWorld", "Lost", "ScheduledWAL", "Session", "World", "run_concurrent", "standing"]

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
        with self._saying_where():
            super().barrier(ticket, timeout)
        if ticket in self._types:
            self.scheduler.park(f"barrier:{self._types[ticket]}")

    async def barrier_async(self, ticket: int | None = None, timeout: float | None = None) -> None:
        with self._saying_where():
            await super().barrier_async(ticket, timeout)
        if ticket in self._types:
            await self.scheduler.park_async(f"barrier:{self._types[ticket]}")

    @contextlib.contextmanager
    def _saying_where(self) -> Iterator[None]:
        """A stalled barrier's error also says where every actor was (the one that did not arrive is
        named) and what the log's flusher was doing: ended (it died), committing (stuck in its
        write or sync), or waiting with records queued (a wake-up lost)."""
        try:
            yield
        except WALStalled as stalled:
            flusher = self._flusher
            with self._lock:
                doing = _FLUSHER.get(self._parked, "waiting") if flusher is not None and flusher.is_alive() else "ended"
                queued = len(self._pending)
            raise WALStalled(f"{stalled}; flusher {doing}, {queued} record(s) queued; actors: "
                             f"{self.scheduler.whereabouts()}") from stalled


# What the flusher is doing, by its state in ``log.group`` (0 running, 1 lingering, 2 idle, -1 backoff).
_FLUSHER = {0: "committing", 1: "lingering", 2: "idle", -1: "backing off after a failed commit"}


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


class Session:
    """One saga under a scheduler: its actors (``main``, then ``s0``, ``s1``, ... as they start), log and world.

    ``main`` runs ``before`` steps one after another, then stops at ``fail``; resumed, it fails
    and rolls back. :meth:`add` starts a sibling call, which stops as it begins (a fenced one as
    its intent is made durable: see :meth:`first`). What is held where, and who goes when, is the
    controller's: :func:`run_concurrent`'s for a shape, or a test's rules. Every actor starts from
    the session's context, which names its scheduler and world.
    """

    def __init__(
        self,
        face: Face,
        directory: Path,
        *,
        world: World | None = None,
        before: int = 0,
        halt: bool = True,
        grace: float = BOUND,
        wal_factory: Callable[[Path, Scheduler], FileWAL] | None = None,
    ) -> None:
        self.face = face
        self.before = before
        self.world: World = world if world is not None else LedgerWorld()
        self.scheduler = Scheduler()
        path = directory / "saga.wal"
        self.wal = wal_factory(path, self.scheduler) if wal_factory is not None else ScheduledWAL(path, self.scheduler)
        self.context = contextvars.Context()
        self.context.run(self._enter)
        self.fates: list[Fate] = []
        self.saga: Saga | None = None
        self.execute: Callable[..., Any] | None = None  # the face the siblings call
        self.report: RollbackReport | None = None
        self.error: BaseException | None = None
        self.results: dict[int, Any] = {}
        self.standing_at_report: set[int] = set()  # set by the controller when the report came back
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.options: dict[str, Any] = {
            "name": "verify-concurrent", "gate": OpenGate(), "halt_on_compensation_failure": halt,
            "compensation_retry": RETRY, "rollback_grace": grace,
        }

    def _enter(self) -> None:
        current.set(self.scheduler)
        _world.set(self.world)

    def step(self, position: int) -> int:
        """The engine's step number of sibling ``position``."""
        return self.before + position + 1

    def first(self, position: int) -> str:
        """Where sibling ``position`` first stops: as its call begins (a fenced one: in its intent's barrier)."""
        return f"barrier:{R.STEP_INTENT}" if self.fates[position] is Fate.FENCED else "call"

    # -- starting and ending -------------------------------------------------------------------

    def open(self) -> None:
        """Start the saga: ``main`` runs its steps before, and stops at ``fail``."""
        self.scheduler.hold(MAIN, "fail")
        if self.face is Face.TASKS:
            ready = threading.Event()
            self._thread(asyncio.run, self._serve(ready))
            if not ready.wait(BOUND):
                raise Unforced(f"the event loop did not start within {BOUND:g}s")
            self._task(self._main_async())
        else:
            self._thread(self._main_sync)
        self.scheduler.reached(MAIN, "fail")

    def add(self, fate: Fate) -> int:
        """Start a sibling call that ends as ``fate`` says; it stops as it begins. Its position."""
        position = len(self.fates)
        self.fates.append(fate)
        name = f"s{position}"
        self.scheduler.hold(name, self.first(position))
        if self.face is Face.TASKS:
            self._task(self._sibling_async(position))
        else:
            self._thread(self._sibling_sync, position)
        self.scheduler.reached(name, self.first(position))
        return position

    def close(self, shape: ConcurrentShape, unforced: str = "") -> ConcurrentRun:
        """Wait for every actor to end (bounded), then gather what happened, as ``shape``'s run."""
        if unforced:
            self.scheduler.release_all()
        for name in [MAIN, *(f"s{i}" for i in range(len(self.fates)))]:
            with contextlib.suppress(Unforced):  # reported already, or it never started
                self.scheduler.finished(name)
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)  # every task on it has ended
        for worker in self._threads:  # the loop's among them
            worker.join(BOUND)
        run = ConcurrentRun(shape, self.world, self.report, self.error, results=dict(self.results),
                            standing_at_report=set(self.standing_at_report), unforced=unforced,
                            trace=list(self.scheduler.trace))
        self._collect(run)
        return run

    def _collect(self, run: ConcurrentRun) -> None:
        wal, saga = self.wal, self.saga
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

    # -- what each step is -------------------------------------------------------------------

    def _from_result(self, works: bool) -> Callable[[Any], Compensation]:
        # Needs the result (a subscript of None raises): an undo known only after the call.
        return lambda result: self.world.undo(result["step"], works)

    def _before(self, step: int) -> dict[str, Any]:
        return {"tool": f"t{step}", "semantics": ActionSemantics.COMPENSABLE,
                "forward": functools.partial(self.world.forward, step), "compensate": self._from_result(True)}

    def _sibling(self, position: int) -> dict[str, Any]:
        fate, step = self.fates[position], self.step(position)
        options: dict[str, Any] = {"tool": f"t{step}", "forward": _tool(self.world, step, fate),
                                   "semantics": ActionSemantics.COMPENSABLE}
        if fate is Fate.IRREVERSIBLE:
            options["semantics"] = ActionSemantics.IRREVERSIBLE
        elif fate is Fate.UNKNOWN_UNDO_KNOWN:
            options["compensate"] = self.world.undo(step, True)
        else:
            options["compensate"] = self._from_result(fate is not Fate.COMMITS_UNDO_REFUSES)
        return options

    # -- the threads face --------------------------------------------------------------------

    def _thread(self, target: Callable[..., Any], *args: Any) -> None:
        worker = threading.Thread(target=self.context.copy().run, args=(target, *args),
                                  name="agent-saga-proving", daemon=True)
        self._threads.append(worker)
        worker.start()

    @contextlib.contextmanager
    def _main(self) -> Iterator[None]:
        """The main actor's life, either face: how its saga ended is kept, and the scheduler told."""
        with acting(MAIN):
            try:
                yield
            except SagaAborted as aborted:
                self.report = aborted.report
            except BaseException as err:  # noqa: BLE001 - a broken engine's escape is a finding
                self.error = err
            finally:
                self.scheduler.done(MAIN)

    def _main_sync(self) -> None:
        with self._main(), saga_scope(self.wal, **self.options) as s:
            self.saga, self.execute = s.saga, s.execute
            for step in range(1, self.before + 1):
                s.execute(**self._before(step))
            self.scheduler.park("fail")
            raise SagaFails("the agent gives up")

    def _sibling_sync(self, position: int) -> None:
        with acting(f"s{position}"):
            try:
                assert self.execute is not None
                self.results[position] = self.execute(**self._sibling(position))
            except BaseException as err:  # noqa: BLE001 - what the caller gets is under test
                self.results[position] = err
            finally:
                self.scheduler.done(f"s{position}")

    # -- the tasks face ----------------------------------------------------------------------

    async def _serve(self, ready: threading.Event) -> None:
        """The event loop's life: run whatever the controller starts, until it says stop."""
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        ready.set()
        await self._stop.wait()

    def _task(self, coro: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        # Created from a copy of the session's context (a task copies the context it is made in).
        self.context.copy().run(asyncio.run_coroutine_threadsafe, coro, self._loop)

    async def _main_async(self) -> None:
        with self._main():
            async with saga_scope(self.wal, **self.options) as saga:
                self.saga, self.execute = saga, saga.execute
                for step in range(1, self.before + 1):
                    await saga.execute(**self._before(step))
                await self.scheduler.park_async("fail")
                raise SagaFails("the agent gives up")

    async def _sibling_async(self, position: int) -> None:
        with acting(f"s{position}"):
            try:
                assert self.execute is not None
                self.results[position] = await self.execute(**self._sibling(position))
            except BaseException as err:  # noqa: BLE001 - what the caller gets is under test
                self.results[position] = err
            finally:
                self.scheduler.done(f"s{position}")


def _tool(world: World, step: int, fate: Fate) -> Callable[..., Any]:
    """Sibling ``step``'s tool: it stops as it begins (``call``), then ends as ``fate`` says."""

    def tool(idempotency_key: str | None = None) -> dict[str, Any]:
        park("call")
        if fate is Fate.NOT_APPLIED:
            raise NotApplied(f"step {step} was declined")
        result = world.forward(step, idempotency_key)  # a fenced step never gets here, unless the fence fails
        if fate in (Fate.UNKNOWN_UNDO_KNOWN, Fate.UNKNOWN_NO_UNDO):
            raise Lost(f"step {step} landed but its answer was lost")
        return result

    return tool


class _Controller:
    """Lets a session's actors go in the order a shape names (see the module docstring)."""

    def __init__(self, session: Session, shape: ConcurrentShape) -> None:
        self.session = session
        self.s = session.scheduler
        self.shape = shape
        self.threads = shape.face is Face.THREADS
        self.has = {slot: any(s.slot is slot for s in shape.siblings) for slot in Slot}
        # Threads face, a sibling to leave: the rollback is held after ROLLBACK_STARTED while
        # the siblings meant to land inside the grace (which is 0) land.
        self.hold_start = self.threads and bool(shape.left) and (self.has[Slot.WAITED] or self.has[Slot.EDGE])
        self.leave_point = f"{R.STEP_UNRESOLVED}:{min(shape.step(i) for i in shape.left)}" if shape.left else ""

    def holds(self) -> None:
        s = self.s
        if self.hold_start:
            s.hold(MAIN, R.ROLLBACK_STARTED)
        if self.has[Slot.EDGE]:
            s.hold(MAIN, self.leave_point)  # just after the last in-flight record: the leave writes them newest first
        if self.has[Slot.UNDOING]:
            s.hold(MAIN, "undo")
        if self.has[Slot.ENDING]:
            s.hold(MAIN, f"barrier:{R.SAGA_ROLLED_BACK}")

    def land(self, slot: Slot) -> None:
        for i in self.shape.landed(slot):
            self.s.resume(f"s{i}")
            self.s.finished(f"s{i}")

    def drive(self) -> None:
        session, s, shape = self.session, self.s, self.shape
        self.holds()
        session.open()
        for i, sibling in enumerate(shape.siblings):
            session.add(sibling.fate)
            if sibling.slot is Slot.EDGE:
                s.hold(f"s{i}", "outcome")
        self.land(Slot.BEFORE)
        s.resume(MAIN)  # the saga fails: the rollback begins
        if self.hold_start:
            s.reached(MAIN, R.ROLLBACK_STARTED)
        elif self.has[Slot.WAITED]:
            saga = session.saga
            assert saga is not None
            s.until(lambda: saga._inflight.waiters > 0, "the rollback's wait for its steps in flight")
        self.land(Slot.WAITED)
        for i in shape.landed(Slot.EDGE):
            s.resume(f"s{i}")
            s.reached(f"s{i}", "outcome")
        if self.hold_start:
            s.resume(MAIN)  # the grace runs out
        if self.has[Slot.EDGE]:
            s.reached(MAIN, self.leave_point)
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
        session.standing_at_report = standing(session.world)
        self.land(Slot.AFTER)


def standing(world: Any) -> set[int]:
    """The steps whose effects stand in ``world`` now (a world that cannot tell: none)."""
    found = getattr(world, "standing", None)
    return set(found()) if callable(found) else set()


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
    makes the log (default: a :class:`ScheduledWAL`). The rollback's grace is 0 when a sibling
    is to be left, else 30 s (see the module docstring).
    """
    if directory is None:
        with tempfile.TemporaryDirectory(prefix="agent-saga-verify-") as tmp:
            return run_concurrent(shape, world=world, directory=Path(tmp), wal_factory=wal_factory)
    session = Session(shape.face, directory, world=world, before=shape.before, halt=shape.halt,
                      grace=0.0 if shape.left else BOUND, wal_factory=wal_factory)
    unforced = ""
    try:
        _Controller(session, shape).drive()
    except Unforced as stuck:
        unforced = str(stuck)
    return session.close(shape, unforced)
