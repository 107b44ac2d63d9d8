"""``wrap_tool`` for AutoGen tools (autogen-core >= 0.4).

A ``FunctionTool`` is copied with its function replaced by a saga step; the copy
keeps the original's name, description, argument model and schema (they are
computed from the original signature once, in ``FunctionTool.__init__``). A sync
function becomes an async step that runs the function on the default executor,
as AutoGen would, but inside a copy of the caller's context, so the saga reaches
it. Any other ``BaseTool`` is copied with its ``run`` replaced on the copy.
The wrapper sits inside the tool, so it sees the raw exception that AutoGen's
workbench turns into an ``is_error`` result for the model.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, Unpack

from autogen_core import CancellationToken
from autogen_core.tools import BaseTool, FunctionTool
from pydantic import BaseModel

from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.plugins.support import SPEC_ATTR, step_async, step_sync
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec
from agent_saga_autogen.carry import in_callers_context

__all__ = ["FRAMEWORK", "is_wrapped", "wrap_tool", "wrap_with_spec"]

FRAMEWORK = "autogen"
T = TypeVar("T", bound=BaseTool[Any, Any])


def _split_token(fn: Callable[..., Any], kwargs: dict[str, Any]) -> tuple[Callable[..., Any], dict[str, Any], Any]:
    # A CancellationToken is not an argument the log can hold: bind it into the call.
    if "cancellation_token" not in kwargs:
        return fn, kwargs, None
    rest = dict(kwargs)
    token = rest.pop("cancellation_token")
    return functools.partial(fn, cancellation_token=token), rest, token


def _function_step(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            target, rest, _ = _split_token(fn, kwargs)
            return await step_async(spec, target, args, rest, FRAMEWORK)

    else:

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            # The step runs where AutoGen runs sync functions (the default executor),
            # in a copy of this context: the saga travels with it.
            target, rest, token = _split_token(fn, kwargs)
            step = functools.partial(step_sync, spec, target, args, rest, FRAMEWORK)
            future = asyncio.get_running_loop().run_in_executor(None, in_callers_context(step))
            if isinstance(token, CancellationToken):
                token.link_future(future)
            return await future

    setattr(async_step, SPEC_ATTR, spec)
    return async_step


def _run_step(spec: ToolSpec, tool: BaseTool[Any, Any]) -> Callable[..., Any]:
    original = tool.run  # bound to the original tool
    args_type = tool.args_type()

    async def run(args: BaseModel, cancellation_token: CancellationToken) -> Any:
        async def forward(**fields: Any) -> Any:
            return await original(args_type.model_validate(fields), cancellation_token)

        return await step_async(spec, forward, (), args.model_dump(), FRAMEWORK)

    setattr(run, SPEC_ATTR, spec)
    return run


def is_wrapped(tool: Any) -> bool:
    """Whether ``tool`` came out of ``wrap_tool`` (its calls are steps already)."""
    if isinstance(tool, FunctionTool) and getattr(tool._func, SPEC_ATTR, None) is not None:
        return True
    return getattr(vars(tool).get("run"), SPEC_ATTR, None) is not None if hasattr(tool, "__dict__") else False


def wrap_with_spec(tool: T, spec: ToolSpec) -> T:
    """``tool`` as a saga step described by ``spec``; same class, name, description, schema."""
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"wrap_tool takes an AutoGen tool (autogen_core.tools.FunctionTool or BaseTool), got "
            f"{type(tool).__name__}; make one with FunctionTool(fn, description=...)"
        )
    if is_wrapped(tool):
        raise ValueError(f"tool {tool.name!r} is already wrapped; wrap the original tool once")
    safe = copy.copy(tool)
    if isinstance(tool, FunctionTool) and isinstance(safe, FunctionTool):
        safe._func = _function_step(spec, tool._func)
    else:
        safe.run = _run_step(spec, tool)  # type: ignore[method-assign]
    return safe


def _signature(tool: BaseTool[Any, Any]) -> inspect.Signature | None:
    if not isinstance(tool, FunctionTool):
        return None
    try:
        return inspect.signature(tool._func)
    except (TypeError, ValueError):
        return None


def wrap_tool(
    tool: T,
    *,
    semantics: ActionSemantics | str | None = None,
    name: str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> T:
    """Make every call of ``tool`` a saga step (outside a saga it calls straight through).

    ``compensate`` maps the tool's raw return value (what the function or ``run``
    returned, not the text the model reads) to a ``Compensation``.
    """
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"wrap_tool takes an AutoGen tool (autogen_core.tools.FunctionTool or BaseTool), got "
            f"{type(tool).__name__}; make one with FunctionTool(fn, description=...)"
        )
    spec = ToolSpec.of(name or tool.name, semantics=semantics, options=options, signature=_signature(tool), **more)
    return wrap_with_spec(tool, spec)
