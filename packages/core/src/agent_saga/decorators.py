"""Decorators: ``@tool`` makes a function a saga step, ``@guard`` makes one a boundary."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, overload

from agent_saga.context import current_saga, saga_scope
from agent_saga.engine.ports import GatePort
from agent_saga.engine.retry import RetryPolicy
from agent_saga.errors import ConfigurationError
from agent_saga.log.base import WAL
from agent_saga.registry import CompensationFactory
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["guard", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    semantics: ActionSemantics | str | None = None,
    compensate: CompensationFactory | None = None,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    fallback_action: Callable[..., Any] | None = None,
    require_boundary: bool = False,
) -> Any:
    """Declare a function as a saga step: ``@tool(semantics="COMPENSABLE", compensate=...)``.

    Inside a saga each call is a step (gated, logged, undone on failure); outside
    one it calls straight through, unless ``require_boundary=True``. The wrapper
    keeps the function's name, signature and sync/async nature.
    """

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        if semantics is None:
            raise ConfigurationError(
                f"@tool on {getattr(target, '__qualname__', target)!r} needs semantics= "
                "(REVERSIBLE, COMPENSABLE or IRREVERSIBLE); agent-saga never guesses whether an "
                "effect can be undone"
            )
        spec = ToolSpec.for_function(
            target, semantics=semantics, name=name, compensate=compensate, retry=retry,
            timeout=timeout, fallback_action=fallback_action, require_boundary=require_boundary,
        )
        return spec.wrap(target)

    return decorate(fn) if fn is not None else decorate


@overload
def guard(fn: F) -> F: ...


@overload
def guard(
    fn: None = None,
    *,
    wal: WAL | None = None,
    name: str | None = None,
    gate: GatePort | None = None,
    tags: Iterable[str] = (),
) -> Callable[[F], F]: ...


def guard(
    fn: Callable[..., Any] | None = None,
    *,
    wal: WAL | None = None,
    name: str | None = None,
    gate: GatePort | None = None,
    tags: Iterable[str] = (),
) -> Any:
    """Make every call of ``fn`` one transaction (``@saga.guard``, or ``@saga``).

    If ``fn`` raises, every step its tools completed is undone newest-first and
    ``SagaAborted`` is raised. Called inside an existing saga, it joins that saga
    instead of opening a nested one: the outer boundary owns the rollback.
    """
    tag_set = frozenset(tags)

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        label: str = name or getattr(target, "__qualname__", None) or "saga"
        if inspect.iscoroutinefunction(target):

            @functools.wraps(target)
            async def async_boundary(*args: Any, **kwargs: Any) -> Any:
                if current_saga() is not None:
                    return await target(*args, **kwargs)
                async with saga_scope(wal, name=label, gate=gate, tags=tag_set):
                    return await target(*args, **kwargs)

            return async_boundary

        @functools.wraps(target)
        def boundary(*args: Any, **kwargs: Any) -> Any:
            if current_saga() is not None:
                return target(*args, **kwargs)
            with saga_scope(wal, name=label, gate=gate, tags=tag_set):
                return target(*args, **kwargs)

        return boundary

    return decorate(fn) if fn is not None else decorate
