"""``wrap_tool``: a LangChain tool whose every call is a step of the current saga.

Function-backed tools (``@tool``, ``StructuredTool``, ``Tool``) are copied with their
``func`` / ``coroutine`` replaced, so the copy is the same class with the same name,
description and ``args_schema``. The saga wrapper sits inside the tool, so it sees
the tool's own exception even when a ToolNode turns it into an error message.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from langchain_core.tools import BaseTool, StructuredTool, Tool

from agent_saga.engine.retry import RetryPolicy
from agent_saga.plugins.support import SPEC_ATTR, step_async, step_sync
from agent_saga.registry import CompensationFactory
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["FRAMEWORK", "is_wrapped", "wrap_tool", "wrap_with_spec"]

FRAMEWORK = "langgraph"
T = TypeVar("T", bound=BaseTool)


def _sync(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def saga_step(*args: Any, **kwargs: Any) -> Any:
        return step_sync(spec, fn, args, kwargs, FRAMEWORK)

    setattr(saga_step, SPEC_ATTR, spec)
    return saga_step


def _async(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def saga_step(*args: Any, **kwargs: Any) -> Any:
        return await step_async(spec, fn, args, kwargs, FRAMEWORK)

    setattr(saga_step, SPEC_ATTR, spec)
    return saga_step


def is_wrapped(tool: BaseTool) -> bool:
    """Whether ``tool`` came out of ``wrap_tool`` (its calls are steps already)."""
    return any(getattr(getattr(tool, attr, None), SPEC_ATTR, None) is not None for attr in ("func", "coroutine"))


def wrap_with_spec(tool: T, spec: ToolSpec) -> T:
    """``tool`` as a saga step described by ``spec``; same class, name, description, schema."""
    if not isinstance(tool, (StructuredTool, Tool)):
        raise TypeError(
            f"wrap_tool supports function-backed LangChain tools (@tool, StructuredTool, Tool); "
            f"{type(tool).__name__} overrides _run itself. Build it with StructuredTool.from_function, "
            "or classify it in a tool policy and use agent_saga.patch_all()"
        )
    if is_wrapped(tool):
        raise ValueError(f"tool {tool.name!r} is already wrapped; wrap the original tool once")
    update: dict[str, Any] = {}
    if tool.func is not None:
        update["func"] = _sync(spec, tool.func)
    if tool.coroutine is not None:
        update["coroutine"] = _async(spec, tool.coroutine)
    return cast(T, tool.model_copy(update=update))


def wrap_tool(
    tool: T,
    *,
    semantics: ActionSemantics | str,
    compensate: CompensationFactory | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    fallback_action: Callable[..., Any] | None = None,
    require_boundary: bool = False,
) -> T:
    """Make every call of ``tool`` a saga step (outside a saga it calls straight through).

    ``compensate`` maps the tool function's raw return value to a ``Compensation``.
    """
    fn = tool.func if isinstance(tool, (StructuredTool, Tool)) and tool.func is not None else getattr(tool, "coroutine", None)
    try:
        signature = inspect.signature(fn) if fn is not None else None
    except (TypeError, ValueError):
        signature = None
    spec = ToolSpec.of(
        tool.name, semantics=semantics, compensate=compensate, retry=retry,
        timeout=timeout, fallback_action=fallback_action, require_boundary=require_boundary,
        signature=signature,
    )
    return wrap_with_spec(tool, spec)
