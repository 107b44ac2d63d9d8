"""Every touch of LlamaIndex beyond its documented API, in one place, checked at import.

* ``FunctionTool._callback`` / ``_async_callback`` (private): the callbacks a tool was
  built with. ``wrap_tool`` builds the wrapped tool with the public constructor and
  hands them on; the constructor is the only place they can be given.
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
import inspect
import typing
from collections.abc import Callable
from typing import Any

from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context

from agent_saga.adapter import check_compat

__all__ = ["callbacks", "context_params"]


def callbacks(tool: FunctionTool) -> dict[str, Any]:
    """The keyword arguments that give a new ``FunctionTool`` the callbacks of ``tool``."""
    return {"callback": tool._callback, "async_callback": tool._async_callback}


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
    )


check_compat(
    "agent-saga-llamaindex", "llamaindex", _fits,
    "the installed llama-index-core no longer keeps a FunctionTool's callbacks in _callback/_async_callback "
    "or no longer fills the parameter annotated Context",
)
