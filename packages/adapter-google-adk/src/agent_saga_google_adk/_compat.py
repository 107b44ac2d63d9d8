"""Every touch of google-adk beyond its documented API, in one place, checked at import.

* ``FunctionTool.func`` (documented) on a *copy* of the tool: ``wrap_tool`` puts the step
  there. The constructor is not used for it: it would drop a subclass's state
  (``LongRunningFunctionTool``) and ``require_confirmation``. The copy gets its own
  per-function caches (``_declaration_cache``, ``_compatible_func_cache``,
  ``_generator_node_cache``), which ADK keys on the function.
* ``FunctionTool._ignore_params``: the parameters ADK fills itself (the ``ToolContext``
  parameter, found by its annotation or the name ``tool_context``, and ``input_stream``);
  never the model's arguments, never logged. Read from a ``FunctionTool`` built over the
  function, so ADK's own rule decides.
* ``FunctionTool._invoke_callable(target, args)``: where ADK calls a tool's function with
  the prepared arguments (after its own validation); ``patch_all()`` polices it there. For a
  sync function (which ADK runs inline or on its tool pool's thread) it calls the method on a
  per-call copy whose function is the step (:func:`with_function`), so ADK's own dispatch
  stays around it.
* ``Runner.plugin_manager.plugins`` (the registered plugins, in order): the run helpers register
  ``PlannedCalls`` with the public ``register_plugin`` and take it off this list when the run
  ends (:func:`unregister_plugin`; ADK has no public way to).

If the installed google-adk no longer looks like this, importing the adapter fails here,
naming the supported range, instead of patching the wrong thing.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

from google.adk.tools.function_tool import FunctionTool

from agent_saga.adapter import check_compat

__all__ = ["context_params", "runs_sync", "unregister_plugin", "with_function"]

_CACHES: dict[str, Callable[[], Any]] = {"_declaration_cache": dict, "_compatible_func_cache": lambda: None, "_generator_node_cache": lambda: None}


def unregister_plugin(manager: Any, plugin: Any) -> None:
    """Take ``plugin`` (registered with ``register_plugin``) off ``manager``'s plugins."""
    manager.plugins.remove(plugin)


def context_params(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The parameters of ``fn`` that ADK fills (its ``ToolContext``, ``input_stream``)."""
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    return tuple(p for p in FunctionTool(fn)._ignore_params if p in names)


def runs_sync(tool: FunctionTool) -> bool:
    """Whether ADK calls ``tool``'s function as a plain sync call (inline, or on its tool pool's thread).

    ADK's rule: a coroutine function, or an object whose ``__call__`` is one, is awaited; a
    generator (an async one included) is a streaming tool, whose effect happens as it is read.
    """
    fn: Any = tool.func
    return not any(
        check(f) for f in (fn, fn.__call__) if callable(f)
        for check in (inspect.iscoroutinefunction, inspect.isasyncgenfunction, inspect.isgeneratorfunction)
    )


def with_function(tool: FunctionTool, fn: Callable[..., Any]) -> FunctionTool:
    """A copy of ``tool`` (same class, name, description, declaration, confirmation rule) calling ``fn``."""
    fresh = copy.copy(tool)
    fresh.func = fn
    for attr, empty in _CACHES.items():
        if attr in vars(tool):
            setattr(fresh, attr, empty())
    return fresh


def _fits() -> bool:
    def probe(amount: int, tool_context: Any = None) -> int:
        return amount

    tool = FunctionTool(probe)
    return (
        tool.func is probe
        and context_params(probe) == ("tool_context",)
        and inspect.iscoroutinefunction(vars(FunctionTool).get("_invoke_callable"))
        and list(inspect.signature(FunctionTool._invoke_callable).parameters) == ["self", "target", "args_to_call"]
    )


check_compat(
    "agent-saga-google-adk", "google_adk", _fits,
    "the installed google-adk no longer has FunctionTool.func, FunctionTool._ignore_params "
    "or FunctionTool._invoke_callable(target, args_to_call)",
)
