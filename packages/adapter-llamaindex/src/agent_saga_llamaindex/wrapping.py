"""``wrap_tool`` for ``llama_index.core.tools.FunctionTool``.

The copy is a new FunctionTool over a saga-step wrapper of the tool's own function,
with the original ``metadata`` (name, description, ``fn_schema``), callbacks and
partial parameters. The wrapper sits inside the tool, so it sees the raw exception
that LlamaIndex's agents turn into an ``is_error`` ToolOutput for the model.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, Unpack

from llama_index.core.tools import FunctionTool

from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.plugins.support import SPEC_ATTR, step_async, step_sync
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["FRAMEWORK", "is_wrapped", "wrap_tool", "wrap_with_spec"]

FRAMEWORK = "llamaindex"


def _split_context(tool: FunctionTool, kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    # A workflow Context is not an argument the log can hold: bind it into the call.
    name = tool.ctx_param_name
    if name is None or name not in kwargs:
        return {}, kwargs
    rest = dict(kwargs)
    return {name: rest.pop(name)}, rest


def _step(spec: ToolSpec, tool: FunctionTool, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            bound, rest = _split_context(tool, kwargs)
            target = functools.partial(fn, **bound) if bound else fn
            return await step_async(spec, target, args, rest, FRAMEWORK)

        wrapper: Callable[..., Any] = async_step
    else:

        @functools.wraps(fn)
        def sync_step(*args: Any, **kwargs: Any) -> Any:
            bound, rest = _split_context(tool, kwargs)
            target = functools.partial(fn, **bound) if bound else fn
            return step_sync(spec, target, args, rest, FRAMEWORK)

        wrapper = sync_step
    setattr(wrapper, SPEC_ATTR, spec)
    return wrapper


def is_wrapped(tool: FunctionTool) -> bool:
    """Whether ``tool`` came out of ``wrap_tool``."""
    return getattr(tool.real_fn, SPEC_ATTR, None) is not None


def wrap_with_spec(tool: FunctionTool, spec: ToolSpec) -> FunctionTool:
    if not isinstance(tool, FunctionTool):
        raise TypeError(f"wrap_tool takes a llama_index FunctionTool, got {type(tool).__name__}")
    if is_wrapped(tool):
        raise ValueError(f"tool {tool.metadata.name!r} is already wrapped; wrap the original tool once")
    fn = tool.real_fn
    step = _step(spec, tool, fn)
    options: dict[str, Any] = {
        "metadata": tool.metadata,
        "partial_params": dict(tool.partial_params),
        "callback": tool._callback,
        "async_callback": tool._async_callback,
    }
    if inspect.iscoroutinefunction(fn):
        options["async_fn"] = step
    else:
        options["fn"] = step
    return type(tool)(**options)


def wrap_tool(
    tool: FunctionTool,
    *,
    semantics: ActionSemantics | str | None = None,
    name: str | None = None,
    options: StepOptions | None = None,
    **more: Unpack[StepKwargs],
) -> FunctionTool:
    """Make every call of ``tool`` a saga step (outside a saga it calls straight through).

    ``compensate`` maps the tool function's raw return value to a ``Compensation``.
    """
    try:
        signature: inspect.Signature | None = inspect.signature(tool.real_fn)
    except (TypeError, ValueError):
        signature = None
    label = str(tool.metadata.name or getattr(tool.real_fn, "__name__", "tool"))
    spec = ToolSpec.of(name or label, semantics=semantics, options=options, signature=signature, **more)
    return wrap_with_spec(tool, spec)
