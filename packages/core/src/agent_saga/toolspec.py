"""The one place where a call to a tool becomes a step of the current saga.

``@tool``, ``AgentKit.safe_tool``, ``SagaFleet`` and every framework adapter describe a
tool as a :class:`ToolSpec` (its name, its :class:`StepOptions`, its signature) and go
through ``call_sync`` / ``call_async``, so a tool behaves the same whichever front door it
came in by: outside a saga it calls straight through (or refuses, when the boundary is
required), inside it is logged, gated and undone.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Unpack

from agent_saga.context import current_saga
from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.engine.saga import Saga
from agent_saga.errors import BoundaryRequired, CompensationError
from agent_saga.semantics import ActionSemantics

__all__ = ["SPEC_ATTR", "ToolSpec", "signature_of"]

#: Set on every callable that ``ToolSpec.wrap`` (or an adapter) made a saga step.
SPEC_ATTR = "__saga_spec__"
_KEY = "idempotency_key"


def signature_of(fn: Any) -> inspect.Signature | None:
    """``inspect.signature(fn)``, or None for a callable that has none."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class ToolSpec:
    """What a tool declares about itself: its name and its step options."""

    name: str
    options: StepOptions
    signature: inspect.Signature | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CompensationError(f"a tool needs a non-empty name, got {self.name!r}")
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

    def _step(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
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
            return fn(*args, **kwargs)
        return saga.execute_sync(**self._step(fn, args, kwargs))

    async def call_async(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Await ``fn(*args, **kwargs)`` as a step of the current saga."""
        saga = self._saga()
        if saga is None:
            return await fn(*args, **kwargs)
        return await saga.execute(**self._step(fn, args, kwargs))

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """A function of the same shape (sync or async) that runs ``fn`` through this spec."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_step(*args: Any, **kwargs: Any) -> Any:
                return await self.call_async(fn, args, kwargs)

            wrapper: Callable[..., Any] = async_step
        else:

            @functools.wraps(fn)
            def sync_step(*args: Any, **kwargs: Any) -> Any:
                return self.call_sync(fn, args, kwargs)

            wrapper = sync_step
        setattr(wrapper, SPEC_ATTR, self)
        return wrapper
