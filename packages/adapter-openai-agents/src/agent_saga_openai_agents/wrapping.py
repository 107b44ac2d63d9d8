"""``wrap_tool`` for ``agents.FunctionTool``.

A tool made by ``@function_tool`` keeps the Python function it wraps
(``tool.__wrapped__``): the copy gets a fresh invoker over a saga-step wrapper of
that function, so the step sees the function's raw result and raw exception, *inside*
the SDK's failure handling (which still turns the exception into a message for the
model). Name, description, JSON schema, guardrails and timeouts are the original's.
A hand-built FunctionTool (no Python function behind it) has its ``on_invoke_tool``
wrapped instead.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import typing
from collections.abc import Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool

from agent_saga.engine.retry import RetryPolicy
from agent_saga.plugins.support import SPEC_ATTR, step_async, step_sync
from agent_saga.registry import CompensationFactory
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["FRAMEWORK", "is_wrapped", "tool_args", "wrap_tool", "wrap_with_spec"]

FRAMEWORK = "openai_agents"


def tool_args(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as the log records them."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {"input": raw}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def _takes_context(fn: Callable[..., Any]) -> bool:
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        return False
    try:
        hint = typing.get_type_hints(fn).get(params[0].name)
    except Exception:  # noqa: BLE001 - unresolvable annotations: the SDK would not see a context either
        return False
    origin = typing.get_origin(hint) or hint
    return isinstance(origin, type) and issubclass(origin, RunContextWrapper)


def _step_function(spec: ToolSpec, fn: Callable[..., Any], with_context: bool) -> Callable[..., Any]:
    # The run context is not an argument the log can hold: bind it into the forward call.
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            if with_context:
                return await step_async(spec, functools.partial(fn, args[0]), args[1:], kwargs, FRAMEWORK)
            return await step_async(spec, fn, args, kwargs, FRAMEWORK)

        wrapper: Callable[..., Any] = async_step
    else:

        @functools.wraps(fn)
        def sync_step(*args: Any, **kwargs: Any) -> Any:
            if with_context:
                return step_sync(spec, functools.partial(fn, args[0]), args[1:], kwargs, FRAMEWORK)
            return step_sync(spec, fn, args, kwargs, FRAMEWORK)

        wrapper = sync_step
    setattr(wrapper, SPEC_ATTR, spec)
    return wrapper


def _function_of(tool: FunctionTool) -> Callable[..., Any] | None:
    try:
        return tool.__wrapped__
    except AttributeError:
        return None


def is_wrapped(tool: FunctionTool) -> bool:
    """Whether ``tool`` came out of ``wrap_tool``."""
    fn = _function_of(tool)
    return getattr(fn if fn is not None else tool.on_invoke_tool, SPEC_ATTR, None) is not None


def wrap_with_spec(tool: FunctionTool, spec: ToolSpec) -> FunctionTool:
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"wrap_tool takes an agents.FunctionTool, got {type(tool).__name__}")
    if is_wrapped(tool):
        raise ValueError(f"tool {tool.name!r} is already wrapped; wrap the original tool once")
    fn = _function_of(tool)
    wrapped = copy.copy(tool)
    if fn is not None:
        with_context = _takes_context(fn)
        fresh = function_tool(
            _step_function(spec, fn, with_context), name_override=tool.name,
            description_override=tool.description, strict_mode=tool.strict_json_schema,
        )
        wrapped.on_invoke_tool = fresh.on_invoke_tool
        FunctionTool.__post_init__(wrapped)  # type: ignore[no-untyped-call]  # bind the fresh invoker to the copy, as the SDK's copy does
        return wrapped
    original = tool.on_invoke_tool

    async def on_invoke_tool(ctx: Any, raw: str) -> Any:
        async def forward(**_logged: Any) -> Any:
            return await original(ctx, raw)

        return await step_async(spec, forward, (), tool_args(raw), FRAMEWORK)

    setattr(on_invoke_tool, SPEC_ATTR, spec)
    wrapped.on_invoke_tool = on_invoke_tool
    return wrapped


def wrap_tool(
    tool: FunctionTool,
    *,
    semantics: ActionSemantics | str,
    compensate: CompensationFactory | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    fallback_action: Callable[..., Any] | None = None,
    require_boundary: bool = False,
) -> FunctionTool:
    """Make every call of ``tool`` a saga step (outside a saga it calls straight through).

    ``compensate`` maps the tool function's raw return value to a ``Compensation``.
    """
    fn = _function_of(tool) if isinstance(tool, FunctionTool) else None
    signature = None
    if fn is not None:
        signature = inspect.signature(fn)
        if _takes_context(fn):
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
    spec = ToolSpec.of(
        tool.name, semantics=semantics, compensate=compensate, retry=retry,
        timeout=timeout, fallback_action=fallback_action, require_boundary=require_boundary,
        signature=signature,
    )
    return wrap_with_spec(tool, spec)
