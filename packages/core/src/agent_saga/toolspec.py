"""The one place where a call to a tool becomes a step of the current saga.

``@tool``, ``AgentKit.safe_tool``, ``SagaFleet`` and every framework adapter go
through ``ToolSpec.call_sync`` / ``ToolSpec.call_async``, so a tool behaves the same
whichever front door it came in by: outside a saga it calls straight through
(or refuses, when the boundary is required), inside it is logged, gated and undone.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_saga.context import current_saga
from agent_saga.engine.retry import RetryPolicy
from agent_saga.engine.saga import Saga
from agent_saga.errors import BoundaryRequired, CompensationError
from agent_saga.registry import CompensationFactory, inverse_for
from agent_saga.semantics import ActionSemantics

__all__ = ["ToolSpec"]


@dataclass(frozen=True)
class ToolSpec:
    """What a tool declares about itself. Semantics are required, never inferred."""

    name: str
    semantics: ActionSemantics
    compensate: CompensationFactory | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    fallback_action: Callable[..., Any] | None = None
    require_boundary: bool = False
    signature: inspect.Signature | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "semantics", ActionSemantics.parse(self.semantics))
        if not isinstance(self.name, str) or not self.name:
            raise CompensationError(f"a tool needs a non-empty name, got {self.name!r}")
        if self.semantics is ActionSemantics.IRREVERSIBLE and self.compensate is not None:
            raise CompensationError(
                f"tool {self.name!r} is declared IRREVERSIBLE but was given compensate=: an effect "
                "that can be undone is COMPENSABLE. Change the semantics, or drop compensate="
            )
        if self.compensate is not None and not callable(self.compensate):
            raise CompensationError(
                f"compensate= for tool {self.name!r} must be a factory (forward_result) -> "
                f"Compensation, got {type(self.compensate).__name__}"
            )

    @classmethod
    def for_function(
        cls,
        fn: Callable[..., Any],
        *,
        semantics: ActionSemantics | str,
        name: str | None = None,
        **options: Any,
    ) -> ToolSpec:
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None
        return cls(
            name=name or getattr(fn, "__name__", None) or type(fn).__name__,
            semantics=ActionSemantics.parse(semantics),
            signature=signature,
            **options,
        )

    def loggable_args(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name (what the gate polices and the log records)."""
        if self.signature is not None:
            try:
                bound = self.signature.bind_partial(*args, **kwargs).arguments
                return {k: v for k, v in bound.items() if k != "idempotency_key"}
            except TypeError:
                pass
        named = {f"arg{i}": a for i, a in enumerate(args)}
        named.update(kwargs)
        return named

    def _saga(self) -> Saga | None:
        saga = current_saga()
        if saga is None and self.require_boundary:
            raise BoundaryRequired(
                f"tool {self.name!r} is registered as a saga step but was called outside any saga "
                "boundary; call it inside saga_scope() / a transaction, or the effect would run "
                "unprotected"
            )
        return saga

    def _options(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        fallback = self.fallback_action
        return {
            "tool": self.name,
            "semantics": self.semantics,
            "forward": functools.partial(fn, *args, **kwargs),
            "compensate": self.compensate or inverse_for(fn),
            "args": self.loggable_args(args, kwargs),
            "retry": self.retry,
            "timeout": self.timeout,
            "fallback_action": functools.partial(fallback, *args, **kwargs) if fallback else None,
        }

    def call_sync(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call ``fn(*args, **kwargs)`` as a step of the current saga, blocking."""
        saga = self._saga()
        if saga is None:
            return fn(*args, **kwargs)
        return saga.execute_sync(**self._options(fn, args, kwargs))

    async def call_async(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Await ``fn(*args, **kwargs)`` as a step of the current saga."""
        saga = self._saga()
        if saga is None:
            return await fn(*args, **kwargs)
        return await saga.execute(**self._options(fn, args, kwargs))

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
        wrapper.__saga_spec__ = self  # type: ignore[attr-defined]
        return wrapper
