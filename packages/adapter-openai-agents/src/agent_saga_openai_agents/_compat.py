"""Every touch of the OpenAI Agents SDK beyond its documented API, in one place, checked at import.

``wrap_tool`` needs none: it builds the step-making invoker with the public
``function_tool`` and puts it on a copy of the tool with ``dataclasses.replace``.
``patch_all()`` has no public seam, because the SDK turns a tool's exception into a
message for the model inside the invoker every ``@function_tool`` runs through
(``agents.tool._FailureHandlingFunctionToolInvoker``): the patch replaces that
invoker's ``__call__`` and runs its implementation (``_invoke_tool_impl``) for its
tool (``_function_tool``) on a per-call copy. For a sync function the step is the
function itself: the implementation ``@function_tool`` builds is a closure over
``the_func`` (run with ``asyncio.to_thread`` when ``is_sync_function_tool``), and the
per-call copy is the same code over the same cells but that one (:func:`calling`), so
the SDK's parsing, context, thread and output check stay its own. If the installed SDK
no longer looks like this, importing the adapter fails here, naming the supported range.
"""

from __future__ import annotations

import copy
import inspect
import types
import typing
from collections.abc import Awaitable, Callable
from typing import Any

from agents import FunctionTool, RunContextWrapper, function_tool
from agents import tool as _sdk_tool

from agent_saga.adapter import check_compat

__all__ = [
    "INVOKER", "calling", "context_params", "function_of", "implementation", "thread_function", "tool_of",
    "with_implementation",
]

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


def _probe(x: int) -> int:
    """Probe."""
    return x


async def _aprobe(x: int) -> int:
    """Probe."""
    return x


def _built_code() -> types.CodeType | None:
    try:
        code: types.CodeType = implementation(function_tool(_probe).on_invoke_tool).__code__
    except AttributeError:  # the SDK moved: _fits fails the import with the supported range
        return None
    return code


#: The code of the implementation ``@function_tool`` builds (each tool's is a closure over it).
_IMPL_CODE = _built_code()


def _cells(impl: Any) -> dict[str, types.CellType] | None:
    """The closure of an implementation ``@function_tool`` built, by name; None for any other."""
    if _IMPL_CODE is None or getattr(impl, "__code__", None) is not _IMPL_CODE:
        return None
    return dict(zip(impl.__code__.co_freevars, impl.__closure__, strict=True))


def thread_function(impl: Any) -> Callable[..., Any] | None:
    """The sync function ``impl`` runs on a worker thread; None for an async function or a hand-built tool."""
    cells = _cells(impl)
    if cells is None or not cells["is_sync_function_tool"].cell_contents:
        return None
    fn: Callable[..., Any] = cells["the_func"].cell_contents
    return fn


def calling(impl: Any, fn: Callable[..., Any]) -> Implementation:
    """A copy of ``impl`` (one :func:`thread_function` gave a function for) that runs ``fn`` in its place.

    Same code, same cells but ``the_func``: ``fn`` is called on the SDK's worker thread with
    the arguments (and run context) the SDK prepared, and its result is checked as the SDK
    checks the function's.
    """
    cells = _cells(impl)
    assert cells is not None
    closure = tuple(types.CellType(fn) if name == "the_func" else cell for name, cell in cells.items())
    copied = types.FunctionType(impl.__code__, impl.__globals__, impl.__name__, impl.__defaults__, closure)
    copied.__kwdefaults__ = impl.__kwdefaults__
    copied.__dict__.update(impl.__dict__)  # the SDK's markers (its argument preparation, the wrapped callable)
    return copied


def _fits() -> bool:
    tool = function_tool(_probe)
    invoker = tool.on_invoke_tool
    cells = _cells(implementation(invoker))
    return (
        isinstance(invoker, INVOKER) and "__call__" in vars(INVOKER) and function_of(tool) is _probe
        and tool_of(invoker) is tool and callable(implementation(invoker))
        and cells is not None and {"the_func", "is_sync_function_tool"} <= set(cells)
        and thread_function(implementation(invoker)) is _probe
        and thread_function(implementation(function_tool(_aprobe).on_invoke_tool)) is None
    )


check_compat(
    "agent-saga-openai-agents", "openai_agents", _fits,
    "the installed openai-agents no longer runs a @function_tool through "
    "agents.tool._FailureHandlingFunctionToolInvoker(_invoke_tool_impl, _function_tool), or no longer "
    "builds that implementation as a closure over the_func and is_sync_function_tool",
)
