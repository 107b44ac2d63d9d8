"""What ``patch_all()`` installs for the OpenAI Agents SDK.

Every ``@function_tool`` is invoked through the SDK's failure-handling invoker,
which calls the tool's implementation and, if it raises, asks the tool's failure
function for a message. The patch runs that same invoker on a per-call copy whose
implementation is a saga step, so the step sees the raw result and exception and
the SDK's error handling is unchanged. Tools from ``wrap_tool`` are left alone.
"""

from __future__ import annotations

import copy
from typing import Any

import wrapt
from agents import tool as sdk_tool

from agent_saga.plugins.patching import Patches
from agent_saga.plugins.support import patched_async
from agent_saga_openai_agents.wrapping import FRAMEWORK, is_wrapped, tool_args

__all__ = ["patch", "unpatch"]

_patches = Patches()
_INVOKER: Any = sdk_tool._FailureHandlingFunctionToolInvoker


def _make(original: Any) -> Any:
    async def call(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tool = getattr(instance, "_function_tool", None)
        if instance is None or tool is None or is_wrapped(tool):
            return await wrapped(*args, **kwargs)
        ctx, raw = args
        impl = instance._invoke_tool_impl

        async def stepped(c: Any, r: str) -> Any:
            return await patched_async(tool.name, FRAMEWORK, id(instance), lambda: impl(c, r), tool_args(r))

        per_call = copy.copy(instance)
        per_call._invoke_tool_impl = stepped
        return await original(per_call, ctx, raw)

    return wrapt.FunctionWrapper(original, call)


def patch() -> list[str]:
    _patches.apply(_INVOKER, "__call__", _make)
    return _patches.targets()


def unpatch() -> list[str]:
    return _patches.revert()
