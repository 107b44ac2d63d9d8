"""Every touch of Pydantic AI beyond its documented API, in one place, checked at import.

* ``Tool.function_schema`` (a dataclass holding ``function``): what a run calls, through
  ``FunctionSchema.call``. ``wrap_tool`` puts the step there, on a copy of the tool and of its
  schema, so the JSON schema, validator and description stay the ones Pydantic AI built from
  the original function (building them again from the step would lose docstring parameter
  descriptions and a custom ``function_schema``).
* ``FunctionToolsetTool.call_func``: the bound ``FunctionSchema.call`` of the tool a run is
  about to call; ``patch_all()`` reads the function behind it to tell a wrapped tool apart,
  and for a sync function (``FunctionSchema.is_async`` false: Pydantic AI runs it on a worker
  thread) calls a per-call copy of the tool whose schema holds the step instead
  (:func:`calling`), so Pydantic AI's own argument handling and thread stay around it.
* ``Agent.run``'s ``capabilities=`` (documented, but not in every supported release): whether a
  run helper can add :class:`~agent_saga_pydantic_ai.PlannedCalls` to one run
  (:data:`RUN_TAKES_CAPABILITIES`); a release without it takes capabilities on the ``Agent`` only.
  ``Agent.root_capability.apply`` (2.x): whether the agent has one already (:func:`has_capability`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import typing
from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai._function_schema import FunctionSchema
from pydantic_ai.toolsets import FunctionToolset

from agent_saga.adapter import check_compat

__all__ = [
    "RUN_TAKES_CAPABILITIES", "calling", "context_params", "function_of", "function_of_call", "has_capability",
    "thread_function", "with_function",
]

#: Whether one run takes capabilities of its own (``agent.run(..., capabilities=[...])``):
#: pydantic-ai-slim 2.x does, 1.71 takes them on the ``Agent`` only.
RUN_TAKES_CAPABILITIES = all(
    "capabilities" in inspect.signature(run).parameters for run in (Agent.run, Agent.run_sync)
)


def has_capability(agent: Agent[Any, Any], kind: type[Any]) -> bool:
    """Whether ``agent`` was built with a capability of ``kind`` (False where the release cannot say)."""
    root = getattr(agent, "root_capability", None)
    if root is None:
        return False
    found: list[Any] = []
    root.apply(lambda capability: found.append(capability) if isinstance(capability, kind) else None)
    return bool(found)


def function_of(tool: Tool[Any]) -> Callable[..., Any]:
    return tool.function


def with_function(tool: Tool[Any], fn: Callable[..., Any]) -> Tool[Any]:
    """A copy of ``tool`` (same class, name, description, schema, validator) that calls ``fn``."""
    fresh = copy.copy(tool)
    fresh.function = fn
    fresh.function_schema = dataclasses.replace(tool.function_schema, function=fn)
    return fresh


def function_of_call(toolset_tool: Any) -> Callable[..., Any] | None:
    """The function a function toolset's tool calls (None for a tool of any other toolset)."""
    schema = getattr(getattr(toolset_tool, "call_func", None), "__self__", None)
    fn = getattr(schema, "function", None)
    return fn if callable(fn) else None


def thread_function(toolset_tool: Any) -> Callable[..., Any] | None:
    """The sync function a function toolset's tool runs on a worker thread; None for an async one or another toolset's."""
    schema = getattr(getattr(toolset_tool, "call_func", None), "__self__", None)
    if not isinstance(schema, FunctionSchema) or schema.is_async:
        return None
    return schema.function


def calling(toolset_tool: Any, fn: Callable[..., Any]) -> Any:
    """A copy of ``toolset_tool`` (one :func:`thread_function` gave a function for) that runs ``fn`` in its place.

    ``fn`` gets the arguments Pydantic AI makes of the validated ones (the ``RunContext``
    first when the function takes it), on the thread it would run the function on.
    """
    schema = dataclasses.replace(toolset_tool.call_func.__self__, function=fn)
    return dataclasses.replace(toolset_tool, call_func=schema.call)


def context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The first parameter when it takes Pydantic AI's ``RunContext`` (the framework fills it).

    Pydantic AI's own rule (``takes_ctx``): the first parameter, annotated ``RunContext`` or
    ``RunContext[...]``. Annotations that do not resolve are read as written.
    """
    try:
        first = next(iter(inspect.signature(fn).parameters.values()))
    except (StopIteration, TypeError, ValueError):
        return ()
    try:
        annotation = typing.get_type_hints(fn).get(first.name, first.annotation)
    except Exception:  # noqa: BLE001 - an unresolvable hint: fall back to the text as written
        annotation = first.annotation
    if isinstance(annotation, str):
        takes = annotation.split("[", 1)[0].rsplit(".", 1)[-1] == "RunContext"
    else:
        takes = annotation is RunContext or typing.get_origin(annotation) is RunContext
    return (first.name,) if takes else ()


def _fits() -> bool:
    def probe(x: int) -> int:
        return x

    def other(x: int) -> int:
        return x

    tool = Tool(probe)
    copied = with_function(tool, other)
    return (
        function_of(tool) is probe
        and copied.function_schema.function is other
        and copied.function_schema.json_schema == tool.function_schema.json_schema
        and callable(getattr(tool.function_schema, "call", None))
        and callable(vars(FunctionToolset).get("call_tool"))
        and list(inspect.signature(FunctionToolset.call_tool).parameters) == ["self", "name", "tool_args", "ctx", "tool"]
        and dataclasses.is_dataclass(FunctionSchema) and "is_async" in {f.name for f in dataclasses.fields(FunctionSchema)}
    )


check_compat(
    "agent-saga-pydantic-ai", "pydantic_ai", _fits,
    "the installed pydantic-ai no longer has Tool.function_schema.function, FunctionSchema.call "
    "and .is_async, or FunctionToolset.call_tool(name, tool_args, ctx, tool)",
)
