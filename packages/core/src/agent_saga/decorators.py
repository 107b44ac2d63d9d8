"""Decorators: ``@tool`` makes a function a saga step, ``@guard`` makes one a boundary."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, Unpack, overload

from agent_saga.context import Boundary
from agent_saga.engine.saga_options import SagaKwargs, SagaOptions
from agent_saga.engine.step_options import StepKwargs, StepOptions
from agent_saga.errors import ConfigurationError
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["guard", "tool"]

F = TypeVar("F", bound=Callable[..., Any])


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    semantics: ActionSemantics | str | None = None,
    name: str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> Any:
    """Declare a function as a saga step: ``@tool(semantics="COMPENSABLE", compensate=...)``.

    Inside a saga each call is a step (gated, logged, undone on failure); outside
    one it calls straight through, unless ``require_boundary=True``. The wrapper
    keeps the function's name, signature and sync/async nature. Every step option
    (see :class:`~agent_saga.StepOptions`) is accepted as a keyword.
    """

    if semantics is None and options is None:
        where = f" on {getattr(fn, '__qualname__', fn)!r}" if fn is not None else ""
        raise ConfigurationError(
            f"@tool{where} needs semantics= (REVERSIBLE, COMPENSABLE or IRREVERSIBLE); agent-saga "
            "never guesses whether an effect can be undone"
        )
    step_options = StepOptions.build(options, semantics, more)  # a bad option fails at decoration

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        return ToolSpec.for_function(target, name=name, options=step_options).wrap(target)

    return decorate(fn) if fn is not None else decorate


@overload
def guard(fn: F) -> F: ...


@overload
def guard(
    fn: None = None, *, options: SagaOptions | None = None, **more: Unpack[SagaKwargs]
) -> Callable[[F], F]: ...


def guard(
    fn: Callable[..., Any] | None = None, *, options: SagaOptions | None = None, **more: Unpack[SagaKwargs]
) -> Any:
    """Make every call of ``fn`` one transaction (``@saga.guard``, or ``@saga``).

    If ``fn`` raises, every step its tools completed is undone newest-first and
    ``SagaAborted`` is raised. Called inside an existing saga, it joins that saga
    instead of opening a nested one: the outer boundary owns the rollback. Takes every
    saga option (see :class:`~agent_saga.SagaOptions`); the name defaults to ``fn``'s.
    """
    given = SagaOptions.build(options, more)  # a bad option fails at decoration

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        saga_options = SagaOptions.build(given, name=getattr(target, "__qualname__", None))

        def boundary() -> Boundary:
            return Boundary(options=saga_options, join=True)

        if inspect.iscoroutinefunction(target):

            @functools.wraps(target)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                async with boundary():
                    return await target(*args, **kwargs)

            return async_guarded

        @functools.wraps(target)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            with boundary():
                return target(*args, **kwargs)

        return guarded

    return decorate(fn) if fn is not None else decorate
