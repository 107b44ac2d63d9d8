"""What ``patch_all()`` installs for AutoGen: ``BaseTool.run_json``.

``run_json`` is where every AutoGen tool (``FunctionTool`` and custom ``BaseTool``
subclasses alike) is called with the model's arguments; it returns the tool's raw
result, which the policy's JSON paths read. Inside a saga, a ``FunctionTool`` over a
sync function runs on a per-call copy whose function is bound to the caller's
context, so the saga reaches AutoGen's executor thread. Tools from ``wrap_tool`` are
left alone.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import wrapt
from autogen_core.tools import BaseTool, FunctionTool

from agent_saga.context import current_saga
from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_async
from agent_saga_autogen.carry import in_callers_context
from agent_saga_autogen.wrapping import FRAMEWORK, is_wrapped

__all__ = ["patch", "unpatch"]

_patches = Patches()


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    given = args[0] if args else kwargs.get("args", {})
    return dict(given) if isinstance(given, Mapping) else {"args": repr(given)}


def _carried(instance: Any) -> Any:
    if not isinstance(instance, FunctionTool) or FunctionTool.run is not type(instance).run:
        return instance
    if asyncio.iscoroutinefunction(instance._func):
        return instance  # runs on the loop, in the caller's context already
    proxy = copy.copy(instance)
    proxy._func = in_callers_context(instance._func)
    return proxy


async def _run_json(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if instance is None or is_wrapped(instance) or current_saga() is None:
        return await wrapped(*args, **kwargs)
    original = wrapped.__func__

    def call() -> Any:
        return original(_carried(instance), *args, **kwargs)

    return await patched_async(instance.name, FRAMEWORK, id(instance), call, _tool_args(args, kwargs))


def patch() -> list[str]:
    _patches.apply(BaseTool, "run_json", lambda original: wrapt.FunctionWrapper(original, _run_json))
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
