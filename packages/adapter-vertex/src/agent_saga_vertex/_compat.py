"""Every touch of google-genai beyond its documented API, in one place, checked at import.

Automatic function calling (AFC) takes plain Python functions in ``config.tools``; the SDK
calls each one the model asks for in ``google.genai._extra_utils``:

* ``invoke_function_from_dict_args(args, function_to_invoke)`` (a sync function; the async
  client runs it on ``asyncio.to_thread``) and ``invoke_function_from_dict_args_async(args,
  function_to_invoke)`` (an async one): both convert the model's arguments by the function's
  signature and call it with keywords. ``patch_all()`` polices them there.
* ``get_function_response_parts`` / ``get_function_response_parts_async`` (every model response's
  calls, one after another) look both up as module globals at call time, which is what lets a
  patch of the module attribute reach them.

If the installed google-genai no longer looks like this, importing the adapter fails here,
naming the supported range, instead of patching the wrong thing.
"""

from __future__ import annotations

import inspect
from types import ModuleType

from google.genai import _extra_utils

from agent_saga.adapter import check_compat

__all__ = ["ASYNC_INVOKE", "SYNC_INVOKE", "invokers"]

SYNC_INVOKE, ASYNC_INVOKE = "invoke_function_from_dict_args", "invoke_function_from_dict_args_async"


def invokers() -> ModuleType:
    """The module whose two functions (:data:`SYNC_INVOKE`, :data:`ASYNC_INVOKE`) call a tool."""
    return _extra_utils


def _fits() -> bool:
    sync, asynchronous = getattr(_extra_utils, SYNC_INVOKE), getattr(_extra_utils, ASYNC_INVOKE)
    return (
        not inspect.iscoroutinefunction(sync)
        and inspect.iscoroutinefunction(asynchronous)
        and all(list(inspect.signature(f).parameters) == ["args", "function_to_invoke"] for f in (sync, asynchronous))
        and SYNC_INVOKE in _extra_utils.get_function_response_parts.__code__.co_names
        and {SYNC_INVOKE, ASYNC_INVOKE} <= set(_extra_utils.get_function_response_parts_async.__code__.co_names)
    )


check_compat(
    "agent-saga-vertex", "vertex", _fits,
    "the installed google-genai no longer calls a tool through "
    "_extra_utils.invoke_function_from_dict_args(args, function_to_invoke) and its async twin",
)
