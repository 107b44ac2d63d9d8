"""``@durable``: an agent run's entry point, registered by name, whose crash can be resumed forward.

::

    @durable("trip.plan")
    def plan_trip(trip_id: str, cities: list) -> list: ...

    plan_trip("t-42", ["paris", "rome"], saga_id="t-42")   # one saga; wal= names its log

A call runs the function inside one saga of its own whose SAGA_STARTED records the entry's
name and its JSON inputs; every step records its result (with the larger bound of
``log.results.DURABLE_RESULT_BYTES``), and SAGA_COMPLETED records what it returned. After a
crash, ``agent_saga.resume`` or the recovery daemon (``recovery.resume``) calls the registered
function again with the recorded inputs under the same saga id; the log answers the steps it
recorded. The name, like a ``@compensator``'s, is what crosses the process boundary: the
resuming process imports the module that defines it. See docs/RESUME.md.

Inside a run, ``durable_sleep`` and ``wait_for_event`` (and their ``_async`` forms) wait
durably (engine/waits.py): their wake-up time and their outcome are in the log, so a resumed
run sleeps only what was left and gets the answer a wait already had. Outside a durable run
they are refused: a sleep that silently stopped being durable is the mistake to catch.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent_saga.context import Boundary, current_saga
from agent_saga.engine.invoke import drive_async, drive_sync
from agent_saga.engine.resumed import ON_CRASH, DurableRun, Replay
from agent_saga.engine.saga import Saga
from agent_saga.engine.state import SagaStatus
from agent_saga.engine.waits import DEFAULT_POLL, SYSTEM_CLOCK, WaitClock, event_wait, sleep
from agent_saga.engine.waits import seconds as _seconds
from agent_saga.errors import BoundaryRequired, ConfigurationError, SagaClosed
from agent_saga.log.base import WAL
from agent_saga.log.default import default_wal, shared_log
from agent_saga.log.encodable import plain_json, unencodable

__all__ = [
    "Entry", "durable", "durable_sleep", "durable_sleep_async", "entry", "log_of", "run_async", "run_sync",
    "wait_for_event", "wait_for_event_async",
]

R = TypeVar("R")
LogTarget = WAL | str | os.PathLike[str] | None
#: The keywords a call of a durable entry point takes for itself (not passed to the function).
_OWN = ("saga_id", "wal")

_lock = threading.Lock()
_entries: dict[str, Entry] = {}


@dataclass(frozen=True, slots=True)
class Entry:
    """A registered durable entry point."""

    name: str
    fn: Callable[..., Any]
    on_crash: str
    wal: LogTarget

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def _identity(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def durable(
    name: str, *, on_crash: str = "resume", wal: LogTarget = None
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Register the decorated function as the durable entry point called ``name``.

    ``on_crash``: ``"resume"`` (recovery continues the run forward) or ``"unwind"`` (it undoes it,
    as for any saga). ``wal``: the log its runs write to unless a call names one (a WAL, a path or
    a URL); default the default log (``$AGENT_SAGA_WAL``, else ``./agent-saga.wal``). A name
    already registered to another function is refused. The decorated function is typed as taking
    any arguments (its own, plus ``saga_id=`` and ``wal=``), returning what the function returns.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"@durable needs a non-empty name, got {name!r}")
    if on_crash not in ON_CRASH:
        raise ConfigurationError(f"@durable({name!r}): on_crash must be 'resume' or 'unwind', got {on_crash!r}")

    def register(fn: Callable[..., R]) -> Callable[..., R]:
        if not callable(fn):
            raise ConfigurationError(f"@durable({name!r}) must decorate a function, got {fn!r}")
        taken = [p for p in _OWN if p in _parameters(fn)]
        if taken:
            raise ConfigurationError(
                f"@durable({name!r}): {_identity(fn)} has a parameter named {taken[0]!r}, which a call of a "
                "durable entry point takes for itself (saga_id=, wal=); rename it"
            )
        with _lock:
            existing = _entries.get(name)
            if existing is not None and existing.fn is not fn and _identity(existing.fn) != _identity(fn):
                raise ConfigurationError(
                    f"@durable name {name!r} is already registered to {_identity(existing.fn)}; "
                    f"{_identity(fn)} cannot reuse it (a resume would run whichever was imported last)"
                )
            registered = _entries[name] = Entry(name, fn, on_crash, wal)
        return _wrapper(registered)

    return register


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}


def _wrapper(registered: Entry) -> Callable[..., Any]:
    fn = registered.fn
    if registered.is_async:
        @functools.wraps(fn)
        async def run_entry_async(*args: Any, saga_id: str | None = None, wal: LogTarget = None, **kwargs: Any) -> Any:
            return await run_async(registered, args, kwargs, saga_id=saga_id, wal=wal)

        wrapper: Callable[..., Any] = run_entry_async
    else:
        @functools.wraps(fn)
        def run_entry(*args: Any, saga_id: str | None = None, wal: LogTarget = None, **kwargs: Any) -> Any:
            return run_sync(registered, args, kwargs, saga_id=saga_id, wal=wal)

        wrapper = run_entry
    wrapper.__durable__ = registered  # type: ignore[attr-defined]
    return wrapper


def log_of(target: LogTarget) -> WAL:
    """The log a durable run writes to: a WAL as given, the process's one writer for a path or URL, or the default."""
    if target is None:
        return default_wal()
    return target if isinstance(target, WAL) else shared_log(target)


def entry(name: str) -> Entry | None:
    """The entry point registered under ``name`` in this process, or None."""
    return _entries.get(name)


def _inputs(registered: Entry, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """Refuse inputs that are not JSON, naming the argument: they are recorded to be passed again."""
    try:
        bound = inspect.signature(registered.fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        bound = {**{f"#{i + 1}": a for i, a in enumerate(args)}, **kwargs}  # the call itself will say what is wrong
    for arg, value in bound.items():
        if not plain_json(value):
            why = unencodable(value, arg) or f"{arg} is a {type(value).__name__}"
            raise ConfigurationError(
                f"@durable({registered.name!r}): argument {arg!r} is not JSON ({why}); a durable run's inputs "
                "are recorded to call it again after a crash: pass str, numbers, bools, None, lists and dicts with str keys"
            )


def _boundary(registered: Entry, args: Sequence[Any], kwargs: Mapping[str, Any], saga_id: str | None,
              wal: LogTarget, replay: Replay | None) -> tuple[Boundary, DurableRun]:
    if replay is None:
        _inputs(registered, args, kwargs)
    run = DurableRun(registered.name, list(args), dict(kwargs), registered.on_crash, replay)
    log = log_of(wal if wal is not None else registered.wal)
    # A run that resumes after a crash is served from its log: each step's commit record (its
    # result) must be on disk before the next step begins, or a kill between a commit and the
    # next durable step's intent leaves a step that committed looking in flight, and the resume
    # stops at it (resume-unknown). One more flush a step; a run that unwinds needs none.
    resumes = registered.on_crash == "resume"
    return Boundary(log, saga_id=saga_id, name=registered.name, durable=run, wait_for_commit=resumes), run


def run_sync(
    registered: Entry, args: Sequence[Any], kwargs: Mapping[str, Any], *, saga_id: str | None = None,
    wal: LogTarget = None, replay: Replay | None = None,
) -> Any:
    """Run ``registered`` in a saga of its own (``replay``: resumed, the log answering what it recorded)."""
    boundary, run = _boundary(registered, args, kwargs, saga_id, wal, replay)
    with boundary as saga:
        value = registered.fn(*args, **kwargs)
        saga.saga.end_replay()
        run.done(value)
    return value


async def run_async(
    registered: Entry, args: Sequence[Any], kwargs: Mapping[str, Any], *, saga_id: str | None = None,
    wal: LogTarget = None, replay: Replay | None = None,
) -> Any:
    """The ``async def`` form of :func:`run_sync`."""
    boundary, run = _boundary(registered, args, kwargs, saga_id, wal, replay)
    async with boundary as saga:
        value = await registered.fn(*args, **kwargs)
        saga.end_replay()
        run.done(value)
    return value


def _waiting_run(what: str) -> tuple[Saga, DurableRun]:
    """The open durable run this wait belongs to; refused in one line outside one."""
    saga = current_saga()
    run = saga.durable if saga is not None else None
    if saga is None or run is None:
        raise BoundaryRequired(
            f"{what} is not inside a @durable run: its wake-up time is recorded in the run's log so that a "
            "resumed run waits only what is left; call it from a @durable entry point (time.sleep or "
            "asyncio.sleep sleep without a record)"
        )
    if saga.status is not SagaStatus.OPEN:
        raise SagaClosed(f"{what}: saga {saga.saga_id} is {saga.status.value.lower()}; a wait needs an open run")
    return saga, run


def _event_args(name: Any, timeout: Any, poll: Any) -> tuple[str, float | None, float]:
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"wait_for_event: the event's name must be a non-empty str, got {name!r}")
    every = _seconds(poll, "wait_for_event(poll=)")
    if not every:
        raise ConfigurationError("wait_for_event(poll=) must be more than 0 seconds")
    return name, None if timeout is None else _seconds(timeout, "wait_for_event(timeout=)"), every


def durable_sleep(seconds: float, *, clock: WaitClock | None = None) -> None:
    """Sleep ``seconds`` inside a ``@durable`` run, durably: the wake-up time is recorded first.

    Resumed after a crash, the run sleeps only until that recorded time (none at all if the sleep
    had ended). ``clock``: where time is read and spent (default the wall clock; a test passes
    its own). Outside a durable run: ``BoundaryRequired``.
    """
    saga, run = _waiting_run("durable_sleep")
    drive_sync(sleep(saga, run, _seconds(seconds, "durable_sleep(seconds)"), clock or SYSTEM_CLOCK))


async def durable_sleep_async(seconds: float, *, clock: WaitClock | None = None) -> None:
    """The ``async`` :func:`durable_sleep`: the event loop runs meanwhile."""
    saga, run = _waiting_run("durable_sleep_async")
    await drive_async(sleep(saga, run, _seconds(seconds, "durable_sleep_async(seconds)"), clock or SYSTEM_CLOCK))


def wait_for_event(name: str, *, timeout: float | None, clock: WaitClock | None = None,
                   poll: float = DEFAULT_POLL) -> Any:
    """Wait inside a ``@durable`` run for the event ``name``; return its JSON data.

    Signalled by ``agent_saga.signal`` or ``agent-saga signal SAGA NAME --data JSON`` from any
    process: a signal sent before the wait began, or while the run was dead, counts. ``timeout``
    (seconds; None waits for ever): ``EventTimedOut`` once it has passed with no signal, recorded,
    so a resume raises it too. A signal from this process wakes the wait at once; one from another
    process is seen within ``poll`` seconds (each look reads what the log gained since the last,
    a whole server log). Outside a durable run:
    ``BoundaryRequired``.
    """
    saga, run = _waiting_run("wait_for_event")
    event, limit, every = _event_args(name, timeout, poll)
    return drive_sync(event_wait(saga, run, event, limit, clock or SYSTEM_CLOCK, every))


async def wait_for_event_async(name: str, *, timeout: float | None, clock: WaitClock | None = None,
                               poll: float = DEFAULT_POLL) -> Any:
    """The ``async`` :func:`wait_for_event`: the event loop runs meanwhile."""
    saga, run = _waiting_run("wait_for_event_async")
    event, limit, every = _event_args(name, timeout, poll)
    return await drive_async(event_wait(saga, run, event, limit, clock or SYSTEM_CLOCK, every))
