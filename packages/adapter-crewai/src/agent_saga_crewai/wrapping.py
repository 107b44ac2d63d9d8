"""``wrap_tool``: a CrewAI tool whose every call is a step of the current saga.

A function-backed ``Tool`` (what ``@tool`` makes) is copied with its ``func``
replaced; a ``BaseTool`` subclass is copied with its own ``_run`` / ``_arun`` bound
on the copy. Either way the copy is the same class with the same name, description
and ``args_schema``, and the saga wrapper sits inside the tool: CrewAI turns a tool
exception into text for the model, but the step still sees the raw exception.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, Unpack

from crewai.tools import BaseTool
from crewai.tools.base_tool import Tool

from agent_saga.engine.options import StepKwargs, StepOptions
from agent_saga.plugins.support import SPEC_ATTR, step_async, step_sync
from agent_saga.semantics import ActionSemantics
from agent_saga.toolspec import ToolSpec

__all__ = ["FRAMEWORK", "is_wrapped", "wrap_tool", "wrap_with_spec"]

FRAMEWORK = "crewai"
T = TypeVar("T", bound=BaseTool)


def _step(spec: ToolSpec, fn: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_step(*args: Any, **kwargs: Any) -> Any:
            return await step_async(spec, fn, args, kwargs, FRAMEWORK)

        wrapper: Callable[..., Any] = async_step
    else:

        @functools.wraps(fn)
        def sync_step(*args: Any, **kwargs: Any) -> Any:
            return step_sync(spec, fn, args, kwargs, FRAMEWORK)

        wrapper = sync_step
    setattr(wrapper, SPEC_ATTR, spec)
    return wrapper


def _own(tool: BaseTool, attr: str) -> Any:
    # A bound override lives in the instance dict, where pydantic keeps no field.
    return tool.__dict__.get(attr)


def is_wrapped(tool: Any) -> bool:
    """Whether ``tool`` came out of ``wrap_tool`` (its calls are steps already)."""
    if isinstance(tool, Tool) and getattr(tool.func, SPEC_ATTR, None) is not None:
        return True
    return isinstance(tool, BaseTool) and any(
        getattr(_own(tool, attr), SPEC_ATTR, None) is not None for attr in ("_run", "_arun")
    )


def _overrides(tool: BaseTool, attr: str) -> bool:
    return getattr(type(tool), attr) is not getattr(BaseTool, attr)


def wrap_with_spec(tool: T, spec: ToolSpec) -> T:
    """``tool`` as a saga step described by ``spec``; same class, name, description, schema."""
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"wrap_tool takes a CrewAI tool (crewai.tools.BaseTool, or what @tool makes), got "
            f"{type(tool).__name__}; wrap the function with crewai.tools.tool first"
        )
    if is_wrapped(tool):
        raise ValueError(f"tool {tool.name!r} is already wrapped; wrap the original tool once")
    if isinstance(tool, Tool):
        return tool.model_copy(update={"func": _step(spec, tool.func)})
    copy = tool.model_copy()
    # CrewAI calls self._run / self._arun (directly, or as the func of the structured
    # tool it builds per execution); binding the step on the copy reaches both paths.
    object.__setattr__(copy, "_run", _step(spec, tool._run))
    if _overrides(tool, "_arun"):
        object.__setattr__(copy, "_arun", _step(spec, tool._arun))
    return copy


def _signature(tool: BaseTool) -> inspect.Signature | None:
    fn = tool.func if isinstance(tool, Tool) else getattr(tool, "_run", None)
    try:
        return inspect.signature(fn) if fn is not None else None
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

    ``compensate`` maps the tool's raw return value (what ``func`` / ``_run`` returned,
    not the text CrewAI shows the model) to a ``Compensation``.
    """
    if not isinstance(tool, BaseTool):
        raise TypeError(
            f"wrap_tool takes a CrewAI tool (crewai.tools.BaseTool, or what @tool makes), got "
            f"{type(tool).__name__}; wrap the function with crewai.tools.tool first"
        )
    spec = ToolSpec.of(name or tool.name, semantics=semantics, options=options, signature=_signature(tool), **more)
    return wrap_with_spec(tool, spec)
