"""One step protocol, two drivers.

The saga's logic is written once, as a generator that yields *operations*
(wait for the log, ask the gate, call a function, sleep). ``drive_sync`` performs
them by blocking; ``drive_async`` by awaiting. So the sync and async faces of the
engine cannot drift apart: they run the very same protocol.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Generator
from dataclasses import dataclass
from types import CodeType, CoroutineType, FunctionType
from typing import Any, TypeVar
from typing import Protocol as Interface

from agent_saga.engine.inflight import InFlight
from agent_saga.engine.ports import GatePort, StepRequest
from agent_saga.engine.tool_pool import tool_pool
from agent_saga.log.base import WAL

__all__ = [
    "Barrier",
    "Call",
    "Check",
    "Keyed",
    "Op",
    "Park",
    "Parking",
    "Protocol",
    "Settle",
    "Sleep",
    "accepts_idempotency_key",
    "await_blocking",
    "call_op",
    "drive_async",
    "drive_sync",
    "still_running",
]

T = TypeVar("T")


@dataclass(slots=True)
class Barrier:
    """Wait until ``ticket`` (None: every record appended so far) is durable in ``wal``."""

    wal: WAL
    ticket: int | None


@dataclass(slots=True)
class Check:
    """Ask the gate whether a step may run (it may wait for a human)."""

    gate: GatePort
    request: StepRequest


@dataclass(slots=True)
class Call:
    """Call a user function: sync or async, each attempt under its own timeout."""

    fn: Callable[..., Any]
    kwargs: dict[str, Any]
    timeout: float | None = None
    inline: bool = False


@dataclass(slots=True)
class Sleep:
    seconds: float


@dataclass(slots=True)
class Settle:
    """Wait until none of a saga's steps is in flight, or ``deadline`` (``time.monotonic()``) passed.

    Sends back True when none is in flight.
    """

    inflight: InFlight
    deadline: float


class Parking(Interface):
    """What a durable wait parks on (engine/waits.py): its clock, which knows how to spend time."""

    def park(self, seconds: float) -> None: ...

    async def park_async(self, seconds: float) -> None: ...


@dataclass(slots=True)
class Park:
    """Wait at most ``seconds``, or until the wait is nudged (a signal sent in this process)."""

    parking: Parking
    seconds: float


#: A plain function is an op too: called with no arguments and no timeout on the loop (what it
#: returns awaited if awaitable), as a Call of an async one, or of a sync one with ``inline``, is:
#: the usual REVERSIBLE step's tool, for which no Call object is made (see call_op).
Op = Barrier | Check | Call | Sleep | Settle | Park | FunctionType
Protocol = Generator[Op, Any, T]

_KEY = "idempotency_key"
_accepts_cache: dict[CodeType, bool] = {}


#: The attribute that carries, on a call's timeout or cancellation, the call still running on a thread.
_PENDING = "_agent_saga_still_running"


def still_running(err: BaseException) -> concurrent.futures.Future[Any] | None:
    """The call ``err`` stopped waiting for, if it still runs on a thread (a timeout, a cancellation).

    A thread cannot be stopped: the call may still finish, and land. Its future says when.
    """
    return getattr(err, _PENDING, None)


def _unfinished(err: BaseException, future: concurrent.futures.Future[Any]) -> BaseException:
    """``err``, carrying ``future`` when the call it stopped waiting for has not finished."""
    if not future.done():
        setattr(err, _PENDING, future)
    return err


def accepts_idempotency_key(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` names an ``idempotency_key`` parameter the caller left unset.

    Only an explicitly named parameter counts: passing an unexpected keyword to a
    ``**kwargs`` wrapper could break the function it wraps.
    """
    # A plain function with no attributes wraps nothing (functools.wraps sets __wrapped__ among
    # them): known without hasattr's failed lookup.
    code = fn.__code__ if type(fn) is FunctionType and not fn.__dict__ else (
        None if hasattr(fn, "__wrapped__") else getattr(fn, "__code__", None))
    if code is not None:
        known = _accepts_cache.get(code)
        if known is not None:
            return known
    target: Any = fn
    while isinstance(target, functools.partial):
        if _KEY in target.keywords:
            return False
        target = target.func
    target = inspect.unwrap(target)
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if isinstance(code, CodeType):
        known = _accepts_cache.get(code)
        if known is None:
            names = code.co_varnames[code.co_posonlyargcount : code.co_argcount + code.co_kwonlyargcount]
            known = _accepts_cache[code] = _KEY in names
        return known
    try:
        return _KEY in inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False


# -- blocking side ------------------------------------------------------------------

#: How long, at most, a caller sleeps while a blocking tool runs (seconds): a thread (or an
#: event loop) wakes this often so that a pending Ctrl-C is handled (below, and _Heartbeat).
_WAKE_EVERY = 0.2


def _in_thread(fn: Callable[[], T], timeout: float | None) -> T:
    """Run ``fn`` on a fresh daemon thread (with this context) and wait at most ``timeout``.

    A thread cannot be interrupted: after a timeout it keeps running, which is
    exactly why a timed-out step is UNKNOWN rather than failed; the TimeoutError
    carries the call's future (``still_running``).
    """
    done: concurrent.futures.Future[T] = concurrent.futures.Future()
    ctx = contextvars.copy_context()

    def run() -> None:
        done.set_running_or_notify_cancel()
        try:
            done.set_result(ctx.run(fn))
        except BaseException as err:  # noqa: BLE001 - handed to the waiting caller
            done.set_exception(err)

    worker = threading.Thread(target=run, name="agent-saga-call", daemon=True)
    worker.start()
    # Waited in slices: a SIGINT whose C handler ran on another thread (the tool's) does not
    # wake a blocked join, and Python runs the handler only when this thread next wakes.
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while worker.is_alive():
            left = _WAKE_EVERY if deadline is None else min(_WAKE_EVERY, deadline - time.monotonic())
            if left <= 0:
                break
            worker.join(left)
    except BaseException as err:  # Ctrl-C while waiting: the call runs on (re-raised)
        _unfinished(err, done)
        raise
    if not done.done():
        raise _unfinished(TimeoutError(f"call did not finish within {timeout:g}s (it may still land)"), done)
    return done.result()


def await_blocking(awaitable: Any) -> Any:
    """Wait for an awaitable from sync code, whether or not this thread runs a loop."""

    async def wrapper() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrapper())
    # A loop runs on this thread (sync code called from async code): it cannot be
    # re-entered, so the coroutine runs to completion on a helper thread's loop.
    return _in_thread(lambda: asyncio.run(wrapper()), None)


def _call_sync(op: Call) -> Any:
    def run() -> Any:
        result = op.fn(**op.kwargs)
        return await_blocking(result) if _awaitable(result) else result

    if op.timeout is None:
        return run()
    return _in_thread(run, op.timeout)


def drive_sync(protocol: Protocol[T]) -> T:
    """Run a protocol to completion, blocking on each operation."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = protocol.throw(error) if error is not None else protocol.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            if isinstance(op, Call):
                value = _call_sync(op)
            elif type(op) is FunctionType:
                value = _call_sync(Call(op, {}))
            elif isinstance(op, Barrier):
                op.wal.barrier(op.ticket)
            elif isinstance(op, Check):
                op.gate.check(op.request)
            elif isinstance(op, Settle):
                value = op.inflight.wait(op.deadline)
            elif isinstance(op, Park):
                op.parking.park(op.seconds)
            else:
                time.sleep(op.seconds)
        except BaseException as err:  # noqa: BLE001 - thrown into the protocol
            error = err


# -- awaiting side --------------------------------------------------------------------


_CO_COROUTINE = inspect.CO_COROUTINE
_POOL = tool_pool()


class Keyed(Interface):
    """What a call's idempotency key is read from (a step): derived only when the function takes one."""

    @property
    def operation_id(self) -> str: ...


def call_op(fn: Callable[..., Any], step: Keyed, timeout: float | None, inline: bool) -> Call | FunctionType:
    """The op that calls ``fn``: with ``step``'s key if it names that parameter; a plain function called
    bare on the loop (no key, no timeout; async, or sync with ``inline``) is its own op (see Op)."""
    if accepts_idempotency_key(fn):
        return Call(fn, {_KEY: step.operation_id}, timeout, inline)
    if timeout is None and type(fn) is FunctionType and (inline or fn.__code__.co_flags & _CO_COROUTINE):
        return fn
    return Call(fn, {}, timeout, inline)


# Results never awaitable, known by their exact type: inspect.isawaitable's ABC check is spared.
_INERT = frozenset({int, float, bool, str, bytes, type(None), dict, list, tuple})


def _awaitable(result: Any) -> bool:
    """Whether a tool's result must be awaited (a sync function may return a coroutine)."""
    return type(result) not in _INERT and inspect.isawaitable(result)


def _is_coroutine_function(fn: Callable[..., Any]) -> bool:
    code = getattr(fn, "__code__", None)
    if code is not None:  # a plain function: read the flag directly
        return bool(code.co_flags & _CO_COROUTINE)
    return inspect.iscoroutinefunction(fn)


class _Heartbeat:
    """Keeps one event loop's sleep bounded while any of its blocking tools runs on the pool.

    Ctrl-C: asyncio.run's SIGINT handler is a Python-level handler, and the loop sets no
    wakeup fd for it. A SIGINT whose C handler runs on another thread (or an instant before
    the main thread enters select) leaves that handler pending while the loop sleeps with
    no timeout: nothing else is due while a tool runs, so it waited for the tool. One timer
    per loop, re-armed while a call is out, lets a pending handler run within _WAKE_EVERY.
    """

    __slots__ = ("busy", "handle")

    def __init__(self) -> None:
        self.busy = 0  # calls of this loop on the pool now
        self.handle: asyncio.TimerHandle | None = None

    def enter(self, loop: asyncio.AbstractEventLoop) -> None:
        self.busy += 1
        if self.handle is None:
            self.handle = loop.call_later(_WAKE_EVERY, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        self.handle = loop.call_later(_WAKE_EVERY, self._tick, loop) if self.busy else None


# Weak keys, and no heartbeat refers to its loop: a closed loop takes its entry with it.
_HEARTBEATS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Heartbeat] = weakref.WeakKeyDictionary()


async def _call_async(op: Call) -> Any:
    fn = op.fn
    if op.inline or _is_coroutine_function(fn):
        result = fn(**op.kwargs)
        if _awaitable(result):
            if op.timeout is None:
                return await result
            async with asyncio.timeout(op.timeout):
                return await result
        return result
    # A plain callable may block (an HTTP client, a driver): keep it off the loop, on a
    # thread of the tool pool (not the loop's default executor: see engine/tool_pool.py)
    # that sees this context (so nested tools find the saga).
    ctx = contextvars.copy_context()
    running = _POOL.submit(functools.partial(ctx.run, fn, **op.kwargs))
    future = asyncio.wrap_future(running)
    loop = asyncio.get_running_loop()
    beat = _HEARTBEATS.get(loop)
    if beat is None:
        beat = _HEARTBEATS[loop] = _Heartbeat()
    beat.enter(loop)
    try:
        if op.timeout is None:
            result = await future
            return (await result) if _awaitable(result) else result
        async with asyncio.timeout(op.timeout):
            result = await future
            return (await result) if _awaitable(result) else result
    except BaseException as err:  # a timeout or a cancellation: the thread runs on (re-raised)
        _unfinished(err, running)
        raise
    finally:
        beat.busy -= 1


async def drive_async(protocol: Protocol[T]) -> T:
    """Run a protocol to completion, awaiting each operation."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            op = protocol.throw(error) if error is not None else protocol.send(value)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        value, error = None, None
        try:
            if type(op) is FunctionType:  # a plain function called bare on the loop (see Op)
                value = op()
                if type(value) is CoroutineType or _awaitable(value):  # (an async tool's coroutine: at once)
                    value = await value
            elif isinstance(op, Call):
                fn = op.fn
                code = getattr(fn, "__code__", None)  # a plain async function: the common case
                if op.timeout is None and code is not None and code.co_flags & _CO_COROUTINE:
                    # (fn() when no key is passed: fn(**{}) builds and merges a dict of its own)
                    value = await (fn(**op.kwargs) if op.kwargs else fn())  # without another coroutine or call
                elif op.inline and op.timeout is None:  # a sync tool run on the loop, as _call_async would
                    value = fn(**op.kwargs) if op.kwargs else fn()
                    if _awaitable(value):
                        value = await value
                else:
                    value = await _call_async(op)  # (which also knows partials and other callables)
            elif isinstance(op, Barrier):
                await op.wal.barrier_async(op.ticket)
            elif isinstance(op, Check):
                await op.gate.check_async(op.request)
            elif isinstance(op, Settle):
                value = await op.inflight.wait_async(op.deadline)
            elif isinstance(op, Park):
                await op.parking.park_async(op.seconds)
            else:
                await asyncio.sleep(op.seconds)
        except BaseException as err:  # noqa: BLE001 - thrown into the protocol
            error = err
