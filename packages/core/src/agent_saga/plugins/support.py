"""What every framework adapter needs, written once.

* :func:`step_sync` / :func:`step_async` — run one tool call through a ToolSpec, telling
  observers, and remembering a failure even when the framework later turns the
  exception into an "error result" the model reads (the step is UNKNOWN either way).
* :func:`patched_sync` / :func:`patched_async` — what a patched runtime does with a call:
  explicit wrap wins, then the policy, then unclassified handling.
* :class:`run_boundary` — one saga around one agent run; if a tool failed inside the run
  but the framework swallowed the exception, the run is failed and unwound anyway
  (:class:`ToolFailed`), so a swallowed failure can never commit.
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import threading
import weakref
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any

from agent_saga.context import current_saga, saga_scope
from agent_saga.engine.saga import Saga
from agent_saga.errors import SagaError
from agent_saga.log.base import WAL
from agent_saga.toolspec import ToolSpec

__all__ = [
    "SPEC_ATTR",
    "ToolFailed",
    "failures",
    "patched_async",
    "patched_sync",
    "run_boundary",
    "step_async",
    "step_sync",
    "without_key",
]

SPEC_ATTR = "__saga_spec__"  # set by ToolSpec.wrap on every explicitly wrapped callable

_failures: weakref.WeakKeyDictionary[Saga, list[tuple[str, BaseException]]] = weakref.WeakKeyDictionary()
_failures_lock = threading.Lock()  # tools of one saga may fail on several framework threads at once
# Which patched call is already a step on this path: a framework's async entry may fall
# back to its own sync entry (on a worker thread that copies the context), and one call
# must be one step, not two.
_stepping: contextvars.ContextVar[int | None] = contextvars.ContextVar("agent_saga_stepping", default=None)


class ToolFailed(SagaError):
    """A tool failed inside an agent run, and the framework hid the exception from the run.

    Raised by the run helpers when the run itself finished: the failed step is
    UNKNOWN, so the run is unwound like any other failed run. ``cause`` is the
    tool's own exception.
    """

    def __init__(self, tool: str, cause: BaseException) -> None:
        self.tool = tool
        self.cause = cause
        super().__init__(
            f"tool {tool!r} failed inside the run ({type(cause).__name__}: {cause}) and the framework "
            "turned the exception into a result for the model; the step is UNKNOWN, so the run is unwound"
        )


def failures(saga: Saga) -> tuple[tuple[str, BaseException], ...]:
    """Tool failures seen inside ``saga`` (tool name, exception), oldest first."""
    with _failures_lock:
        return tuple(_failures.get(saga, ()))


def _note(saga: Saga | None, tool: str, err: BaseException) -> None:
    if saga is not None:
        with _failures_lock:
            _failures.setdefault(saga, []).append((tool, err))


def without_key(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The call's arguments minus a model-supplied ``idempotency_key``.

    Inside a saga the key is the step's deterministic operation id; a value the
    model made up must not replace it.
    """
    return {k: v for k, v in kwargs.items() if k != "idempotency_key"}


def _without_key(spec: ToolSpec, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Drop a model-supplied key whether it came by name or by position.

    Some runtimes pass every argument positionally (``fn(*values)``), so a key the
    model left at its default arrives as a positional ``None``: move the arguments
    after it to keywords, so the engine's deterministic key takes its place.
    """
    named = without_key(kwargs)
    signature = spec.signature
    if signature is None or not args:
        return args, named
    positional = [
        p.name for p in signature.parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if "idempotency_key" not in positional:
        return args, named
    at = positional.index("idempotency_key")
    if len(args) <= at:
        return args, named
    named.update(zip(positional[at + 1:], args[at + 1:], strict=False))
    return args[:at], named


def _observers() -> Any:
    from agent_saga.plugins import manager  # only already-created managers are asked

    return manager.active()


def step_sync(
    spec: ToolSpec, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], framework: str
) -> Any:
    """``spec.call_sync(fn, args, kwargs)``, noting failures and telling observers."""
    saga = current_saga()
    if saga is not None:
        args, kwargs = _without_key(spec, args, kwargs)
    observers = _observers() if saga is not None else None
    if observers is not None:
        observers.step_started(saga, spec.name, framework)
    try:
        result = spec.call_sync(fn, args, kwargs)
    except BaseException as err:
        _note(saga, spec.name, err)
        if observers is not None:
            observers.step_finished(saga, spec.name, framework, err)
        raise
    if observers is not None:
        observers.step_finished(saga, spec.name, framework, None)
    return result


async def step_async(
    spec: ToolSpec,
    fn: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    framework: str,
) -> Any:
    """``await spec.call_async(fn, args, kwargs)``, noting failures and telling observers."""
    saga = current_saga()
    if saga is not None:
        args, kwargs = _without_key(spec, args, kwargs)
    observers = _observers() if saga is not None else None
    if observers is not None:
        observers.step_started(saga, spec.name, framework)
    try:
        result = await spec.call_async(fn, args, kwargs)
    except BaseException as err:
        _note(saga, spec.name, err)
        if observers is not None:
            observers.step_finished(saga, spec.name, framework, err)
        raise
    if observers is not None:
        observers.step_finished(saga, spec.name, framework, None)
    return result


def _classified(tool: str, framework: str, identity: int) -> ToolSpec | None:
    from agent_saga.plugins.patching import classify

    if _stepping.get() == identity:
        return None  # the outer entry of this same call is already the step
    try:
        return classify(tool, framework)
    except BaseException as err:
        _note(current_saga(), tool, err)
        raise


def _on_raw(spec: ToolSpec, raw: Callable[[Any], Any] | None) -> ToolSpec:
    """``spec`` whose undo reads ``raw(result)``: the function's own return value, when
    the patched entry point hands back the framework's wrapper object around it."""
    factory = spec.compensate
    if raw is None or factory is None:
        return spec

    def on_raw(result: Any) -> Any:
        return factory(None if result is None else raw(result))

    return dataclasses.replace(spec, compensate=on_raw)


def patched_sync(
    tool: str,
    framework: str,
    identity: int,
    call: Callable[[], Any],
    tool_args: Mapping[str, Any],
    raw: Callable[[Any], Any] | None = None,
) -> Any:
    """Run a patched runtime's sync call ``call()`` of ``tool`` (already-wrapped tools excluded).

    ``raw`` extracts the tool function's own result from what ``call()`` returns.
    """
    spec = _classified(tool, framework, identity)
    if spec is None:
        return call()
    spec = _on_raw(spec, raw)

    def forward(**_logged: Any) -> Any:
        token = _stepping.set(identity)
        try:
            return call()
        finally:
            _stepping.reset(token)

    return step_sync(spec, forward, (), dict(tool_args), framework)


async def patched_async(
    tool: str,
    framework: str,
    identity: int,
    call: Callable[[], Awaitable[Any]],
    tool_args: Mapping[str, Any],
    raw: Callable[[Any], Any] | None = None,
) -> Any:
    """The awaiting form of :func:`patched_sync`."""
    spec = _classified(tool, framework, identity)
    if spec is None:
        return await call()
    spec = _on_raw(spec, raw)

    async def forward(**_logged: Any) -> Any:
        token = _stepping.set(identity)
        try:
            return await call()
        finally:
            _stepping.reset(token)

    return await step_async(spec, forward, (), dict(tool_args), framework)


class run_boundary:  # noqa: N801 - used like a function: `async with run_boundary(...)`
    """One saga around one agent run (``with`` or ``async with``).

    Inside an already-open saga it joins that saga (the outer boundary owns the
    rollback). When the run returns but a tool failed inside it, :class:`ToolFailed`
    is raised inside the boundary, so the run is unwound and ``SagaAborted`` raised.
    """

    def __init__(self, wal: WAL | None = None, *, name: str = "agent-run", **scope: Any) -> None:
        self._scope: saga_scope | None = None
        self._wal = wal
        self._name = name
        self._options = scope
        self._seen = 0
        self.saga: Saga | None = None

    def _begin(self) -> None:
        joined = current_saga()
        if joined is not None:
            self.saga = joined
        else:
            self._scope = saga_scope(self._wal, name=self._name, **self._options)
        self._seen = 0

    def _check(self) -> None:
        assert self.saga is not None
        seen = failures(self.saga)
        if len(seen) > self._seen:
            tool, err = seen[self._seen]
            raise ToolFailed(tool, err) from err

    def _finished(self) -> None:
        observers = _observers()
        if observers is not None and self.saga is not None and self._scope is not None:
            observers.saga_finished(self.saga, self.saga.report)

    def __enter__(self) -> Saga:
        self._begin()
        if self._scope is not None:
            self.saga = self._scope.__enter__().saga
        assert self.saga is not None
        self._seen = len(failures(self.saga))
        return self.saga

    def _outcome(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> tuple[type[BaseException] | None, BaseException | None, TracebackType | None]:
        """How the run ended, counting a tool failure the framework swallowed.

        Inside a joined saga there is no scope to hand it to: ToolFailed is raised
        here, for the outer boundary to unwind.
        """
        if error is None:
            try:
                self._check()
            except ToolFailed as failed:
                kind, error, tb = type(failed), failed, failed.__traceback__
        if self._scope is None and error is not None and kind is ToolFailed:
            raise error
        return kind, error, tb

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool:
        kind, error, tb = self._outcome(kind, error, tb)
        if self._scope is None:
            return False
        try:
            return bool(self._scope.__exit__(kind, error, tb))
        finally:
            self._finished()

    async def __aenter__(self) -> Saga:
        self._begin()
        if self._scope is not None:
            self.saga = await self._scope.__aenter__()
        assert self.saga is not None
        self._seen = len(failures(self.saga))
        return self.saga

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool:
        kind, error, tb = self._outcome(kind, error, tb)
        if self._scope is None:
            return False
        try:
            return bool(await self._scope.__aexit__(kind, error, tb))
        finally:
            self._finished()
