"""Every touch of Strands beyond its documented API, in one place, checked at import.

* ``DecoratedFunctionTool._tool_func``: the function ``stream`` calls with the model's
  validated arguments (plus the injected ``ToolContext`` / ``agent``). ``wrap_tool`` puts the
  step there on a copy of the tool; ``patch_all()`` does it on a copy made for each call.
  Strands turns the function's exception into an error result inside ``stream``, so the step
  must sit inside it to see the exception.
* ``DecoratedFunctionTool._metadata._context_param``: the parameter ``@tool(context=...)``
  fills with the ``ToolContext`` (Strands also fills one named ``agent``); never logged.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from strands import tool
from strands.tools.decorator import DecoratedFunctionTool

from agent_saga.adapter import check_compat

__all__ = ["context_params", "function_of", "is_streaming", "with_function"]


def function_of(tool: DecoratedFunctionTool[..., Any]) -> Callable[..., Any]:
    return tool._tool_func


def with_function(tool: DecoratedFunctionTool[..., Any], fn: Callable[..., Any]) -> DecoratedFunctionTool[..., Any]:
    """A copy of ``tool`` (same class, name, spec, input model) whose ``stream`` calls ``fn``."""
    fresh = copy.copy(tool)
    fresh._tool_func = fn
    return fresh


def context_params(tool: DecoratedFunctionTool[..., Any]) -> tuple[str, ...]:
    """The parameters Strands fills itself: the ``ToolContext`` one, and ``agent``."""
    params = inspect.signature(function_of(tool)).parameters
    context = tool._metadata._context_param
    return tuple(name for name in params if name == context or name == "agent")


def is_streaming(tool: DecoratedFunctionTool[..., Any]) -> bool:
    """An async generator tool: Strands streams its events, and its result is the last one."""
    return inspect.isasyncgenfunction(function_of(tool))


def _fits() -> bool:
    def probe(x: int, tool_context: Any = None) -> int:
        """Probe."""
        return x

    def other(x: int, tool_context: Any = None) -> int:
        return x

    made = tool(context=True)(probe)
    copied = with_function(made, other)
    return (
        isinstance(made, DecoratedFunctionTool)
        and function_of(made) is probe
        and function_of(copied) is other
        and copied.tool_spec == made.tool_spec
        and context_params(made) == ("tool_context",)
        and inspect.isasyncgenfunction(vars(DecoratedFunctionTool).get("stream"))
    )


check_compat(
    "agent-saga-strands", "strands", _fits,
    "the installed strands-agents no longer has DecoratedFunctionTool._tool_func, "
    "DecoratedFunctionTool._metadata._context_param or DecoratedFunctionTool.stream",
)
