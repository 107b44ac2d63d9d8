"""Every touch of the OpenAI Agents SDK beyond its documented API, in one place, checked at import.

``wrap_tool`` needs none: it builds the step-making invoker with the public
``function_tool`` and puts it on a copy of the tool with ``dataclasses.replace``.
``patch_all()`` has no public seam, because the SDK turns a tool's exception into a
message for the model inside the invoker every ``@function_tool`` runs through
(``agents.tool._FailureHandlingFunctionToolInvoker``): the patch replaces that
invoker's ``__call__`` and runs its implementation (``_invoke_tool_impl``) for its
tool (``_function_tool``) as a step, on a per-call copy. If the installed SDK no
longer looks like this, importing the adapter fails here, naming the supported range.
"""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool
from agents import tool as _sdk_tool

from agent_saga.adapter import check_compat

__all__ = ["INVOKER", "context_params", "function_of", "implementation", "tool_of", "with_implementation"]

#: The failure-handling invoker every ``@function_tool`` tool runs through (NoneType when the
#: SDK no longer has it: then ``_fits`` below fails the import).
INVOKER: type[Any] = getattr(_sdk_tool, "_FailureHandlingFunctionToolInvoker", type(None))
Implementation = Callable[[Any, str], Awaitable[Any]]


def function_of(tool: FunctionTool) -> Callable[..., Any] | None:
    """The Python function ``@function_tool`` made ``tool`` from; None for a hand-built tool."""
    try:
        return tool.__wrapped__
    except AttributeError:
        return None


def context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The run-context parameter the SDK fills (the first, annotated ``RunContextWrapper``), if any."""
    params = list(inspect.signature(fn).parameters)
    if not params:
        return ()
    try:
        hint = typing.get_type_hints(fn).get(params[0])
    except Exception:  # noqa: BLE001 - unresolvable annotations: the SDK would not see a context either
        return ()
    origin = typing.get_origin(hint) or hint
    return (params[0],) if isinstance(origin, type) and issubclass(origin, RunContextWrapper) else ()


def tool_of(invoker: Any) -> FunctionTool | None:
    """The tool an invoker runs for."""
    return invoker._function_tool  # type: ignore[no-any-return]


def implementation(invoker: Any) -> Implementation:
    """What the invoker calls inside its failure handling: ``await impl(ctx, json_arguments)``."""
    return invoker._invoke_tool_impl  # type: ignore[no-any-return]


def with_implementation(invoker: Any, impl: Implementation) -> Any:
    """A copy of ``invoker`` that calls ``impl`` instead (the original is shared by every run)."""
    per_call = copy.copy(invoker)
    per_call._invoke_tool_impl = impl
    return per_call


def _fits() -> bool:
    def probe(x: int) -> int:
        """Probe."""
        return x

    tool = function_tool(probe)
    invoker = tool.on_invoke_tool
    return (
        isinstance(invoker, INVOKER) and "__call__" in vars(INVOKER) and function_of(tool) is probe
        and tool_of(invoker) is tool and callable(implementation(invoker))
    )


check_compat(
    "agent-saga-openai-agents", "openai_agents", _fits,
    "the installed openai-agents no longer runs a @function_tool through "
    "agents.tool._FailureHandlingFunctionToolInvoker(_invoke_tool_impl, _function_tool)",
)
