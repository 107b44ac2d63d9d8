"""Every touch of AutoGen beyond its documented API, in one place, checked at import.

* ``FunctionTool._func`` (private): the function a tool calls. ``wrap_tool`` reads it
  (the public constructor then builds the wrapped tool); ``patch_all()`` runs a sync
  tool on a per-call copy whose function is the step, carrying the saga onto AutoGen's
  executor thread (:func:`with_function`).
* ``FunctionTool(func)`` reads ``func``'s annotations against ``func.__globals__``: a
  wrapper defined here would resolve the user's names in this module, so it carries
  them resolved (:func:`reads_as`).
* ``BaseTool.run_json`` calls ``self.run``: a custom tool is wrapped by a copy with
  its own ``run`` (:func:`with_run`).

If the installed autogen-core no longer looks like this, importing the adapter fails
here, naming the supported range, instead of wrapping what AutoGen no longer calls.
"""

from __future__ import annotations

import copy
import functools
import typing
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from autogen_core import CancellationToken
from autogen_core.tools import BaseTool, FunctionTool

from agent_saga.adapter import check_compat

__all__ = ["function_of", "own_run", "reads_as", "with_function", "with_run"]

T = TypeVar("T", bound=BaseTool[Any, Any])
F = TypeVar("F", bound=Callable[..., Any])


def function_of(tool: FunctionTool) -> Callable[..., Any]:
    """The function ``tool`` calls."""
    return tool._func


def with_function(tool: FunctionTool, fn: Callable[..., Any]) -> FunctionTool:
    """A copy of ``tool`` that calls ``fn`` (same name, schema and cancellation support)."""
    per_call = copy.copy(tool)
    per_call._func = fn
    return per_call


def reads_as(wrapper: F, fn: Callable[..., Any]) -> F:
    """``wrapper`` (a ``functools.wraps`` of ``fn``) with ``fn``'s annotations resolved in ``fn``'s module."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    wrapper.__annotations__ = typing.get_type_hints(target, include_extras=True)
    return wrapper


def with_run(tool: T, run: Callable[..., Coroutine[Any, Any, Any]]) -> T:
    """A copy of ``tool`` whose ``run_json`` (where AutoGen calls every tool) calls ``run``."""
    wrapped = copy.copy(tool)
    wrapped.run = run  # type: ignore[method-assign]
    return wrapped


def own_run(tool: BaseTool[Any, Any]) -> Callable[..., Any] | None:
    """The ``run`` :func:`with_run` gave ``tool``, if any."""
    return vars(tool).get("run") if hasattr(tool, "__dict__") else None


def _result(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """What a coroutine that never suspends returns (no event loop needed at import)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise TypeError("the probe suspended")


def _fits() -> bool:
    async def probe(x: int) -> int:
        return x

    async def other(x: int) -> int:
        return -x

    tool = FunctionTool(probe, description="Probe.")
    return (
        _result(with_function(tool, other).run(tool.args_type()(x=2), CancellationToken())) == -2
        and function_of(tool) is probe  # the copy's function is its own
        and "run" in BaseTool.run_json.__code__.co_names
    )


check_compat(
    "agent-saga-autogen", "autogen", _fits,
    "the installed autogen-core no longer calls a FunctionTool's function as _func, "
    "or BaseTool.run_json no longer calls self.run",
)
