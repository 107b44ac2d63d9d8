"""The one place where a call to a tool becomes a step of the current saga.

``@tool``, ``AgentKit.safe_tool``, ``SagaFleet`` and every framework adapter describe a
tool as a :class:`ToolSpec` (its name, its :class:`StepOptions`, its signature) and go
through ``call_sync`` / ``call_async``, so a tool behaves the same whichever front door it
came in by: outside a saga it calls straight through (or refuses, when the boundary is
required), inside it is logged, gated and undone.
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Unpack

from agent_saga._bytecode import BYTECODE_KNOWN
from agent_saga.context import current_saga
from agent_saga.engine.saga import Saga
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.engine.tagged import untag
from agent_saga.errors import BoundaryRequired, CompensationError
from agent_saga.log.encodable import name_problem
from agent_saga.semantics import ActionSemantics

__all__ = ["SPEC_ATTR", "ToolSpec", "awaited_by_caller", "hold_back", "signature_of"]

#: Set on every callable that ``ToolSpec.wrap`` (or an adapter) made a saga step.
SPEC_ATTR = "__saga_spec__"
_KEY = "idempotency_key"


def signature_of(fn: Any, *, without: Collection[str] = ()) -> inspect.Signature | None:
    """``inspect.signature(fn)`` minus the parameters named in ``without``; None if fn has none."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if not without:
        return signature
    return signature.replace(parameters=[p for p in signature.parameters.values() if p.name not in without])


# ``awaited_by_caller`` reads the caller's bytecode (an ``await`` of a call is the call, then
# ``GET_AWAITABLE``) only on the interpreters _bytecode.PROVEN_BYTECODE lists. Anywhere else it
# answers False: the sync tool runs its effect once and returns its value (an ``await`` of it
# then raises TypeError, the effect done once, never twice and never skipped).
_BYTECODE_KNOWN = BYTECODE_KNOWN


@functools.lru_cache(maxsize=4096)
def _awaits_at(code: CodeType, lasti: int) -> bool:
    after = next((i for i in dis.get_instructions(code) if i.offset > lasti), None)
    return after is not None and after.opname == "GET_AWAITABLE"


def awaited_by_caller(depth: int = 2) -> bool:
    """Whether the frame ``depth`` levels up awaits what the current call returns.

    A wrapped *sync* tool is often written ``await charge(...)`` in async code (the
    seed's AgentKit snippet does). Its result is a plain value, so the ``await`` used to
    raise TypeError *after* the effect had run. The wrapper asks this instead: the
    caller's next instruction is ``GET_AWAITABLE`` exactly when the call is the operand
    of an ``await`` (CPython 3.11-3.13), and then the wrapper hands back a coroutine that
    runs the step when awaited, once. Every other caller gets the value, as before.
    """
    if not _BYTECODE_KNOWN:
        return False  # an unproven interpreter: run once, as a plain call (see _bytecode.PROVEN_BYTECODE)
    frame = sys._getframe(depth)
    return _awaits_at(frame.f_code, frame.f_lasti)


#: A call as (function, args, kwargs).
_Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]
_Split = Callable[[tuple[Any, ...], dict[str, Any]], _Call]


def hold_back(fn: Callable[..., Any], names: Collection[str]) -> _Split | None:
    """A splitter that keeps ``fn``'s parameters ``names`` out of a call's logged arguments.

    Frameworks hand a tool function values that are not the model's arguments (a run
    context, a cancellation token, callbacks): they must reach the function but never
    the log. ``split(args, kwargs)`` returns ``(forward, args', kwargs')`` where ``args'``
    and ``kwargs'`` lack those values and ``forward(*args', **kwargs')`` calls ``fn`` with
    the whole call again, however each value was passed (by position or by name).
    None when ``fn`` takes none of ``names``.
    """
    full = signature_of(fn)
    if full is None or not set(names) & set(full.parameters):
        return None
    held_names = frozenset(names)
    reduced = signature_of(fn, without=held_names)
    assert reduced is not None

    def split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
        try:
            arguments = full.bind_partial(*args, **kwargs).arguments
        except TypeError:
            return fn, args, kwargs  # a call fn cannot take: let fn's own error say so
        held = {k: v for k, v in arguments.items() if k in held_names}
        if not held:
            return fn, args, kwargs
        kept = inspect.BoundArguments(reduced, OrderedDict((k, v) for k, v in arguments.items() if k not in held_names))

        def whole(a: tuple[Any, ...], k: dict[str, Any]) -> inspect.BoundArguments:
            given = reduced.bind_partial(*a, **k).arguments
            merged = OrderedDict((n, held[n] if n in held else given[n]) for n in full.parameters if n in held or n in given)
            return inspect.BoundArguments(full, merged)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_forward(*a: Any, **k: Any) -> Any:
                call = whole(a, k)
                return await fn(*call.args, **call.kwargs)

            return async_forward, kept.args, kept.kwargs

        @functools.wraps(fn)
        def forward(*a: Any, **k: Any) -> Any:
            call = whole(a, k)
            return fn(*call.args, **call.kwargs)

        return forward, kept.args, kept.kwargs

    return split


@dataclass(frozen=True)
class ToolSpec:
    """What a tool declares about itself: its name and its step options."""

    name: str
    options: StepOptions
    signature: inspect.Signature | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CompensationError(f"a tool needs a non-empty name, got {self.name!r}")
        # Checked once here, not per call: every step of this tool is recorded under the name.
        unfit = name_problem(self.name, "a tool's name")
        if unfit is not None:
            raise CompensationError(unfit)
        if not isinstance(self.options, StepOptions):
            raise TypeError(f"ToolSpec.options must be StepOptions, got {type(self.options).__name__}")

    @classmethod
    def of(
        cls,
        name: str,
        *,
        semantics: ActionSemantics | str | None = None,
        options: StepOptions | None = None,
        signature: inspect.Signature | None = None,
        **more: Unpack[StepKwargs],
    ) -> ToolSpec:
        """A spec from the options a front door was given (unknown options refused by name)."""
        try:
            return cls(name, StepOptions.build(options, semantics, more), signature)
        except CompensationError as err:
            raise type(err)(f"tool {name!r}: {err}") from None

    @classmethod
    def for_function(
        cls,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        semantics: ActionSemantics | str | None = None,
        options: StepOptions | None = None,
        **more: Unpack[StepKwargs],
    ) -> ToolSpec:
        """A spec for a plain function: named after it unless ``name`` is given."""
        label = name or getattr(fn, "__name__", None) or type(fn).__name__
        return cls.of(label, semantics=semantics, options=options, signature=signature_of(fn), **more)

    @property
    def semantics(self) -> ActionSemantics:
        return self.options.semantics

    def loggable_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (what the gate polices and the log records)."""
        if self.signature is not None:
            try:
                bound = self.signature.bind_partial(*args, **kwargs).arguments
                return {k: v for k, v in bound.items() if k != _KEY}
            except TypeError:
                pass
        named = {f"arg{i}": a for i, a in enumerate(args)}
        named.update(kwargs)
        return named

    def without_key(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call minus a caller-supplied ``idempotency_key``, by name or by position.

        Inside a saga the key is the step's deterministic operation id; a value a
        model made up must not replace it. Some runtimes pass every argument
        positionally (``fn(*values)``), so a key left at its default arrives as a
        positional ``None``: the arguments after it move to keywords, so the
        engine's key takes its place.
        """
        named = {k: v for k, v in kwargs.items() if k != _KEY}
        if self.signature is None or not args:
            return args, named
        positional = [
            p.name for p in self.signature.parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        ]
        if _KEY not in positional:
            return args, named
        at = positional.index(_KEY)
        if len(args) <= at:
            return args, named
        named.update(zip(positional[at + 1:], args[at + 1:], strict=False))
        return args[:at], named

    def _saga(self) -> Saga | None:
        saga = current_saga()
        if saga is None and self.options.require_boundary:
            raise BoundaryRequired(
                f"tool {self.name!r} is registered as a saga step but was called outside any saga "
                "boundary; call it inside saga_scope() / a transaction, or the effect would run "
                "unprotected"
            )
        return saga

    def step_kwargs(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keywords of ``Saga.execute`` for this call: tool, forward, logged args, options."""
        args, kwargs = self.without_key(args, kwargs)
        options = self.options
        fallback = options.fallback_action
        if fallback is not None:  # the fallback gets the same call
            options = options.with_changes(fallback_action=functools.partial(fallback, *args, **kwargs))
        return {
            "tool": self.name,
            "forward": functools.partial(fn, *args, **kwargs),
            "args": self.loggable_args(args, kwargs),
            "options": options,
        }

    def call_sync(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``fn(*args, **kwargs)`` as a step of the current saga, blocking."""
        saga = self._saga()
        if saga is None:
            return fn(*_plain(args), **_plain_kw(kwargs))  # no saga to police tags: the tool gets values
        if saga.speculation is not None:  # a Speculator may hold this call's result (runtime/_speculation.py)
            return saga.speculation.call_sync(saga, self, fn, args, kwargs)
        return saga.execute_sync(**self.step_kwargs(fn, args, kwargs))

    async def call_async(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Await ``fn(*args, **kwargs)`` as a step of the current saga."""
        saga = self._saga()
        if saga is None:
            return await fn(*_plain(args), **_plain_kw(kwargs))
        if saga.speculation is not None:
            return await saga.speculation.call_async(saga, self, fn, args, kwargs)
        return await saga.execute(**self.step_kwargs(fn, args, kwargs))

    async def call_awaited(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A sync ``fn`` called under ``await``: the step runs on the async face, once.

        Inside a saga the engine runs the sync forward off the event loop, as it does
        for any blocking callable; outside one ``fn`` is called straight through.
        """
        saga = self._saga()
        if saga is None:
            return fn(*_plain(args), **_plain_kw(kwargs))
        if saga.speculation is not None:
            return await saga.speculation.call_async(saga, self, fn, args, kwargs)
        return await saga.execute(**self.step_kwargs(fn, args, kwargs))

    def wrap(self, fn: Callable[..., Any], *, hidden: Collection[str] = ()) -> Callable[..., Any]:
        """A function of the same shape (sync or async) that runs ``fn`` through this spec.

        ``hidden`` names parameters the framework fills (see :func:`hold_back`): they
        reach ``fn`` but are not logged. The spec's signature should leave them out too
        (``signature_of(fn, without=hidden)``).
        """
        split = hold_back(fn, hidden) if hidden else None

        def call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Call:
            return split(args, kwargs) if split is not None else (fn, args, kwargs)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_step(*args: Any, **kwargs: Any) -> Any:
                return await self.call_async(*call(args, kwargs))

            wrapper: Callable[..., Any] = async_step
        else:

            @functools.wraps(fn)
            def sync_step(*args: Any, **kwargs: Any) -> Any:
                if awaited_by_caller():  # `await tool(...)`: run the step when awaited, not before
                    return self.call_awaited(*call(args, kwargs))
                return self.call_sync(*call(args, kwargs))

            wrapper = sync_step
        setattr(wrapper, SPEC_ATTR, self)
        return wrapper


def _plain(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(untag(a) for a in args)


def _plain_kw(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: untag(v) for k, v in kwargs.items()}
