"""Every touch of LlamaIndex beyond its documented API, in one place, checked at import.

* ``FunctionTool._callback`` / ``_async_callback`` (private): the callbacks a tool was
  built with. ``wrap_tool`` builds the wrapped tool with the public constructor and
  hands them on; the constructor is the only place they can be given.
* ``FunctionTool._async_fn`` (private): what ``acall`` awaits; for a sync function,
  ``sync_to_async(fn)``, a closure over ``fn`` that runs it on the loop's executor.
  ``patch_all()`` reads ``fn`` there (:func:`thread_function`) and calls ``acall`` on a
  per-call copy whose ``_async_fn`` is ``sync_to_async`` of the step (:func:`calling`).
* Which parameter of a tool function LlamaIndex fills with the workflow ``Context``
  (one annotated ``Context`` or ``Context[...]``): the rule is LlamaIndex's own
  (``ctx_param_name``), repeated here because the adapter sees the function before
  any tool exists.

If the installed llama-index-core no longer looks like this, importing the adapter
fails here, naming the supported range, instead of dropping callbacks or logging a
workflow context.
"""

# No ``from __future__ import annotations``: the probe below needs its ``Context``
# annotation as the class itself, which is what LlamaIndex recognises.
import copy
import inspect
import typing
from collections.abc import Callable
from typing import Any

from llama_index.core.tools import FunctionTool
from llama_index.core.tools.function_tool import sync_to_async
from llama_index.core.workflow import Context

from agent_saga.adapter import check_compat

__all__ = ["callbacks", "calling", "context_params", "thread_function"]


def callbacks(tool: FunctionTool) -> dict[str, Any]:
    """The keyword arguments that give a new ``FunctionTool`` the callbacks of ``tool``."""
    return {"callback": tool._callback, "async_callback": tool._async_callback}


def _probe_fn(text: str) -> str:
    return text


#: The code of what ``sync_to_async`` returns (each is a closure over the sync ``fn``).
_ON_EXECUTOR = sync_to_async(_probe_fn).__code__


def thread_function(tool: FunctionTool) -> Callable[..., Any] | None:
    """The sync function ``tool.acall`` runs on the loop's executor; None when it awaits a coroutine."""
    runs = getattr(tool, "_async_fn", None)
    if getattr(runs, "__code__", None) is not _ON_EXECUTOR:
        return None
    cells = dict(zip(_ON_EXECUTOR.co_freevars, runs.__closure__, strict=True))  # type: ignore[union-attr]
    fn: Callable[..., Any] = cells["fn"].cell_contents
    return fn


def calling(tool: FunctionTool, fn: Callable[..., Any]) -> FunctionTool:
    """A copy of ``tool`` whose ``acall`` runs ``fn`` where it ran its sync function (the loop's executor)."""
    per_call = copy.copy(tool)
    per_call._async_fn = sync_to_async(fn)
    return per_call


def context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` that LlamaIndex fills with the workflow ``Context``."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(
        p.name for p in parameters if p.annotation is Context or typing.get_origin(p.annotation) is Context
    )


def _fits() -> bool:
    def probe(ctx: Context, text: str) -> str:
        """Probe."""
        return text

    def on_result(result: Any) -> None:
        return None

    tool = FunctionTool.from_defaults(probe, callback=on_result)
    return (
        tool.ctx_param_name == "ctx" and context_params(probe) == ("ctx",) and callbacks(tool)["callback"] is on_result
        and _ON_EXECUTOR.co_freevars == ("fn",) and thread_function(tool) is probe
        and thread_function(FunctionTool.from_defaults(async_fn=_aprobe)) is None
    )


async def _aprobe(text: str) -> str:
    """Probe."""
    return text


check_compat(
    "agent-saga-llamaindex", "llamaindex", _fits,
    "the installed llama-index-core no longer keeps a FunctionTool's callbacks in _callback/_async_callback, "
    "no longer runs a sync function's acall through _async_fn = sync_to_async(fn), "
    "or no longer fills the parameter annotated Context",
)
