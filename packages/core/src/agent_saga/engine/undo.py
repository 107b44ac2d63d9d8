"""A step's undo: which one applies, building it (before the call or from its result), how
the log describes it, and whether a halt stops it (the one rule every path that runs an
undo asks: the in-process rollback and the recovery daemon)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from types import FunctionType
from typing import Any

from agent_saga.engine.ports import StepRequest
from agent_saga.engine.step_options import StepOptions
from agent_saga.errors import CompensationError, StepRefused
from agent_saga.registry import CompensationFactory, handler_fn, inverse_for, resolve
from agent_saga.registry import recoverable as is_recoverable
from agent_saga.semantics import ActionSemantics, Compensation

__all__ = [
    "as_undo_of", "build", "describe", "halt_on_undo", "normalize", "prebuild", "undo_for", "undo_name", "undo_of",
    "undoing",
]

_IRREVERSIBLE = ActionSemantics.IRREVERSIBLE
_COMPENSABLE = ActionSemantics.COMPENSABLE

# The saga whose undo runs now. Set by the code that runs undos (the rollback, the recovery
# daemon), never from a record: a handler bound to its saga (a snapshot's restore) compares
# the saga its recorded kwargs name with this one.
_undoing: ContextVar[str | None] = ContextVar("agent_saga_undoing", default=None)


def undoing() -> str | None:
    """The saga whose undo is running in this context, as its runner says; None outside any undo."""
    return _undoing.get()


@contextmanager
def undo_of(saga_id: str) -> Iterator[None]:
    """Run the block as an undo of ``saga_id`` (what :func:`undoing` answers inside it)."""
    token = _undoing.set(saga_id)
    try:
        yield
    finally:
        _undoing.reset(token)


def as_undo_of(saga_id: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (sync or async) called as an undo of ``saga_id``: what a runner hands its driver."""
    if inspect.iscoroutinefunction(fn):
        async def undo_async(**kwargs: Any) -> Any:
            with undo_of(saga_id):
                return await fn(**kwargs)

        return undo_async

    def undo(**kwargs: Any) -> Any:
        with undo_of(saga_id):
            return fn(**kwargs)

    return undo


def describe(comp: Compensation | None) -> dict[str, Any] | None:
    """The log's view of an undo: enough for another process to run it, or to know it can't."""
    if comp is None:
        return None
    recoverable = is_recoverable(comp)
    return {
        "handler": comp.handler,
        "kwargs": dict(comp.kwargs) if recoverable else None,
        "key": comp.idempotency_key,
        "description": comp.label if recoverable else comp.description,
        "recoverable": recoverable,
    }


def normalize(value: Any, tool: str, key: str) -> Compensation | None:
    """Turn what a compensate= factory returned into a Compensation (or refuse it)."""
    if value is None:
        return None
    if isinstance(value, Compensation):
        comp = value
    else:
        if not isinstance(value, Mapping):
            raise CompensationError(
                f"compensate= for {tool!r} must return a Compensation (or a dict naming a registered "
                f"handler), but it returned {type(value).__name__}: {value!r}"
            )
        handler = value.get("handler")
        if not isinstance(handler, str):
            raise CompensationError(
                f"compensate= for {tool!r} returned a dict without a 'handler' name: {dict(value)!r}. "
                "Return {'handler': 'registered.name', 'kwargs': {...}} or a Compensation"
            )
        extra = set(value) - {"handler", "kwargs", "description"}
        if extra:
            raise CompensationError(f"compensate= for {tool!r} returned unknown keys {sorted(extra)}")
        try:
            fn = resolve(handler)
        except KeyError as err:
            raise CompensationError(str(err.args[0])) from None
        comp = Compensation(
            fn=fn, handler=handler, kwargs=value.get("kwargs") or {},
            description=str(value.get("description", "")),
        )
    if comp.handler is not None and comp.fn is not None:
        registered_fn = handler_fn(comp.handler)
        if registered_fn is not None and registered_fn != comp.fn:  # == : bound methods are fresh objects
            raise CompensationError(
                f"compensation for {tool!r} runs {getattr(comp.fn, '__qualname__', comp.fn)!r} in "
                f"process but names handler {comp.handler!r}, which is registered to "
                f"{getattr(registered_fn, '__qualname__', registered_fn)!r}; the recovery daemon "
                "would run a different function. Use the registered function or another name"
            )
    return comp if comp.idempotency_key is not None else comp.with_key(key)


def undo_for(tool: str, forward: Callable[..., Any], opts: StepOptions) -> CompensationFactory | Compensation | None:
    if not isinstance(tool, str) or not tool:
        raise CompensationError(f"tool= must be a non-empty name, got {tool!r}")
    if not callable(forward):
        raise CompensationError(f"forward= for {tool!r} must be callable, got {forward!r}")
    compensate = opts.compensate
    if compensate is None and opts.semantics is not _IRREVERSIBLE:
        if type(forward) is not FunctionType or forward.__dict__:  # a bare function is paired with nothing
            compensate = inverse_for(forward)  # (a call spared on every step of a plain tool)
        if compensate is None and opts.semantics is _COMPENSABLE:
            raise CompensationError(
                f"{tool!r} is declared COMPENSABLE but has no undo: pass compensate= (a factory "
                "over the forward result), or pair an inverse with @inverse_of"
            )
    return compensate


def prebuild(
    compensate: CompensationFactory | Compensation | None, tool: str, key: str
) -> Compensation | None:
    """The undo when it is declared known before the call; None otherwise (never a probe)."""
    if compensate is None:
        return None
    if isinstance(compensate, Compensation):
        return normalize(compensate, tool, key)
    # The step's opts.compensate when one was given, else an @inverse_of factory: asking
    # the factory itself is all StepOptions.known_before_call would ask.
    if getattr(compensate, "known_before_call", False):
        return normalize(compensate(None), tool, key)
    return None


def build(
    compensate: CompensationFactory | Compensation, result: Any, tool: str, key: str, sem: ActionSemantics
) -> Compensation | None:
    if isinstance(compensate, Compensation):
        return normalize(compensate, tool, key)
    try:
        value = compensate(result)
    except CompensationError:
        raise
    except Exception as err:
        raise CompensationError(
            f"compensate= for {tool!r} raised {type(err).__name__}: {err} when given the "
            f"forward result {result!r}; the effect happened but cannot be undone"
        ) from err
    comp = normalize(value, tool, key)
    if comp is None and sem is _COMPENSABLE:
        raise CompensationError(
            f"compensate= for COMPENSABLE {tool!r} returned None for result {result!r}; return "
            "a Compensation, or declare the step REVERSIBLE if nothing needs undoing"
        )
    return comp


def undo_name(comp: Compensation) -> str:
    """The name a halt uses for an undo: its registered handler, else its function's name."""
    return comp.handler or str(getattr(comp.fn, "__qualname__", "") or comp.label)


def halt_on_undo(
    gate: object, saga_id: str, step: int, name: str, semantics: ActionSemantics, tags: frozenset[str] = frozenset()
) -> StepRefused | None:
    """The halt that stops the undo ``name`` of step ``step`` now, or None: asked before every attempt.

    Undos run under a halt unless the halt names them (``tool:NAME`` or a matching
    pattern): a halt is pulled to stop new effects, and an undo reduces what stands. The
    gate's ``check_undo`` applies that rule (``GatePort``); a gate without one, or no gate,
    stops no undo. The in-process rollback and the recovery daemon both ask here, so an
    operator's halt means the same wherever the undo would run.
    """
    check = getattr(gate, "check_undo", None) if gate is not None else None
    if check is None:
        return None
    try:
        check(StepRequest(saga_id, step, name, semantics, {}, tags))
    except StepRefused as stop:
        return stop
    return None
